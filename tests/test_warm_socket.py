"""The warm service's socket (serve/warm.py), in this process: where it goes, who may use it, what is stale."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from localgpt_index.serve import httpconn, warm


@pytest.fixture
def root(monkeypatch):
    """An index folder with a short path (a socket's path holds 107 bytes; pytest's tmp_path can be longer)."""
    base = Path(tempfile.mkdtemp(prefix="w"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / "run"))
    folder = base / "idx" / "default"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(base)


def test_the_socket_is_owner_only_in_an_owner_only_folder(root):
    listened = warm.listen(root)
    assert listened is not None
    sock, path = listened
    try:
        assert path == root.resolve() / "warm" / "socket"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert warm.listen(root) is None  # a live service holds it: a second one does not take it over
        connection = warm.find(root)
        assert connection is not None
        connection.close()
    finally:
        warm.release(path, sock)
    assert not path.exists()


def test_a_path_too_long_for_a_socket_goes_under_the_runtime_folder(tmp_path, monkeypatch):
    run = Path(tempfile.mkdtemp(prefix="run"))  # short: tmp_path itself is most of a socket path's bound
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "default"
    deep.mkdir(parents=True)
    listened = warm.listen(deep)
    assert listened is not None
    sock, path = listened
    try:
        assert path.parent == run / "lgpt-index" and path.name.endswith(".socket")
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        connection = warm.find(deep)
        assert connection is not None
        connection.close()
    finally:
        warm.release(path, sock)
        shutil.rmtree(run)


def test_a_socket_whose_process_is_gone_is_removed_and_ignored(root):
    listened = warm.listen(root)
    assert listened is not None
    sock, path = listened
    sock.close()  # what a killed service leaves: the file, no listener
    assert path.exists()
    assert warm.find(root) is None
    assert not path.exists()
    assert warm.ask(root, warm.identity(root, None, "auto", "auto", "auto", None), {"queries": ["q"]}) is None


def test_a_service_of_another_user_is_neither_used_nor_removed(root, monkeypatch):
    listened = warm.listen(root)
    assert listened is not None
    sock, path = listened
    try:
        monkeypatch.setattr(warm, "expected_uid", lambda: os.getuid() + 1)
        assert warm.find(root) is None
        assert path.exists()
    finally:
        warm.release(path, sock)


class _Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str):
        return self.sock if name == "socket" else None


def test_the_server_refuses_a_peer_of_another_user(monkeypatch):
    left, right = socket.socketpair(socket.AF_UNIX)
    try:
        assert httpconn._same_user(_Transport(left))
        monkeypatch.setattr(httpconn, "expected_uid", lambda: os.getuid() + 1)
        assert not httpconn._same_user(_Transport(left))
        tcp = socket.socket(socket.AF_INET)
        assert httpconn._same_user(_Transport(tcp))  # TCP's peers: the token and loopback rules decide
        tcp.close()
    finally:
        left.close()
        right.close()
