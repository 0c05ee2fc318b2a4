"""A writer reads only the vectors files changed since a writer of this user checked them whole
(index/local/checked.py), and a damaged index still stops every writer: a file changed in place,
with its mtime put back, replaced, or truncated; the record damaged, forged or another user's.

The indexes are written through the real store (two transactions, a segment each) with pages of
256 x 128 float16 vectors (64 KiB a page, one CHECK_BLOCK). Files copied for a test are seconds old,
which the record does not trust (RACY_NS): the tests that need them recorded set RACY_NS to 0."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import counted_failpoint, flip_byte

DIM, ROWS, PAGES = 128, 256, 8


def _make_index(root: Path) -> None:
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(5)
    for number in range(2):
        with LocalStore(root).begin() as txn:
            segment = txn.write_segment([rng.standard_normal((ROWS, DIM)).astype(np.float16) for _ in range(PAGES)], DIM)
            document = Document(path=f"/docs/doc-{number}.pdf", sha256=f"{number:064x}", size=1, kind="pdf", pages=PAGES,
                                spans=[Span(segment=segment.id, first=0, pages=PAGES)])
            before = list(txn.current.documents) if txn.current else []
            txn.commit([*before, document], ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checked") / "default"
    _make_index(root)  # (the writers' key in the session's cache: tests/conftest.py's isolated_session)
    return root


@pytest.fixture
def root(pristine, tmp_path, monkeypatch) -> Path:
    from localgpt_index.index.local import checked

    monkeypatch.setattr(checked, "RACY_NS", 0)  # the copies are seconds old
    shutil.copytree(pristine, tmp_path / "default")
    (tmp_path / "default" / "checked.json").unlink(missing_ok=True)  # the second commit's writer may have recorded the first segment
    return tmp_path / "default"


def _segments(root: Path) -> list[Path]:
    """The vectors files, in the order of the manifest."""
    from localgpt_index.index.local.store import LocalStore

    return [root / "segments" / f"{sid}.vectors.npy" for sid in LocalStore(root).read_manifest().segments]


def _blocks(path: Path) -> int:
    return -(-path.stat().st_size // (64 << 10))


def _writer_checks(root: Path) -> int:
    """Blocks of vectors a writer hashes before it starts (it commits nothing)."""
    from localgpt_index.index.local.store import LocalStore

    with counted_failpoint("vectors.check_block") as counted:
        with LocalStore(root).begin():
            pass
    return len(counted)


def _writer_refuses(root: Path, match: str = "damaged") -> None:
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    with pytest.raises(IndexProblem, match=match):
        with LocalStore(root).begin():
            pass


def _record(root: Path) -> dict:
    return json.loads((root / "checked.json").read_text())


def test_a_writer_reads_only_the_files_changed_since_a_writer_checked_them(root):
    from localgpt_index.index.local.store import LocalStore

    first, second = _segments(root)
    assert _writer_checks(root) == _blocks(first) + _blocks(second)  # no record yet: everything
    recorded = (root / "checked.json").read_bytes()
    assert _writer_checks(root) == 0  # nothing changed
    view = LocalStore(root).open_view()
    view.search_vectors([np.ones((4, DIM), dtype=np.float32)], k=3)  # a reader checks what it reads, lazily ...
    assert (root / "checked.json").read_bytes() == recorded  # ... and never writes the record
    info = second.stat()
    os.utime(second, ns=(info.st_atime_ns, info.st_mtime_ns))  # the same bytes, the same mtime: only the ctime moves
    assert _writer_checks(root) == _blocks(second)
    assert _writer_checks(root) == 0


def test_a_reader_never_writes_the_record(root):
    from localgpt_index.index.local.store import LocalStore

    LocalStore(root).open_view().search_vectors([np.ones((4, DIM), dtype=np.float32)], k=3)
    assert LocalStore(root).verify() == []
    assert not (root / "checked.json").exists()


def _in_place(path: Path) -> None:
    flip_byte(path, path.stat().st_size // 2)


def _mtime_restored(path: Path) -> None:
    info = path.stat()
    flip_byte(path, path.stat().st_size // 2)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_mtime_ns == info.st_mtime_ns and path.stat().st_size == info.st_size


def _replaced(path: Path) -> None:
    info = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    other = path.with_name("other")
    other.write_bytes(bytes(data))
    os.utime(other, ns=(info.st_atime_ns, info.st_mtime_ns))
    os.replace(other, path)


def _truncated(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 64)


@pytest.mark.parametrize("damage", [_in_place, _mtime_restored, _replaced, _truncated],
                         ids=["in-place", "mtime-restored", "replaced", "truncated"])
def test_a_file_damaged_after_it_was_recorded_stops_the_writer(root, damage):
    _writer_checks(root)
    assert _writer_checks(root) == 0  # recorded
    damage(_segments(root)[0])
    _writer_refuses(root)
    assert not (root / "gen-00000003.json").exists()


def _garbage(root: Path) -> None:
    (root / "checked.json").write_bytes(b"\x00{not json" * 10)


def _forged(root: Path) -> None:
    """Each entry made to say what the file is now, the signature left as it was."""
    from localgpt_index.index.local.checked import file_state

    record = _record(root)
    for path in _segments(root):
        record["files"][path.name.split(".")[0]]["state"] = file_state(path.stat())
    (root / "checked.json").write_text(json.dumps(record))


def _signed_by_another_user(root: Path) -> None:
    """The forged entries signed with a key of another user's (another cache folder's)."""
    from localgpt_index.index.local import checked

    _forged(root)
    record = _record(root)
    other = checked.record_key(create=True)
    mine = os.environ["XDG_CACHE_HOME"]
    os.environ["XDG_CACHE_HOME"] = str(root.parent / "another-user")
    try:
        key = checked.record_key(create=True)
    finally:
        os.environ["XDG_CACHE_HOME"] = mine
    assert key is not None and key != other
    record["mac"] = checked._mac(key, checked._canonical(record["files"]))
    (root / "checked.json").write_text(json.dumps(record))


def _key_readable_by_others(root: Path) -> None:
    """The forged entries signed with the user's key, but a key others can read is no key."""
    from localgpt_index.core.files import user_cache_folder
    from localgpt_index.index.local import checked

    _forged(root)
    record = _record(root)
    record["mac"] = checked._mac(checked.record_key(create=False), checked._canonical(record["files"]))
    (root / "checked.json").write_text(json.dumps(record))
    key_file = user_cache_folder() / "checked-record.key"
    key_file.chmod(0o644)
    assert checked.record_key(create=True) is None


