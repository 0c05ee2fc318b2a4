"""A fork server for the slow tests that run `lgpt-index` as a shell does, many times over (tests/test_doc_examples.py).

A process of the real CLI pays about 5 s of CPU importing torch, transformers and colpali-engine before it does
anything; a doc page runs tens of them. The server imports those once, then forks one process a command: the
child takes the client's stdin, stdout and stderr (passed over a Unix socket), folder, environment and umask, runs
`localgpt_index.cli.run()` as `python -m localgpt_index` does, and the client exits as the child did (its code,
or its signal), passing on the signals it gets: a command that runs until stopped (serve, watch, mcp) ends on the
SIGTERM its client is sent, as the real one does. Where the server cannot be the real thing the client runs the real
CLI in its own process (exec, same pid): no server, `warm` (it starts a detached service), or an environment that
differs from the server's in what the preloaded libraries read at import (HF_*, TORCH*...).

    python tests/forkserver.py --fork-server SOCKET [MODULE...]   # "ready" once imported; runs until killed
    LGPT_TEST_FORKSERVER=SOCKET python tests/forkserver.py ARGS...   # `lgpt-index ARGS...`
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import sys

SOCKET_ENV = "LGPT_TEST_FORKSERVER"
# What the preloaded libraries read from the environment when imported: a request must agree with the server
IMPORT_TIME_ENV = re.compile(r"^(HF_|HUGGINGFACE|TRANSFORMERS|TORCH|PYTORCH|OMP_|MKL_|CUDA|TOKENIZERS|PYTHON|LD_|XDG_CACHE_HOME$)")
RUN_ALONE = {"warm"}  # starts a service of its own, detached from the command: a process of its own, as users start it
PRELOAD = ("torch", "transformers", "colpali_engine.models", "byaldi", "pdf2image", "localgpt_index.cli",
           "localgpt_index.models.loading", "localgpt_index.indexing.run", "localgpt_index.indexing.local_engine",
           "localgpt_index.query.search", "localgpt_index.query.hybrid")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


# --- the client: `lgpt-index ARGS...` ------------------------------------------------------------------------------

def run_real(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "localgpt_index", *args])


def client(args: list[str]) -> None:
    path = os.environ.get(SOCKET_ENV)
    command = next((arg for arg in args if not arg.startswith("-")), "")
    if not path or command in RUN_ALONE:
        run_real(args)
    umask = os.umask(0)
    os.umask(umask)
    request = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}).encode()
    try:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        socket.send_fds(conn, [struct.pack("!Q", len(request)) + request], [0, 1, 2])
    except OSError:
        run_real(args)
    answers = conn.makefile("rb")
    first = answers.readline().split()
    if first[:1] != [b"pid"]:  # refused (another environment), or the server is gone
        conn.close()
        run_real(args)
    child = int(first[1])
    for number in FORWARDED:
        signal.signal(number, lambda got, _frame: os.kill(child, got))
    last = answers.readline().split()
    if last[:1] == [b"signal"]:
        number = int(last[1])
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(int(last[1]) if last[:1] == [b"exit"] else 70)  # 70: the server went away mid-command


# --- the server ----------------------------------------------------------------------------------------------------

def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    import importlib
    import threading

    before = dict(os.environ)
    for name in preload:
        importlib.import_module(name)
    # what the imports set in the environment (colpali-engine sets TORCHINDUCTOR_CACHE_DIR), as they would in each command
    imported = {key: value for key, value in os.environ.items() if before.get(key) != value}
    # (torch starts a native thread at import; its pools are made again in a forked child, as DataLoader's
    # forked workers rely on. No Python thread may run here: a fork copies only the thread that forks.)
    assert threading.active_count() == 1, "a Python thread before fork"
    agreed = {key: value for key, value in before.items() if IMPORT_TIME_ENV.match(key)}
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the runners reaped as they end
    print("ready", flush=True)
    sys.stderr.flush()
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            listener.close()
            _runner(conn, agreed, imported)
        conn.close()


def _runner(conn: socket.socket, agreed: dict[str, str], imported: dict[str, str]) -> None:
    """One command: its process forked, its end told to the client (killed with it, if the client goes first)."""
    import threading

    try:
        head, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        size = struct.unpack("!Q", head[:8])[0]
        body = head[8:]
        while len(body) < size:
            body += conn.recv(size - len(body))
        request = json.loads(body)
        env = request["env"]
        request["env"] = {**env, **imported}
        asked = {key: value for key, value in env.items() if IMPORT_TIME_ENV.match(key)}
        if len(fds) != 3 or asked != agreed:
            differ = sorted(key for key in {*asked, *agreed} if asked.get(key) != agreed.get(key))
            print(f"forkserver: refused {request['args']}: {' '.join(differ) or 'no stdin, stdout, stderr'}", file=sys.stderr, flush=True)
            conn.sendall(b"refused\n")
            os._exit(0)
        child = os.fork()
        if child == 0:
            conn.close()
            _command(request, fds)
        for fd in fds:
            os.close(fd)
        print(f"forkserver: forked {child} for {request['args']}", file=sys.stderr, flush=True)
        conn.sendall(b"pid %d\n" % child)

        def client_gone() -> None:  # EOF before the command ended: the client was killed, so is the command
            if not conn.recv(1):
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        threading.Thread(target=client_gone, daemon=True).start()
        code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        conn.sendall(b"signal %d\n" % -code if code < 0 else b"exit %d\n" % code)
    finally:
        os._exit(0)


def _command(request: dict, fds: list[int]) -> None:
    """In the forked child: become `python -m localgpt_index ARGS` in the client's place, run, exit as it would."""
    import atexit
    import threading
    import traceback

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [os.path.join(os.path.dirname(sys.modules["localgpt_index"].__file__), "__main__.py"), *request["args"]]
    code = 0
    try:
        from localgpt_index.cli import run

        run()
    except SystemExit as ended:
        code = _exit_code(ended.code)
    except BaseException:  # noqa: BLE001 (as the interpreter does with what escapes)
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  (what interpreter exit does: non-daemon threads joined)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fork-server"]:  # (not a word `lgpt-index` takes: `serve` is one of its commands)
        serve(sys.argv[2], tuple(sys.argv[3:]) or PRELOAD)
    else:
        client(sys.argv[1:])
