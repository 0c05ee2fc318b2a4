"""lgpt-index mcp"""

from __future__ import annotations

import os
import sys

import click

from .app import AppCommand, Application, json_option
from .defaults import TuningOption
from .options import SERVED_MODEL_HELP, index_options, listen_options, model_options, settings_options

MCP_EXIT = """\b
Exit codes:
  0  the client closed the connection (stdio), or SIGTERM / Ctrl-C (--http)
  2  usage error (an address other than loopback without --token)
  4  the port is taken (--http)"""


@click.command("mcp", cls=AppCommand, epilog=MCP_EXIT)
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")
@listen_options(8766, when="With --http: ", token_help="bearer token every request must carry.")
@click.option("--max-image-bytes", cls=TuningOption, type=click.IntRange(min=1024), default=None, metavar="BYTES",
              help="Largest PNG of one page image; larger pages are scaled down to fit. [default: 524288]")
@click.option("--max-answer-image-bytes", cls=TuningOption, type=click.IntRange(min=1024), default=None, metavar="BYTES",
              help="All the page images of one answer together; each gets an even share. [default: 2097152]")
@click.option("--max-text-chars", cls=TuningOption, type=click.IntRange(min=1), default=None, metavar="CHARS",
              help="Most characters of one page's text in an answer; a longer text is cut (text_truncated). [default: 20000]")
@click.option("--max-answer-text-chars", cls=TuningOption, type=click.IntRange(min=1), default=None, metavar="CHARS",
              help="All the page texts of one answer together; pages under an even share keep all their text, "
                   "the longer ones share the rest. [default: 200000]")
@click.option("--absolute-paths", is_flag=True,
              help="Name documents by absolute paths (default: relative to the folder they were indexed from).")
@click.option("-q", "--quiet", is_flag=True, help="With --http: no line per request; errors only.")
@click.option("--watch", "watch_docs", type=click.Path(exists=True, file_okay=False), default=None, metavar="DOCS",
              help="Keep the index up to date with the folder DOCS as files change, as `lgpt-index watch` does; "
                   "its lines go to stderr. See docs/watch.md.")
@settings_options(when="With --watch: ", only_with="watch_docs")
@json_option(help="If the server cannot start: an error document on stdout (before any protocol message).")
@model_options(SERVED_MODEL_HELP)
@index_options
@click.pass_obj
def mcp(app: Application, use_http, host, port, token, max_image_bytes, max_answer_image_bytes, max_text_chars,
        max_answer_text_chars, absolute_paths, quiet, watch_docs, settings, model_spec) -> None:
    """Answer MCP clients (desktop agents, answerers) from the index: tools search, get_page,
    list_documents and index_status, the model loaded once. Over stdio by default: stdout carries
    protocol messages only; messages go to stderr."""
    from ..mcp.backend import IndexTools
    from ..mcp.schemas import (DEFAULT_ANSWER_IMAGE_BYTES, DEFAULT_ANSWER_TEXT_CHARS, DEFAULT_IMAGE_BYTES, DEFAULT_TEXT_CHARS,
                               ImageCaps, TextCaps)
    from ..serve.httpguard import PathPolicy
    from ..serve.middleware import RequestLog
    from ..serve.runner import check_exposure
    from ..serve.service import IndexService

    if use_http:
        check_exposure(host, token)
    caps = ImageCaps(max_image_bytes or DEFAULT_IMAGE_BYTES, max_answer_image_bytes or DEFAULT_ANSWER_IMAGE_BYTES)
    text_caps = TextCaps(max_text_chars or DEFAULT_TEXT_CHARS, max_answer_text_chars or DEFAULT_ANSWER_TEXT_CHARS)
    tools = IndexTools(IndexService(app.store(), model_spec), PathPolicy(absolute_paths), caps, text_caps)
    log = RequestLog(quiet=quiet)
    _say_what_is_there(tools, log)
    # --watch: the watcher is a companion (mcp/runner.py), started once stdout is safe; the tools follow its commits
    watcher = None
    if watch_docs:
        from .watch import logged_watcher

        watcher = logged_watcher(watch_docs, tools.service.store, log, model_spec, settings)
        tools.service.watch_status = watcher.status  # index_status says what it does
    companions = [watcher.start_background] if watcher else []
    if use_http:
        from ..mcp.runner import run_http

        run_http(tools, host, port, token, log, companions=companions)
    else:
        from ..mcp.runner import run_stdio

        run_stdio(tools, companions)
    if watcher is not None and not watcher.stop(wait_s=10):
        log.message("watch: the build in progress was abandoned; the index keeps its last generation", "notice")
    if not use_http and not tools.settled():
        # the client left while the model loads or a call runs: their threads cannot be stopped, and the
        # interpreter would wait for them at exit (a minute for a large model) while the client waits to kill us
        sys.stderr.flush()
        os._exit(0)
    sys.exit(0)


def _say_what_is_there(tools, log) -> None:
    """One line on stderr: the index served, or why the tools will answer with an error for now (the
    server starts anyway: an agent that launched it gets the reason with every answer)."""
    from ..core.errors import LgptError

    try:
        index = tools.current()
    except LgptError as exc:
        log.message(f"lgpt-index mcp: {exc.message} The tools answer with this error until it is fixed.", "notice")
        return
    manifest = index.manifest
    log.message(f"lgpt-index mcp: {tools.service.store.location} (generation {manifest.generation}, {manifest.page_count} pages, "
                f"model {manifest.model.id})", "notice")
