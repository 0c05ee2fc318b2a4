"""Options shared by the commands."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, Callable

import click

from .app import Application
from .defaults import LocationOption, TuningOption

if TYPE_CHECKING:
    from ..indexing.options import BuildOptions, BuildSettings
    from ..models.resolve import ModelSpec

EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure; the index is unchanged
  2  usage error
  3  committed, but some documents failed
  4  a missing piece of the environment (model, converter, device)"""


def _remember(attribute: str):
    def callback(ctx: click.Context, param: click.Parameter, value):
        ctx.ensure_object(Application).locate(attribute, value, ctx, param)

    return callback


def index_options(func: Callable) -> Callable:
    """Where the index is, on the group and on each command: the application object keeps the one given
    most strongly (Application.locate), and `app.store()` opens it."""
    options = [
        click.option("--store", cls=LocationOption, envvar="LGPT_STORE", default=None, metavar="URL", expose_value=False,
                     callback=_remember("store_url"),
                     help="local, qdrant://HOST:PORT/COLLECTION (qdrants:// for https) or qdrant+path://DIR/COLLECTION. "
                          "[env: LGPT_STORE; default: local]"),
        click.option("--qdrant-api-key", cls=LocationOption, envvar="QDRANT_API_KEY", default=None, metavar="KEY", expose_value=False,
                     callback=_remember("qdrant_api_key"), help="For a Qdrant server that wants one. [env: QDRANT_API_KEY]"),
        click.option("--pdf-store", cls=LocationOption, envvar="LGPT_PDF_STORE", default=None, metavar="DIR", expose_value=False,
                     callback=_remember("pdf_store"), type=click.Path(file_okay=False),
                     help="With Qdrant: the folder for converted PDFs (page images). [env: LGPT_PDF_STORE; "
                          "qdrant+path: beside its data]"),
        click.option("--name", "-n", cls=LocationOption, envvar="LGPT_INDEX_NAME", default=None, metavar="NAME", expose_value=False,
                     callback=_remember("index_name"), help="Which index in the index folder. [env: LGPT_INDEX_NAME; default: default]"),
        click.option("--index-dir", cls=LocationOption, envvar="LGPT_INDEX_DIR", default=None, metavar="DIR", expose_value=False,
                     callback=_remember("index_dir"), type=click.Path(file_okay=False),
                     help="Folder holding local indexes. [env: LGPT_INDEX_DIR; default: the nearest .lgpt-index here or in a "
                          "parent folder, else ./.lgpt-index]"),
    ]
    for option in options:
        func = option(func)
    return func


