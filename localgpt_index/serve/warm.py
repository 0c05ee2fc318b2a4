"""The warm service's Unix socket: where it is, who may use it, and the cheap client that finds it.

A warm service (`serve`, `lgpt-index warm`) listens on `<index>/warm/socket` (a folder of mode 0700,
the socket 0600), or under `$XDG_RUNTIME_DIR/lgpt-index/` where the index's folder cannot hold one
(a path past sun_path's bound, a file system without sockets). `query` finds it there and asks it
first: only a service whose process runs as this user (SO_PEERCRED, both ways) and that says it
serves this index with this model and these settings answers (`Identity`). A socket whose process
is gone is removed. Only the standard library is imported here: this is the path of a warm query."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import stat
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final, Literal

from .._version import __version__

SOCKET_FOLDER = "warm"
SOCKET_NAME = "socket"
SUN_PATH_MAX = 107  # sun_path's 108 bytes, less the terminating NUL (Linux)
CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 300.0  # a query over a large index, as the local path would take
QUERY_PATH, STATUS_PATH, STOP_PATH = "/warm/query", "/warm/status", "/warm/stop"
REFUSED: Final = "refused"  # ask's answer where the service found the request wrong


@dataclass(frozen=True)
class Identity:
    """What a warm service serves: a client uses it only where every field is its own."""

    root: str  # the index folder, resolved
    model: str | None  # --model as given (None: the index's)
    device: str
    dtype: str
    scorer: str
    max_resident: int | None
    version: str = __version__

    def to_json(self) -> dict:
        return asdict(self)


def identity(root: Path, model: str | None, device: str, dtype: str, scorer: str, max_resident: int | None) -> Identity:
    """`model` (--model) as both sides compare it: a folder that exists by its absolute path."""
    model = os.path.abspath(model) if model is not None and os.path.exists(model) else model
    return Identity(str(root.resolve()), model, device, dtype, scorer, max_resident)


def expected_uid() -> int:
    """The uid a warm service's process must run as: this process's (tests fake another)."""
    return os.getuid()


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def candidates(root: Path) -> list[Path]:
    """Where the socket of the index at `root` may be: in its folder, then under $XDG_RUNTIME_DIR (or the
    temporary folder), named by a digest of the folder's resolved path."""
    resolved = root.resolve()
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:24]
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/lgpt-index-{os.getuid()}")
    return [resolved / SOCKET_FOLDER / SOCKET_NAME, runtime / "lgpt-index" / f"{digest}.socket"]


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= SUN_PATH_MAX


def _own_folder(folder: Path) -> None:
    """`folder` made (mode 0700), or kept if it is this user's and no one else may enter it."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, "not this user's folder", str(folder))
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)


def listen(root: Path) -> tuple[socket.socket, Path] | None:
    """A listening socket for the index at `root` (0600, in a 0700 folder), at the first place that holds
    one; None when another live service listens there already (or no place can)."""
    for path in candidates(root):
        if not _fits(path):
            continue
        try:
            _own_folder(path.parent)
            if _connect(path) is not None:
                return None  # a live service: it answers for this index
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(path))
                os.chmod(path, 0o600)
                sock.listen(64)
            except OSError:
                sock.close()
                raise
            return sock, path
        except OSError:
            continue  # a read-only or socket-less file system, a folder not ours: the next place
    return None


def _connect(path: Path) -> socket.socket | None:
    """A connection to the service at `path`; None where none listens (a socket whose process is gone is
    removed, when it is this user's)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(info.st_mode):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        if info.st_uid == os.getuid():
            _unlink_same(path, info)
        return None
    except OSError:
        sock.close()
        return None
    return sock


def _unlink_same(path: Path, info: os.stat_result) -> None:
    """Remove the stale socket at `path` unless another service has bound a new one there meanwhile."""
    try:
        now = os.lstat(path)
        if (now.st_ino, now.st_dev) == (info.st_ino, info.st_dev):
            os.unlink(path)
    except OSError:
        pass


def release(path: Path, sock: socket.socket) -> None:
    """The service's socket file removed at its end, if it is still the one `sock` is bound to."""
    try:
        info = os.lstat(path)
        if stat.S_ISSOCK(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(path)
    except OSError:
        pass
    sock.close()


def find(root: Path) -> socket.socket | None:
    """A connection to a live warm service of the index at `root` that runs as this user, or None."""
    for path in candidates(root):
        sock = _connect(path)
        if sock is None:
            continue
        try:
            uid = peer_uid(sock)
        except OSError:
            uid = -1
        if uid != expected_uid():
            sock.close()  # never used, never removed: not ours
            continue
        return sock
    return None


def exchange(sock: socket.socket, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
    """One HTTP/1.1 request over the connected `sock`, and the answer's status and body (the service closes
    the connection after it). By hand, not http.client: that module's import (the email parser, ssl) was a
    tenth of a warm query's time from start to exit. A ValueError for an answer that is not one whole body."""
    head = f"{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n"
    if data is not None:
        head += f"content-type: application/json\r\ncontent-length: {len(data)}\r\n"
    sock.settimeout(ANSWER_TIMEOUT_S)
    sock.sendall(head.encode("ascii") + b"\r\n" + (data or b""))
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    status_line, _, rest = b"".join(chunks).partition(b"\r\n")
    fields, blank, body = rest.partition(b"\r\n\r\n")
    headers = {key.strip().lower(): value.strip() for key, _, value in (line.partition(b":") for line in fields.split(b"\r\n"))}
    length = headers.get(b"content-length")
    if not blank or b"transfer-encoding" in headers or length is None or int(length) != len(body):
        raise ValueError("not one whole HTTP answer")
    return int(status_line.split()[1]), body


def call(root: Path, method: str, path: str, body: dict | None = None) -> tuple[int, dict] | None:
    """The status and JSON answer of the warm service of `root` to one request; None without one (or
    where it went away, or answered with something other than JSON)."""
    sock = find(root)
    if sock is None:
        return None
    try:
        data = json.dumps(body, ensure_ascii=True).encode() if body is not None else None
        status, answer = exchange(sock, method, path, data)
        return status, json.loads(answer)
    except (OSError, ValueError, IndexError):
        return None
    finally:
        sock.close()


def ask(root: Path, expect: Identity, request: dict) -> dict | Literal["refused"] | None:
    """The warm service's answer to a query request's fields (`{"document", "notes"}`); REFUSED where the
    service found them wrong (400: the local path says why, as it would have without a service); None where
    no service of `expect` answers (none, another model, index or version, still loading, an error: the
    local path decides). A service of this version builds the document as a local query does (the identity
    names the version): the answer is checked for its shape only, no pydantic model loaded for it."""
    answer = call(root, "POST", QUERY_PATH, {"expect": expect.to_json(), "request": request})
    if answer is not None and answer[0] == 400:
        return REFUSED
    if answer is None or answer[0] != 200:
        return None
    body = answer[1]
    if not (isinstance(body, dict) and isinstance(body.get("document"), dict) and isinstance(body["document"].get("queries"), list)
            and isinstance(body.get("notes"), list)):
        return None
    return body
