"""lgpt-index build"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from .app import AppCommand, Application, output_options
from .defaults import TuningOption
from .options import (BUILD_MODEL_HELP, EXIT_CODES, SECONDS, build_options, display_path, index_options, model_options,
                      settings_options, source_options)


@click.command(cls=AppCommand, epilog=EXIT_CODES)
@click.argument("docs", type=click.Path(exists=True), required=False)
@model_options(BUILD_MODEL_HELP)
@source_options
@settings_options(later=True)
@click.option("--text-only", is_flag=True,
              help="Only read the text of the pages the index holds pending (after --ocr later): OCR, no model, no DOCS.")
@click.option("--rebuild", is_flag=True, help="Embed everything again into a new generation (committed once, at the end).")
@click.option("--rehash", cls=TuningOption, is_flag=True,
              help="Read every file to find changes, not only those whose size or times changed.")
@click.option("--strict", is_flag=True, help="If any document fails, commit nothing and exit 1.")
@click.option("--compile", "compile", cls=TuningOption, is_flag=True,
              help="torch.compile the model: about 30 % more pages/s on a GPU, after a compilation of about a minute.")
@click.option("--render-timeout", "render_timeout_s", cls=TuningOption, type=SECONDS, default=60.0, show_default=True,
              help="Seconds poppler may take for a few pages of a PDF.")
@click.option("--ocr-timeout", "ocr_timeout_s", cls=TuningOption, type=SECONDS, default=60.0, show_default=True,
              help="Seconds one page's OCR may take (its renders and Tesseract); a slower page is indexed without it.")
@click.option("--ocr-workers", cls=TuningOption, type=click.IntRange(1, 256), default=None,
              help="Pages read by OCR side by side, beside the encoder. [default: every CPU]")
@click.option("--commit-every", "commit_every_pages", cls=TuningOption, type=click.IntRange(1), default=None,
              help="Commit after this many new pages. [default: 1000, or fewer commits when a huge catalog makes them slow]")
@click.option("--commit-interval", "commit_every_s", cls=TuningOption, type=SECONDS, default=600.0, show_default=True,
              help="Commit at least this often, in seconds.")
@click.option("--wait", "wait_s", cls=TuningOption, type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@click.option("--ray", "ray", cls=TuningOption, default=None, metavar="ADDRESS",
              help="Convert, render and encode on a Ray cluster: auto (the one running), its address, or local "
                   "(start one here). Needs pip install 'lgpt-index[ray]'.")
@click.option("--ray-actors", cls=TuningOption, type=click.IntRange(1, 4096), default=None,
              help="Encoder actors, one model each. [default: one per GPU, or half the CPUs of a cluster without GPUs]")
@click.option("--ray-gpus-per-actor", cls=TuningOption, type=click.FloatRange(0.01, 64), default=1.0, show_default=True,
              help="GPUs each encoder actor takes.")
@index_options
@output_options
@click.pass_obj
def build(app: Application, docs, **given) -> None:
    """Index the documents under DOCS (or bring the index up to date with it). DOCS may be one file:
    that document is indexed or updated, the others in the index are left as they are."""
    from ..core.errors import UsageError
    from ..core.terminal import stage

    if (docs is None) != given["text_only"]:
        raise UsageError("--text-only reads what the index holds: no DOCS" if docs else "Missing argument 'DOCS'.",
                         hint="`lgpt-index build DOCS`, or `lgpt-index build --text-only`")
    context = click.get_current_context()  # (on the command line: a config file's default is no request of this run)
    unread = [name for name in ("rebuild", "rehash", "strict") if context.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given["text_only"] and unread:
        raise UsageError(f"{', '.join('--' + flag for flag in unread)}: not with --text-only, which reads the pending text of "
                         "the index as it is (no document is read again).",
                         hint="`lgpt-index build DOCS --rebuild` embeds everything again." if given["rebuild"] else None)
    with app.terminal.progress() as progress:  # said from the first second: the imports and opening the index take some
        stage(progress, "starting")
        from ..indexing.run import build_index

        store = app.store()
        options = build_options(**given)
        stage(progress, "starting", ended=True)
        report = build_index(Path(docs or "."), store, options, progress=progress, log=app.terminal.info)
    if app.as_json:
        document = report.to_dict()
        if report.exit_code:
            document["error"] = _error(report)
        app.print_json(document)
    _summarise(app, report)
    sys.exit(int(report.exit_code))


def _error(report) -> dict:
    """The error object of a build that failed in part or whole (the one error shape, app.error_object)."""
    from ..core.errors import ExitCode
    from .app import error_object

    failed = f"{len(report.failures)} document(s) failed"
    hint = "`lgpt-index ls --failed` lists them with the reason; the next build tries them again."
    if report.exit_code == ExitCode.FAILURE:
        return error_object(f"--strict: {failed}; nothing was committed.", report.exit_code, "failure", hint)
    if report.exit_code == ExitCode.ENVIRONMENT:
        why = f"the build stopped: {report.stopped}" if report.stopped else f"{failed} for want of a piece of the environment"
        return error_object(f"{why}; what was done is committed.", report.exit_code, "environment", hint)
    return error_object(f"{failed}; the others are committed.", report.exit_code, "partial", hint)


def _summarise(app: Application, report) -> None:
    from ..models.resolve import is_random_checkpoint

    terminal = app.terminal
    if report.model and is_random_checkpoint(report.model["path"]):
        terminal.warn(f"{report.model['id']} is a random-weight test checkpoint: its vectors carry no meaning.")
    for skipped in report.skipped_files:
        terminal.detail(f"skipped: {display_path(skipped['path'])} ({skipped['reason']})")
    if report.precision:
        p = report.precision
        autocast = "on" if p["autocast"] else "off"
        terminal.detail(f"model {report.model['id']} on {p['device']} in {p['dtype']} (autocast {autocast}): {p['reason']}")
    if report.cpu_tuning:
        tuning = report.cpu_tuning
        rates = ", ".join(f"{size}: {rate} ({tuning['peak_rss_mib_by_batch'][size]} MiB)"
                          for size, rate in tuning["pages_per_second_by_batch"].items())
        earlier = " measured by an earlier build with this model loaded" if rates and not tuning.get("trial_batches", 1) else ""
        terminal.detail(f"cpu: batch size {tuning['batch_size']} (pages/s and peak RSS by batch size{earlier}: {rates or 'not measured'}), "
                        f"{tuning['threads']} model threads (the model waited for pages {tuning['waited_share']:.0%} of the time)")
    for fix in report.dtype_fixes:
        terminal.detail(
            f"aligned [{fix['stage']}] {fix['module']}: {fix['count']} tensors {fix['found']} -> {fix['aligned_to']}"
        )
    kept = f", {report.kept} kept" if report.kept else ""
    retagged = f" ({report.retagged} re-tagged)" if report.retagged else ""
    terminal.info(
        f"{report.indexed} indexed, {report.unchanged} unchanged{retagged}, {report.reused} reused, {report.removed} removed{kept}, "
        f"{report.failed} failed, {report.skipped} skipped; {report.pages_embedded} pages embedded, "
        f"{report.pages_total} in the index ({report.index})"
    )
    for failure in report.failures:
        terminal.error(f"{display_path(failure.path)}: {failure.stage}: {failure.reason}")
