"""lgpt-index doctor"""

from __future__ import annotations

import sys
from typing import Callable

import click

from ..core.errors import ExitCode, LgptError
from .app import AppCommand, Application, error_object, output_options
from .options import index_options, model_options


@click.command(cls=AppCommand)
@model_options("Also load this checkpoint, audit its dtypes and run one page through it.")
@index_options
@output_options
@click.pass_obj
def doctor(app: Application, model_spec) -> None:
    """Check this machine: packages, devices, the precision the probe picks, converters, the model.

    The model checked is --model, else the one the index at hand (--index-dir/--name/--store)
    was built with, else the default. Exits 4 when something `build` needs is missing, and names it.
    """
    from ..doctor import diagnose

    recorded, location = _index_model(app) if model_spec.id is None else (None, None)
    report = diagnose(model_spec, recorded=recorded, index=location)
    if report["model"]["smoke_test"] and not report["model"]["smoke_test"]["ok"]:
        report["missing"].append(f"model {report['model']['id']} does not run: {report['model']['smoke_test']['error']}")
        report["ok"] = False
    if app.as_json:
        if not report["ok"]:
            report["error"] = error_object("missing: " + "; ".join(report["missing"]), ExitCode.ENVIRONMENT, "environment",
                                           "lgpt-index doctor (without --json) says what each piece is and how to add it")
        app.print_json(report)
    else:
        _print(report)
    sys.exit(int(ExitCode.OK if report["ok"] else ExitCode.ENVIRONMENT))


def _index_model(app: Application):
    """The model the index at hand records, and where that index is; (None, None) without an index.
    A damaged or unreachable index is not doctor's concern (verify's is): the default is checked."""
    try:
        store = app.store()
        manifest = store.read_manifest()
    except LgptError:
        return None, None
    return (manifest.model, store.location) if manifest is not None else (None, None)


def _print(report: dict) -> None:
    echo = click.echo
    echo(f"platform     {report['platform']}, Python {report['python']}")
    echo("packages     " + ", ".join(f"{k} {v or 'MISSING'}" for k, v in report["packages"].items()))
    devices = report["devices"]
    for gpu in devices["cuda"]:
        echo(f"cuda:{gpu['index']}       {gpu['name']}, compute capability {gpu['compute_capability']}, "
             f"{gpu['memory_gib']} GiB, native bfloat16: {'yes' if gpu['native_bf16'] else 'no'}")
    if not devices["cuda"]:
        echo("cuda         none")
    echo(f"mps          {'yes' if devices['mps'] else 'no'}")
    cpu = devices["cpu"]
    bf16 = f", native bfloat16 ({cpu['native_bf16']})" if cpu.get("native_bf16") else ", no native bfloat16"
    echo(f"cpu          {cpu['cores']} cores, {cpu['machine']}{bf16}")
    probe = report["probe"]
    if "error" in probe:
        echo(f"probe        ERROR: {probe['error']}")
    else:
        echo(f"probe        {probe['device']}, {probe['dtype']}, autocast {'on' if probe['autocast'] else 'off'}: {probe['reason']}")
        for warning in probe["warnings"]:
            echo(f"             warning: {warning}")
    conv = report["converters"]
    lo = conv["libreoffice"]
    echo(f"libreoffice  {lo['version'] + ' at ' + lo['path'] if lo['path'] else 'not found'}")
    echo(f"word         {'yes (docx2pdf)' if conv['word'] else 'no'}")
    isolation = conv["network_isolation"]
    confined = "no network namespace here: HTML and Markdown references are still confined to the folder"
    echo(f"isolation    {'converters run without network (' + isolation + ')' if isolation else confined}")
    pop = conv["poppler"]
    echo(f"poppler      {(pop['version'] or '?') + ' at ' + pop['path'] if pop['path'] else 'not found'}")
    cache = report["model_cache"]
    echo(f"model cache  {cache['hub_cache']}{' (HF_HUB_OFFLINE)' if cache['offline'] else ''}")
    model = report["model"]
    source = {"index": f" (the index's, {model['index']})", "default": " (the default)"}.get(model["source"], "")
    echo(f"model        {model['id']}{source}: {'available at ' + model['path'] if model['available'] else 'NOT AVAILABLE'}")
    if model["available"]:
        echo(f"  family     {model['family_name']}, loaded by {model['loader']}"
             f"{' (dynamic resolution)' if model['dynamic_resolution'] else ''}")
    if model["declared_dtypes"]:
        echo("  declared   " + ", ".join(f"{k}={v}" for k, v in model["declared_dtypes"].items()))
    for group, counts in model["stored_dtypes"].items():
        echo(f"  stored     {group}: " + ", ".join(f"{n} {d}" for d, n in counts.items()))
    for fix in model["audit"]:
        echo(f"  aligned    [{fix['stage']}] {fix['module']}: {fix['count']} tensors {fix['found']} -> {fix['aligned_to']}")
    if model["smoke_test"]:
        smoke = model["smoke_test"]
        echo(f"  smoke test {'ok' if smoke['ok'] else 'FAILED: ' + smoke['error']}")
        if smoke["ok"]:
            tokens = smoke["image_tokens_per_page"]
            echo(f"  per page   {smoke['page_vectors'][0]} vectors of {smoke['page_vectors'][1]}"
                 f"{f' ({tokens} image tokens)' if tokens is not None else ''}, "
                 f"{smoke['vector_bytes_per_page'] / 1024:.1f} KiB as float16 (an A4 page)")
    _print_capabilities(report["capabilities"])
    if report["missing"]:
        echo("missing:")
        for item in report["missing"]:
            echo(f"  - {item}")
    else:
        echo("ok: everything build needs is here")


def _print_capabilities(found: dict, echo: Callable[[str], object] = click.echo) -> None:
    """mcp, watch and OCR: not needed by build, each with how to add what it lacks."""
    mcp = found["mcp"]
    echo(f"mcp          {'MCP SDK ' + str(mcp['version']) if mcp['importable'] else 'NOT AVAILABLE: ' + mcp['error']}")
    watch = found["watch"]
    watcher = f"watchfiles {watch['version']}" if watch["importable"] else "watchfiles NOT AVAILABLE: " + watch["error"]
    how = (f"inotify (max_user_watches {watch['max_user_watches']})" if watch["inotify"]
           else f"polling: {watch['inotify_error']}")
    echo(f"watch        {watcher}; changes seen by {how}")
    ocr = found["ocr"]
    if ocr["version"]:
        echo(f"tesseract    {ocr['version']} at {ocr['path']}, languages: {', '.join(ocr['languages']) or 'none'}")
    if ocr["error"]:
        echo(f"{'tesseract' if not ocr['version'] else '':13}{ocr['error']}")
    for item in (mcp, watch, ocr):
        if item["hint"]:
            echo(f"             to add it: {item['hint']}")