@pytest.mark.parametrize("spoil", [_garbage, _forged, _signed_by_another_user, _key_readable_by_others],
                         ids=["garbage", "forged", "another-users-key", "key-readable-by-others"])
def test_a_damaged_or_forged_record_is_not_trusted(root, spoil):
    _writer_checks(root)
    _mtime_restored(_segments(root)[0])
    spoil(root)
    _writer_refuses(root)


def _touched_and_forged(root: Path) -> None:
    for path in _segments(root):
        info = path.stat()
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    _forged(root)


@pytest.mark.parametrize("spoil", [_garbage, _touched_and_forged], ids=["garbage", "forged"])
def test_a_damaged_record_over_good_files_costs_one_full_read(root, spoil):
    first, second = _segments(root)
    _writer_checks(root)
    spoil(root)
    assert _writer_checks(root) == _blocks(first) + _blocks(second)
    assert _writer_checks(root) == 0  # written again


def test_a_file_recorded_against_other_checksums_is_read_again(root):
    """The manifest's checksums of a recorded file edited (HEAD's sha256 recomputed): the file was
    checked against other checksums, so it is hashed again, and does not match."""
    _writer_checks(root)
    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    sid = _segments(root)[0].name.split(".")[0]
    blocks = data["segments"][sid]["checksum"]["blocks"]
    blocks[1] = f"{int(blocks[1], 16) ^ 1:016x}"
    raw = json.dumps(data).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "sha256": hashlib.sha256(raw).hexdigest()}))
    _writer_refuses(root, "block 1 .* does not match its checksum")


def test_files_changed_within_the_timestamp_granularity_are_not_recorded(pristine, tmp_path):
    """Files seconds old (the default RACY_NS) are checked whole by every writer until they are older."""
    root = tmp_path / "default"
    shutil.copytree(pristine, root)
    (root / "checked.json").unlink(missing_ok=True)
    first, second = _segments(root)
    assert _writer_checks(root) == _writer_checks(root) == _blocks(first) + _blocks(second)
    assert not (root / "checked.json").exists()