def model_options(model_help: str, everyday: bool = True) -> Callable[[Callable], Callable]:
    """--model (from $LGPT_MODEL too), --device and --dtype, handed to the command as one `model_spec`
    (models/resolve.py ModelSpec); `everyday`: --model and --device among the everyday options, else under Tuning."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def command(*args, **kwargs):
            from ..models.resolve import ModelSpec

            spec = ModelSpec(kwargs.pop("model", None), kwargs.pop("device"), kwargs.pop("dtype"))
            return func(*args, model_spec=spec, **kwargs)

        shown = click.Option if everyday else TuningOption
        command = click.option(
            "--dtype", cls=TuningOption, type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto",
            show_default=True, help="Weight and autocast dtype; auto follows the device probe.",
        )(command)
        command = click.option(
            "--device", cls=shown, default="auto", show_default=True, metavar="auto|cpu|cuda[:N]|mps", help="Where the model runs."
        )(command)
        return click.option("--model", "-m", cls=shown, envvar="LGPT_MODEL", default=None, metavar="ID|PATH",
                            help=f"{model_help} [env: LGPT_MODEL]")(command)

    return decorate


# --model of build and watch, and of a command that reads an index (query, eval): the query encoder
BUILD_MODEL_HELP = ("Hub id or local folder of a ColPali-family model (see README: Models). "
                    "[default: the index's model, else vidore/colpali-v1.3]")
INDEX_MODEL_HELP = "Must be the model the index was built with. [default: that model]"
# --model of serve and mcp: the model of a folder --watch indexes for the first time
SERVED_MODEL_HELP = ("With --watch and no index yet: the model to build it with (see README: Models); else it must be the "
                     "index's. [default: the index's model, else vidore/colpali-v1.3]")
LATER_HELP = ("; later, as the index's mode (auto), but the build returns once the pages are searchable by their "
              "pixels, their OCR left for `build --text-only`, the next build or a watcher")
RECORDED = "Recorded in the index: left out, the index's; another value needs --rebuild."


def settings_options(when: str = "", only_with: str | None = None, later: bool = False) -> Callable[[Callable], Callable]:
    """The settings an index records (indexing/options.py BuildSettings), of build, watch, serve --watch and
    mcp --watch: handed to the command as one `settings`; `when` prefixes their help. `only_with`: the
    parameter without which they do nothing (serve's and mcp's `watch_docs`): one given alone is refused.
    `later`: --ocr later too (build), the index's OCR mode after the build, handed on as `ocr_later`."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def command(*args, **kwargs):
            from ..indexing.options import BuildSettings

            names = ("pool_factor", "max_visual_tokens", "text", "ocr", "ocr_lang", "language")
            given = {name: kwargs.pop(name) for name in names}
            if later:
                kwargs["ocr_later"] = given["ocr"] == "later"
                given["ocr"] = None if given["ocr"] == "later" else given["ocr"]
            if only_with is not None and kwargs.get(only_with) is None and any(v is not None for v in given.values()):
                from ..core.errors import UsageError

                flags = ", ".join("--" + name.replace("_", "-") for name, value in given.items() if value is not None)
                raise UsageError(f"{flags}: only with --watch (they say how the watcher builds the index).",
                                 hint="Give --watch DOCS, or drop them: a served index keeps the settings it was built with.")
            return func(*args, settings=BuildSettings(**given), **kwargs)

        shown = click.Option if only_with is None else TuningOption
        options = [
            click.option("--pool-factor", cls=TuningOption, type=click.IntRange(1, 64), default=None, metavar="N",
                         help=f"{when}Lossy: pool each page's vectors to about 1/N (hierarchical token pooling); 1 is off. "
                              f"{RECORDED} [default: the index's, else 1]"),
            click.option("--max-visual-tokens", cls=TuningOption, type=click.IntRange(1, 1 << 20), default=None, metavar="N",
                         help=f"{when}ColQwen families: at most N image tokens a page (fewer vectors and less memory; "
                              f"lossy). {RECORDED} [default: the index's, else the model's]"),
            click.option("--text", "text", cls=shown, type=click.Choice(["auto", "never"]), default=None,
                         help=f"{when}Page text for text and hybrid queries: auto, each page's text layer, and OCR as --ocr "
                              "says; never, pixels only (no text read, no OCR, no text stored; see docs/page-text.md). "
                              f"{RECORDED} [default: the index's, else auto]"),
            click.option("--ocr", cls=shown, type=click.Choice(["auto", "always", "never", *(["later"] if later else [])]), default=None,
                         help=f"{when}Read pages with Tesseract: auto, those with almost no text layer (scans, images; under "
                              "32 visible characters); always, every page; never, only the text layer"
                              f"{LATER_HELP if later else ''}. "
                              f"{RECORDED} [default: the index's, else $LGPT_OCR, else auto]"),
            click.option("--ocr-lang", cls=shown, default=None, metavar="LANG",
                         help=f"{when}Tesseract's language(s), e.g. eng or eng+deu (each must be installed: "
                              f"tesseract-ocr-LANG). {RECORDED} [default: the index's, else eng]"),
            click.option("--language", cls=shown, default=None, metavar="auto|CODE[+CODE]", callback=_language,
                         help=f"{when}The language(s) text search stems words in, as ISO 639-1 codes (de, or de+en); auto, "
                              "each document's detected. Recorded in the index: left out, the index's; another value builds "
                              "the text index again (not the vectors). [default: the index's, else --ocr-lang's languages "
                              "when given, else auto]"),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _language(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from ..index.text.language import language_setting

    try:
        return None if value is None else language_setting(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def source_options(func: Callable) -> Callable:
    """How build and watch read the folder and feed the model (BuildOptions' fields of the same names)."""
    options = [
        click.option("--batch-size", cls=TuningOption, type=click.IntRange(1, 4096), default=None,
                     help="Pages per forward pass. [default: by device]"),
        click.option("--metadata", "metadata_file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="JSON or CSV file mapping path globs to key/value pairs, stored per document."),
        click.option("--include", multiple=True, metavar="GLOB", help="Only files matching GLOB (repeatable)."),
        click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files matching GLOB (repeatable)."),
        click.option("--workers", "convert_workers", cls=TuningOption, type=click.IntRange(1, 64), default=2, show_default=True,
                     help="Conversions run side by side, ahead of the model."),
        click.option("--convert-timeout", "convert_timeout_s", cls=TuningOption, type=SECONDS, default=120.0, show_default=True,
                     help="Seconds one conversion may take."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_options(model_spec: ModelSpec, settings: BuildSettings, metadata_file: str | None = None, **given: Any) -> BuildOptions:
    """The one BuildOptions of build, watch, serve --watch and mcp --watch: their shared options (the model, the
    recorded settings, --metadata's file) and the command's others, named as BuildOptions' fields."""
    from ..core.metadata import load_rules
    from ..indexing.options import BuildOptions

    rules = load_rules(metadata_file) if metadata_file else None
    return BuildOptions(model=model_spec, settings=settings, metadata_rules=rules, **given)


def listen_options(port: int, when: str = "", token_help: str = "Bearer token every request must carry.") -> Callable:
    """--host, --port and --token of a command that listens (serve, mcp --http); `when` prefixes their help."""

    def decorate(func: Callable) -> Callable:
        func = click.option("--token", envvar="LGPT_SERVE_TOKEN", default=None, metavar="TOKEN",
                            help=f"{when}{token_help} [env: LGPT_SERVE_TOKEN]")(func)
        func = click.option("--port", type=click.IntRange(0, 65535), default=port, show_default=True,
                            help=f"{when}{'p' if when else 'P'}ort (0: any free one).")(func)
        host_help = "address to listen on; anything but loopback needs --token."
        return click.option("--host", default="127.0.0.1", show_default=True,
                            help=f"{when}{host_help if when else host_help.capitalize()}")(func)

    return decorate


class ByteSize(click.ParamType):
    """A number of bytes: 0, 123456, 512M, 20G, 1.5T (powers of 1024)."""

    name = "size"
    UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(value), re.IGNORECASE)
        if not found:
            self.fail(f"{value!r} is not a size (e.g. 0, 512M, 20G).", param, ctx)
        return int(float(found.group(1)) * self.UNITS[found.group(2).upper()])


def scoring_options(func: Callable) -> Callable:
    """--scorer and --max-resident: where exact scoring runs (query, serve; docs/performance.md "On a GPU")."""
    func = click.option(
        "--max-resident", cls=TuningOption, type=ByteSize(), default=None, metavar="SIZE",
        help="Device scorer: vectors kept on the device at most (e.g. 40G; 0: stream every query). "
             "[default: the device's free memory less a reserve]",
    )(func)
    func = click.option(
        "--scorer", cls=TuningOption, type=click.Choice(["auto", "cpu", "device"]), default="auto", show_default=True,
        help="Exact scoring on the CPU, or on the model's device with its vectors resident there "
             "(auto: the device when the model is on a CUDA GPU).",
    )(func)
    return func


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def display_path(path: str) -> str:
    """A path fit for a terminal: bytes that are not UTF-8 shown as U+FFFD, control characters
    (a newline in a file name would split a table row) as escapes."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


class Seconds(click.ParamType):
    """A finite number of seconds, 0 or more (nan and inf are refused)."""

    name = "seconds"

    def convert(self, value, param, ctx) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r}: expected a finite number of seconds, 0 or more.", param, ctx)
        return number


SECONDS = Seconds()


def typed_path(typed: str, known: Collection[str], bases: Iterable[str], prefix: bool = False) -> str:
    """A path the user typed (`ls PREFIX`, `remove PATH`) as the index names documents (absolute): against
    the current folder, else against each of `bases` (the indexed tree's folder, the index's project folder),
    the first that names one of `known`; else against the current folder. `prefix`: the start of a path
    names what starts with it (ls), else a path names itself and what is under it (remove)."""
    if os.path.isabs(typed):
        return typed
    tail = os.sep if typed.endswith(os.sep) else ""
    candidates = [os.path.abspath(typed) + tail] + [os.path.normpath(os.path.join(base, typed)) + tail for base in bases]
    for candidate in dict.fromkeys(candidates):
        under = candidate.rstrip(os.sep) + os.sep
        if any(path.startswith(candidate) if prefix else path == candidate or path.startswith(under) for path in known):
            return candidate
    return candidates[0]


def tree_folders(paths: Collection[str], index_dir: str | None) -> list[str]:
    """Where a typed path may be relative to: the deepest folder holding every document, and the folder the
    index's .lgpt-index is in."""
    folders = [os.path.dirname(path) for path in paths if os.path.isabs(path)]
    try:
        found = [os.path.commonpath(folders)] if folders else []
    except ValueError:  # paths on different drives
        found = []
    return found + ([os.path.dirname(os.path.abspath(index_dir))] if index_dir else [])
