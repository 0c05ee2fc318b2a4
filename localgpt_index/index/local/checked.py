"""Which vectors files a writer checked whole (`checked.json`): the next writer reads only those changed since.

A writer names every block of its base generation in the generation it commits, so it checks
them all before it starts (`LocalStore._base`). At 100,000 pages that is 26 GB read by every
incremental build. The record lets it skip a file whose identity and state are those it had when
a writer of this user last hashed it whole against the same checksums:

- an entry is keyed by the segment, the sha256 of the checksums the file was checked against, and
  the file's (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns), taken from the descriptor that
  is hashed and mapped. Any write to a file, a rename, a link, a chmod or os.utime moves its ctime,
  which no user tool can set back; a replaced file is another inode;
- an entry is made only for a file whose ctime and mtime are more than RACY_NS older than the start
  of the check (git's "racily clean" entries): a change within the same timestamp tick as the
  check could leave them unchanged;
- the record carries an HMAC-SHA256 under a key of this user's (`record_key`, a 0600 file in the
  user's cache folder): a record edited, damaged, copied from another user's index or written by
  anyone without the key is ignored as a whole, and every file is read again.

Readers never read or write it: they check each block when they first read it, and `verify` reads
everything. What it cannot see: bytes changed under the file system (a failing disk, a raw write to
the device) change no timestamp; readers and `verify` still find them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from pathlib import Path

import numpy as np

from ...core.errors import IndexProblem
from ...core.files import RACY_NS, user_cache_folder
from ..format.files import read_member, write_atomic
from ..format.manifest import Segment
from .segments import SegmentFiles

RECORD = "checked.json"
VERSION = 1
LIMIT = 64 << 20  # bytes of record read at most (an entry is about 250 bytes)
KEY_BYTES = 32


def record_key(create: bool) -> bytes | None:
    """This user's key for the records: a file of 64 hex digits, the user's own, readable by no one else
    (made at first use when `create`). None when there is none, or it is not such a file: nothing is trusted then."""
    path = user_cache_folder() / "checked-record.key"
    if create and not os.path.lexists(path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{secrets.token_hex(6)}.key")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(KEY_BYTES))
            try:
                os.link(temporary, path)  # never over a key another process has just made
            except FileExistsError:
                pass
            finally:
                temporary.unlink()
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
        if not stat.S_ISREG(info.st_mode) or not mine or info.st_mode & 0o077 or info.st_size != 2 * KEY_BYTES:
            return None
        return bytes.fromhex(os.read(fd, 2 * KEY_BYTES).decode("ascii"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def file_state(info: os.stat_result) -> list[int]:
    """A file's identity and state, as the record keeps it."""
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def checksum_digest(segment: Segment) -> str:
    """The checksums a file is checked against, as one sha256."""
    check = segment.checksum.model_dump(mode="json") if segment.checksum is not None else None
    return hashlib.sha256(json.dumps(check, sort_keys=True).encode()).hexdigest()


class CheckedRecord:
    """The record of one index folder, as a writer reads, extends and writes it."""

    def __init__(self, root: Path, key: bytes | None, entries: dict[str, dict]) -> None:
        self.root, self.key, self.entries = Path(root), key, entries
        self.changed = False

    @classmethod
    def load(cls, root: Path) -> CheckedRecord:
        """The record, if it is there, well formed and signed with this user's key; else an empty one."""
        key = record_key(create=True)
        return cls(root, key, _read(Path(root), key) if key is not None else {})

    def trusted(self, segment: Segment, info: os.stat_result) -> bool:
        """Whether the file `info` describes was checked whole, in this state, against `segment`'s checksums."""
        entry = self.entries.get(segment.id)
        return entry is not None and entry.get("checksums") == checksum_digest(segment) and entry.get("state") == file_state(info)

    def note(self, segment: Segment, info: os.stat_result, started_ns: int) -> None:
        """The file `info` describes (stat'ed before the check that began at `started_ns`) was just checked whole."""
        if max(info.st_mtime_ns, info.st_ctime_ns) < started_ns - RACY_NS:
            self.entries[segment.id] = {"checksums": checksum_digest(segment), "state": file_state(info)}
            self.changed = True

    def save(self, live: set[str]) -> None:
        """Write the record, of the segments in `live` only, if it changed (best effort: without it, files are read again)."""
        kept = {sid: entry for sid, entry in self.entries.items() if sid in live}
        if self.key is None or (not self.changed and kept == self.entries):
            return
        body = _canonical(kept)
        data = json.dumps({"version": VERSION, "files": kept, "mac": _mac(self.key, body)}).encode()
        try:
            write_atomic(self.root / RECORD, data)
        except OSError:
            return
        self.entries, self.changed = kept, False


def check_whole(root: Path, segments: list[tuple[Segment, SegmentFiles]]) -> None:
    """What a writer checks before it starts: every block of these segments' vectors (IndexProblem if one is
    damaged), except in files this user's writers recorded as checked whole and unchanged since; the record updated."""
    record = CheckedRecord.load(root)
    started = time.time_ns()
    for segment, files in segments:
        state = files.guard.stat()
        if not record.trusted(segment, state):
            files.check_pages(np.arange(segment.pages))
            record.note(segment, state, started)
    record.save({segment.id for segment, _ in segments})


def _canonical(entries: dict[str, dict]) -> bytes:
    return json.dumps({"version": VERSION, "files": entries}, sort_keys=True, separators=(",", ":")).encode()


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _read(root: Path, key: bytes) -> dict[str, dict]:
    try:
        data = json.loads(read_member(root, RECORD, LIMIT))
    except (IndexProblem, ValueError, RecursionError):  # none yet, or not a record: every file is read
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("files"), dict):
        return {}
    files, mac = data["files"], data.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, _canonical(files))):
        return {}
    return {sid: entry for sid, entry in files.items() if isinstance(entry, dict)}
