"""lgpt-index build"""

from __future__ import annotations

import sys

import click

from .app import Application, output_options
from .options import EXIT_CODES, SECONDS, display_path, index_options, model_options


@click.command(epilog=EXIT_CODES)
@click.argument("docs", type=click.Path(exists=True))
@click.option("--model", "-m", default=None, metavar="ID|PATH",
              help="Hub id or local folder of a ColPali-family model (see README: Models). "
                   "[default: the index's model, else vidore/colpali-v1.3]")
@model_options
@click.option("--batch-size", type=click.IntRange(1, 4096), default=None, help="Pages per forward pass. [default: by device]")
@click.option("--rebuild", is_flag=True, help="Embed everything again into a new generation (committed once, at the end).")
@click.option("--rehash", is_flag=True, help="Read every file to find changes, not only those whose size or times changed.")
@click.option("--metadata", "metadata_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSON or CSV file mapping path globs to key/value pairs, stored per document.")
@click.option("--pool-factor", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Lossy: pool each page's vectors to about 1/N (hierarchical token pooling); 1 is off.")
@click.option("--max-visual-tokens", type=click.IntRange(1, 1 << 20), default=None, metavar="N",
              help="ColQwen families: at most N image tokens a page (fewer vectors and less memory; lossy). Recorded in "
                   "the index; another value needs --rebuild. [default: the index's, else the model's]")
@click.option("--strict", is_flag=True, help="If any document fails, commit nothing and exit 1.")
@click.option("--compile", "compile_model", is_flag=True,
              help="torch.compile the model: about 30 % more pages/s on a GPU, after a compilation of about a minute.")
@click.option("--include", multiple=True, metavar="GLOB", help="Only files matching GLOB (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files matching GLOB (repeatable).")
@click.option("--convert-timeout", type=SECONDS, default=120.0, show_default=True, help="Seconds one conversion may take.")
@click.option("--render-timeout", type=SECONDS, default=60.0, show_default=True,
              help="Seconds poppler may take for a few pages of a PDF.")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Conversions run side by side, ahead of the model.")
@click.option("--text", "text", type=click.Choice(["auto", "never"]), default=None,
              help="Page text for text and hybrid queries: auto, each page's text layer, and OCR as --ocr says; never, "
                   "pixels only (no text read, no OCR, no text stored for these pages; see docs/page-text.md). [default: auto]")
@click.option("--ocr", type=click.Choice(["auto", "always", "never"]), default=None,
              help="Read pages with Tesseract: auto, those with almost no text layer (scans, images; under 32 visible "
                   "characters); always, every page; never, only the text layer. [default: $LGPT_OCR, else auto]")
@click.option("--ocr-lang", default="eng", show_default=True, metavar="LANG",
              help="Tesseract's language(s), e.g. eng or eng+deu (each must be installed: tesseract-ocr-LANG).")
@click.option("--ocr-timeout", type=SECONDS, default=60.0, show_default=True,
              help="Seconds one page's OCR may take (its 300 dpi render and Tesseract); a slower page is indexed without it.")
@click.option("--ocr-workers", type=click.IntRange(1, 256), default=None,
              help="Pages read by OCR side by side, beside the encoder. [default: every CPU]")
@click.option("--commit-every", type=click.IntRange(1), default=None,
              help="Commit after this many new pages. [default: 1000, or fewer commits when a huge catalog makes them slow]")
@click.option("--commit-interval", type=SECONDS, default=600.0, show_default=True, help="Commit at least this often, in seconds.")
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Convert, render and encode on a Ray cluster: auto (the one running), its address, or local "
                   "(start one here). Needs pip install 'lgpt-index[ray]'.")
@click.option("--ray-actors", type=click.IntRange(1, 4096), default=None,
              help="Encoder actors, one model each. [default: one per GPU, or half the CPUs of a cluster without GPUs]")
@click.option("--ray-gpus-per-actor", type=click.FloatRange(0.01, 64), default=1.0, show_default=True,
              help="GPUs each encoder actor takes.")
@index_options
@output_options
@click.pass_obj
def build(app: Application, docs, model, device, dtype, batch_size, rebuild, rehash, metadata_file, pool_factor, max_visual_tokens, strict,
          compile_model, include, exclude, convert_timeout, render_timeout, workers, text, ocr, ocr_lang, ocr_timeout, ocr_workers,
          commit_every, commit_interval, wait_s, ray_address, ray_actors, ray_gpus_per_actor) -> None:
    """Index the documents under DOCS (or bring the index up to date with it). DOCS may be one file:
    that document is indexed or updated, the others in the index are left as they are."""
    from ..indexing.run import BuildOptions, build_index
    from ..core.metadata import load_rules

    store = app.store()
    options = BuildOptions(
        model=model, device=device, dtype=dtype, batch_size=batch_size, rebuild=rebuild, rehash=rehash,
        pool_factor=pool_factor, metadata_rules=load_rules(metadata_file) if metadata_file else None, strict=strict,
        compile=compile_model, include=include, exclude=exclude, convert_timeout_s=convert_timeout,
        render_timeout_s=render_timeout, convert_workers=workers, commit_every_pages=commit_every,
        commit_every_s=commit_interval, wait_s=wait_s, ray=ray_address, ray_actors=ray_actors,
        ray_gpus_per_actor=ray_gpus_per_actor, max_visual_tokens=max_visual_tokens,
        text=text, ocr=ocr, ocr_lang=ocr_lang, ocr_timeout_s=ocr_timeout, ocr_workers=ocr_workers,
    )
    with app.terminal.progress() as progress:
        report = build_index(docs, store, options, progress=progress, log=app.terminal.info)
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
