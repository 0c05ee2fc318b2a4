"""lgpt-index warm"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from .app import AppCommand, Application, output_options
from .defaults import TuningOption
from .options import INDEX_MODEL_HELP, SECONDS, index_options, model_options, scoring_options

if TYPE_CHECKING:
    from ..models.resolve import ModelSpec

WARM_EXIT = """\b
Exit codes:
  0  started (or running already), stopped, or shown
  1  no index, or a damaged one; --status: no warm service runs
  4  the model cannot be loaded"""

READY_WAIT_S = 600.0  # a first load of a large model on a slow machine


def warm_options(func: Callable) -> Callable:
    """--no-warm and --keep-warm of query: whether a warm service answers, and leaving one behind."""
    func = click.option("--keep-warm", "keep_warm_s", cls=TuningOption, envvar="LGPT_KEEP_WARM", type=SECONDS, default=None,
                        metavar="SECONDS",
                        help="Then leave a warm service of this index in the background (`lgpt-index warm`) that the next "
                             "queries find by themselves; it exits after SECONDS without one. [env: LGPT_KEEP_WARM]")(func)
    return click.option("--no-warm", cls=TuningOption, is_flag=True,
                        help="Answer here, even where a warm service of this index runs (`lgpt-index warm`, `serve`).")(func)


def local_root(app: Application) -> Path | None:
    """The folder of the index the command reads, found without opening it; None for a store that is not a folder."""
    from ..index.local.paths import index_path

    if (app.store_url or os.environ.get("LGPT_STORE") or "local") != "local":
        return None
    return index_path(app.index_dir_found()[0], app.index_name)


def ask_warm(app: Application, fields: dict[str, Any], model_spec: ModelSpec, scorer: str, max_resident: int | None) -> dict | None:
    """The query document of a warm service of this index, model and settings for a request of `fields`
    (QueryRequest's, unchecked: the service checks them), its messages told as a local query tells them;
    None where none answers it, or where the service refuses the request (the local path answers, or says why)."""
    from ..core.errors import LgptError
    from ..serve.warm import REFUSED, ask, identity

    try:
        root = local_root(app)
    except LgptError:  # (an index name that cannot be: the local path says so, after the request's own errors)
        return None
    if root is None or fields["with_images"] or fields["first_pass"] == "auto" or not os.path.lexists(root / "HEAD"):
        return None
    expect = identity(root, model_spec.id, model_spec.device, model_spec.dtype, scorer, max_resident)
    answer = ask(root, expect, fields)
    if not isinstance(answer, dict):
        if answer != REFUSED:
            app.terminal.detail("no warm service of this index and model answered: answering here")
        return None
    app.terminal.say(answer["notes"])
    return answer["document"]


def keep_warm(app: Application, seconds: float, model_spec: ModelSpec, scorer: str, max_resident: int | None) -> None:
    """query --keep-warm: a warm service of this index started in the background, unless one runs."""
    from ..serve.warm import STATUS_PATH, call

    root = local_root(app)
    if root is None:
        app.terminal.info("hint: --keep-warm keeps a local index warm only: the query was answered, no service started.")
        return
    if call(root, "GET", STATUS_PATH) is None:
        process = _spawn(root, seconds, model_spec, scorer, max_resident)
        app.terminal.detail(f"warm service started in the background (pid {process.pid}); it exits after {seconds:g} s idle")


def _spawn(root: Path, idle_s: float, model_spec: ModelSpec, scorer: str, max_resident: int | None):
    """`lgpt-index warm --foreground` for the index at `root`, detached: its own session, no terminal, stdio closed."""
    import subprocess

    from ..serve.warm import identity

    expect = identity(root, model_spec.id, model_spec.device, model_spec.dtype, scorer, max_resident)
    args = [sys.executable, "-m", "localgpt_index", "warm", "--foreground", "--idle", repr(float(idle_s)),
            "--index-dir", str(Path(expect.root).parent), "--name", Path(expect.root).name, "--device", expect.device,
            "--dtype", expect.dtype, "--scorer", expect.scorer, "--store", "local"]
    args += ["--model", expect.model] if expect.model is not None else []
    args += ["--max-resident", str(expect.max_resident)] if expect.max_resident is not None else []
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True, cwd="/")


@click.command(cls=AppCommand, epilog=WARM_EXIT)
@click.option("--stop", is_flag=True, help="Stop the warm service of this index.")
@click.option("--status", "show_status", is_flag=True, help="Show the warm service of this index: pid, memory, CPU, idle time.")
@click.option("--idle", "idle_s", type=SECONDS, default=900.0, show_default=True, metavar="SECONDS",
              help="The service exits after this many seconds without a request.")
@click.option("--foreground", is_flag=True, help="Run the service in this process (for a supervisor) instead of in the background.")
@model_options(INDEX_MODEL_HELP, everyday=False)
@scoring_options
@index_options
@output_options
@click.pass_obj
def warm(app: Application, stop, show_status, idle_s, foreground, model_spec, scorer, max_resident) -> None:
    """Keep this index's model loaded in a background service that `query` finds by itself (repeated
    queries in milliseconds); it listens on a Unix socket only this user may use, and exits when idle."""
    from ..core.errors import IndexProblem, UsageError
    from ..serve.warm import STATUS_PATH, call

    if sum((stop, show_status, foreground)) > 1:
        raise UsageError("--stop, --status and --foreground: one at a time.")
    if foreground:
        _run_here(app, idle_s, model_spec, scorer, max_resident)
        return
    root = local_root(app)
    if root is None:
        raise UsageError("a warm service keeps a local index only (--store local).")
    running = call(root, "GET", STATUS_PATH)
    if stop:
        _stop(app, root, running)
    elif show_status:
        if running is None or running[0] != 200:
            raise IndexProblem(f"no warm service of {root} runs.", hint="Start one: lgpt-index warm (or query --keep-warm SECONDS).")
        _show(app, running[1])
    else:
        if running is None:
            if not os.path.lexists(root / "HEAD"):
                raise IndexProblem(f"no index at {root}.", hint="Build one first: lgpt-index build DOCS.")
            running = _wait_ready(root, _spawn(root, idle_s, model_spec, scorer, max_resident))
        _show(app, running[1])


def _run_here(app: Application, idle_s: float, model_spec: ModelSpec, scorer: str, max_resident: int | None) -> None:
    from ..query.search import DeviceScoring
    from ..serve.middleware import RequestLog
    from ..serve.runner import run_warm
    from ..serve.service import open_service

    service = open_service(app.store(), model_spec, DeviceScoring(scorer, max_resident))
    failure = run_warm(service, idle_s, RequestLog(quiet=app.verbosity <= 0))
    if failure is not None:
        app.fail(failure)


def _wait_ready(root: Path, process) -> tuple[int, dict]:
    """The started service's status once its model is loaded; its failure, if it exits first (unless another,
    started meanwhile by `query --keep-warm`, holds the socket: that one's)."""
    from ..core.errors import EnvironmentMissing
    from ..serve.warm import STATUS_PATH, call

    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline:
        answer = call(root, "GET", STATUS_PATH)
        if answer is not None and answer[0] == 200 and answer[1].get("ready"):
            return answer
        if answer is None and process.poll() is not None:  # (one started just before it answers: it is waited for)
            raise EnvironmentMissing(f"the warm service ended (exit {process.returncode}) before its model was loaded.",
                                     hint="Run it in the foreground to see why: lgpt-index warm --foreground -v")
        time.sleep(0.05)
    raise EnvironmentMissing(f"the warm service's model was not loaded within {READY_WAIT_S:g} s.")


