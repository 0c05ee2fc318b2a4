"""lgpt-index watch"""

from __future__ import annotations

import json
import sys
import threading
from typing import TYPE_CHECKING

import click

from .app import AppCommand, Application, output_options
from .defaults import TuningOption
from .options import (BUILD_MODEL_HELP, SECONDS, build_options, display_path, index_options, model_options, settings_options,
                      source_options)

if TYPE_CHECKING:
    from ..indexing.options import BuildSettings
    from ..models.resolve import ModelSpec

WATCH_EXIT = """\b
Exit codes:
  0  stopped by Ctrl-C or SIGTERM (a build in progress is abandoned; the index keeps its last generation)
  1  the index is damaged or refused (another model, a newer format)
  2  usage error, or the watched folder is gone
  4  the model cannot be loaded, the device was lost, or the folder cannot be watched at all"""


@click.command(cls=AppCommand, epilog=WATCH_EXIT)
@click.argument("docs", type=click.Path(exists=True, file_okay=False))
@model_options(BUILD_MODEL_HELP)
@source_options
@settings_options()
@click.option("--settle", "settle_s", cls=TuningOption, type=SECONDS, default=1.0, show_default=True,
              help="Build once no change came and no changed file grew for this long (a file being copied waits).")
@click.option("--wait", "wait_s", cls=TuningOption, type=SECONDS, default=600.0, show_default=True,
              help="Seconds a build waits for another writer (a manual build) to finish.")
@click.option("--poll", is_flag=True,
              help="Poll the folder instead of using the system's file events (network file systems). "
                   "Polling also takes over by itself where those events are unavailable.")
@index_options
@output_options
@click.pass_obj
def watch(app: Application, docs, settle_s, poll, **given) -> None:
    """Keep the index of DOCS up to date: build once to catch up, then again after every change
    (saved, added, renamed or deleted files), until Ctrl-C. With --json, one JSON object a line per
    event on stdout (watching, changes-seen, build-started, build-committed, build-up-to-date,
    build-failed, log, stopped). See docs/watch.md."""
    from ..watch.watcher import Watcher

    printer = EventPrinter(app)
    watcher = Watcher(docs, app.store(), build_options(**given), printer, settle_s=settle_s, polling=poll)
    sys.exit(watcher.run())


def logged_watcher(docs, store, log, model_spec: ModelSpec, settings: BuildSettings):
    """The watcher of serve --watch and mcp --watch: its events as lines of the request log (stderr)."""
    from ..watch.watcher import DEFAULT_LOCK_WAIT_S, Watcher

    def report(event) -> None:
        line = event_line(event)
        if line is not None:
            log.message(f"watch: {line[0]}", line[1])

    return Watcher(docs, store, build_options(model_spec, settings, wait_s=DEFAULT_LOCK_WAIT_S), report)


def event_line(event) -> tuple[str, str] | None:
    """One line of text for an event, and its level (info, notice, error); None for the detail of a batch."""
    match event.kind:
        case "watching":
            how = f"polling: {event.reason}" if event.polling else "file system events"
            return f"watching {display_path(event.root)} ({how})", "notice"
        case "build-started":
            what = f"{len(event.paths)} change(s)" if event.paths else "catching up with the folder"
            return f"build {event.number}: {what}", "info"
        case "build-committed":
            r = event.report
            return (f"build {event.number}: generation {event.generation} committed: {r.indexed} indexed, {r.reused} reused, "
                    f"{r.removed} removed, {r.failed} failed; {r.pages_total} pages in the index"), "info"
        case "build-up-to-date":
            return f"build {event.number}: nothing to change", "info"
        case "build-failed":
            if event.retry_in_s is not None:
                return f"build {event.number}: {event.message.rstrip('.')}; trying again in {event.retry_in_s:g} s", "error"
            return f"build {event.number}: {event.message}", "error"
        case "log":
            return event.message, "info"
        case "stopped":
            return f"ended ({event.reason}); {event.builds} build(s)", "error" if event.exit_code else "notice"
    return None


next(p for p in watch.params if p.name == "as_json").help = "One JSON object a line per event on stdout (see docs/watch.md)."


class EventPrinter:
    """The watcher's events: JSON lines on stdout (--json), or lines on stderr."""

    def __init__(self, app: Application) -> None:
        self.app = app
        self._lock = threading.Lock()  # events come from the folder's thread and the builder

    def __call__(self, event) -> None:
        with self._lock:
            if self.app.as_json:
                click.echo(json.dumps(event.to_dict(), ensure_ascii=True, default=str))
            else:
                self._say(event)

    def _say(self, event) -> None:
        from .build import _summarise

        terminal = self.app.terminal
        match event.kind:
            case "watching":
                how = f"polling: {event.reason}" if event.polling else "file system events"
                (terminal.warn if event.polling and not event.reason.startswith("asked") else terminal.info)(
                    f"watching {display_path(event.root)} ({how}); index {event.index}; Ctrl-C stops")
            case "changes-seen":
                terminal.detail(f"{len(event.paths)} change(s) seen, {event.ignored} ignored")
            case "build-started":
                what = f"{len(event.paths)} change(s)" if event.paths else "catching up with the folder"
                terminal.info(f"build {event.number}: {what}")
            case "build-committed":
                _summarise(self.app, event.report)
                terminal.info(f"build {event.number}: generation {event.generation} committed")
            case "build-up-to-date":
                terminal.detail(f"build {event.number}: nothing to change")
            case "build-failed":
                terminal.error(f"build {event.number}: {event.message}")
                if event.hint:
                    terminal.console.print(f"hint: {event.hint}", markup=False)
            case "log":
                terminal.info(event.message)
            case "stopped":
                (terminal.error if event.exit_code else terminal.info)(f"watch ended ({event.reason}); {event.builds} build(s)")
