"""lgpt-index serve"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .app import AppCommand, Application, json_option
from .defaults import TuningOption
from .options import SERVED_MODEL_HELP, index_options, listen_options, model_options, scoring_options, settings_options

if TYPE_CHECKING:
    from ..indexing.options import BuildSettings
    from ..models.resolve import ModelSpec

SERVE_EXIT = """\b
Exit codes:
  0  stopped by SIGTERM or Ctrl-C, after the requests in flight were answered
  1  no index, or a damaged one
  2  usage error (an address other than loopback without --token)
  4  the port is taken, or the model cannot be loaded"""


@click.command(cls=AppCommand, epilog=SERVE_EXIT)
@listen_options(8765, token_help="Bearer token every request but /healthz must carry.")
@click.option("--header-timeout", cls=TuningOption, type=click.FloatRange(min=0.01), default=10.0, show_default=True, metavar="SECONDS",
              help="Drop a connection whose request headers are not complete this long after it opened (or after its last answer).")
@click.option("--body-timeout", cls=TuningOption, type=click.FloatRange(min=0.01), default=30.0, show_default=True, metavar="SECONDS",
              help="Drop a connection whose request body is not complete this long after its headers.")
@click.option("--max-connections", cls=TuningOption, type=click.IntRange(min=1), default=None, metavar="N",
              help="Connections served at once; more are refused with 503, but for GET /healthz from loopback. "
                   "[default: 256, or less under a low file-descriptor limit]")
@click.option("--absolute-paths", is_flag=True,
              help="Answers name documents, the index and the model by absolute paths, as the CLI does "
                   "(default: documents relative to the folder they were indexed from, the rest by name).")
@click.option("--json-logs", cls=TuningOption, is_flag=True, help="Log JSON lines on stderr instead of plain ones.")
@click.option("-q", "--quiet", is_flag=True, help="No line per request; errors only.")
@click.option("--watch", "watch_docs", type=click.Path(exists=True, file_okay=False), default=None, metavar="DOCS",
              help="Keep the index up to date with the folder DOCS as files change, as `lgpt-index watch` does "
                   "(built first if there is no index yet). See docs/watch.md.")
@settings_options(when="With --watch: ", only_with="watch_docs")
@json_option(help="If the server cannot start (or stops on a failure): an error document on stdout.")
@model_options(SERVED_MODEL_HELP)
@scoring_options
@index_options
@click.pass_obj
def serve(app: Application, host, port, token, header_timeout, body_timeout, max_connections, absolute_paths, json_logs, quiet,
          watch_docs, settings, model_spec, scorer, max_resident) -> None:
    """Answer queries over HTTP with the model loaded once (POST /query, GET /status, /documents,
    /pages/SHA256/PAGE.png, /healthz; the OpenAPI description at /openapi.json)."""
    from ..serve.httpguard import ConnectionLimits, PathPolicy, default_max_connections
    from ..serve.middleware import RequestLog
    from ..serve.runner import check_exposure, run_server
    from ..query.search import DeviceScoring
    from ..serve.service import open_service

    check_exposure(host, token)
    limits = ConnectionLimits(header_timeout, body_timeout, max_connections or default_max_connections())
    log = RequestLog(quiet=quiet, as_json=json_logs)
    store = app.store()
    watcher = _watcher(watch_docs, store, log, model_spec, settings) if watch_docs else None
    service = open_service(store, model_spec, DeviceScoring(scorer, max_resident))
    if watcher is not None:
        service.watch_status = watcher.status
    start = (lambda: watcher.start_background(catch_up=watcher.builds == 0)) if watcher else (lambda: None)
    failure = run_server(service, host, port, token, log, limits, PathPolicy(absolute_paths), on_listening=start)
    if watcher is not None and not watcher.stop(wait_s=10):
        log.message("watch: the build in progress was abandoned; the index keeps its last generation", "notice")
    if failure is not None:
        app.fail(failure)
    sys.exit(0)


def _watcher(docs, store, log, model_spec: ModelSpec, settings: BuildSettings):
    """serve --watch: a watcher whose events go to the request log; with no index yet, its first
    build runs now, before the server opens the index."""
    from .watch import logged_watcher

    watcher = logged_watcher(docs, store, log, model_spec, settings)
    if not store.exists():
        watcher.source.start()
        watcher.build_until_written()  # a full disk: tried again after the backoff, as later builds are
        if watcher.error is not None:
            watcher.stop()
            raise watcher.error
    return watcher