def _stop(app: Application, root: Path, running: tuple[int, dict] | None) -> None:
    from ..serve.warm import STOP_PATH, call

    if running is None or running[0] != 200:
        app.terminal.info(f"no warm service of {root} runs.")
        return
    pid = running[1]["pid"]
    answer = call(root, "POST", STOP_PATH)
    if answer is None or answer[0] != 200:
        app.terminal.info(f"the service of {root} (pid {pid}) is `lgpt-index serve`: stop it with SIGTERM or Ctrl-C.")
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    if app.as_json:
        app.print_json({"stopped": True, "pid": pid})
    else:
        app.terminal.info(f"warm service of {root} stopped (pid {pid}).")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (and is not a zombie: a service just stopped, not yet reaped)."""
    from ..index.holder import pid_alive

    return pid_alive(pid) and os.path.exists(f"/proc/{pid}") and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((line for line in status if line.startswith("State:")), "").lower()
    except OSError:
        return ""


def _show(app: Application, status: dict[str, Any]) -> None:
    if app.as_json:
        app.print_json(status)
        return
    click.echo(f"warm service  pid {status['pid']} ({status['kind']}), {'ready' if status['ready'] else 'loading'}: "
               f"{status['model'] or 'model loading'}, generation {status['generation']}")
    click.echo(f"socket        {status['socket']}")
    click.echo(f"idle cost     {describe(status)}")


def describe(status: dict[str, Any]) -> str:
    """A warm service's idle cost in one line (also `lgpt-index status`'s)."""
    rss = f"{status['rss_bytes'] / 2**20:.0f} MiB resident" if status.get("rss_bytes") else "memory unknown"
    idle = f", idle {status['idle_s']:.0f} s" if status.get("idle_s") is not None else ""
    return f"pid {status['pid']}: {rss}, {status['cpu_s']:.1f} s CPU in {status['uptime_s']:.0f} s{idle}"


def warm_line(app: Application) -> str | None:
    """`lgpt-index status`'s line on the warm service of its index, if one runs."""
    from ..serve.warm import STATUS_PATH, call

    root = local_root(app)
    running = call(root, "GET", STATUS_PATH) if root is not None else None
    return describe(running[1]) if running is not None and running[0] == 200 else None
