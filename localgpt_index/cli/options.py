"""Options shared by the commands."""

from __future__ import annotations

import math
import re
from typing import Callable

import click

EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure; the index is unchanged
  2  usage error
  3  committed, but some documents failed
  4  a missing piece of the environment (model, converter, device)"""


def _remember(attribute: str):
    def callback(ctx: click.Context, param: click.Parameter, value):
        from .app import Application

        setattr(ctx.find_object(Application), attribute, value)

    return callback


def index_options(func: Callable) -> Callable:
    """Where the index is: the application object keeps them, and `app.store()` opens it."""
    options = [
        click.option("--store", envvar="LGPT_STORE", default=None, metavar="URL", expose_value=False, callback=_remember("store_url"),
                     help="local, qdrant://HOST:PORT/COLLECTION (qdrants:// for https) or qdrant+path://DIR/COLLECTION. "
                          "[env: LGPT_STORE; default: local]"),
        click.option("--qdrant-api-key", envvar="QDRANT_API_KEY", default=None, metavar="KEY", expose_value=False,
                     callback=_remember("qdrant_api_key"), help="For a Qdrant server that wants one. [env: QDRANT_API_KEY]"),
        click.option("--pdf-store", envvar="LGPT_PDF_STORE", default=None, metavar="DIR", expose_value=False,
                     callback=_remember("pdf_store"), type=click.Path(file_okay=False),
                     help="With Qdrant: the folder for converted PDFs (page images). [env: LGPT_PDF_STORE; "
                          "qdrant+path: beside its data]"),
        click.option("--name", "-n", envvar="LGPT_INDEX_NAME", default=None, metavar="NAME", expose_value=False,
                     callback=_remember("index_name"), help="Which index in the index folder. [env: LGPT_INDEX_NAME; default: default]"),
        click.option("--index-dir", envvar="LGPT_INDEX_DIR", default=None, metavar="DIR", expose_value=False,
                     callback=_remember("index_dir"), type=click.Path(file_okay=False),
                     help="Folder holding local indexes. [env: LGPT_INDEX_DIR; default: ./.lgpt-index]"),
    ]
    for option in options:
        func = option(func)
    return func


def model_options(func: Callable) -> Callable:
    func = click.option(
        "--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto", show_default=True,
        help="Weight and autocast dtype; auto follows the device probe.",
    )(func)
    func = click.option(
        "--device", default="auto", show_default=True, metavar="auto|cpu|cuda[:N]|mps", help="Where the model runs."
    )(func)
    return func


# --model of a command that reads an index (query, eval): the query encoder
index_model_option = click.option("--model", "-m", default=None, metavar="ID|PATH",
                                  help="Must be the model the index was built with. [default: that model]")


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
        "--max-resident", type=ByteSize(), default=None, metavar="SIZE",
        help="Device scorer: vectors kept on the device at most (e.g. 40G; 0: stream every query). "
             "[default: the device's free memory less a reserve]",
    )(func)
    func = click.option(
        "--scorer", type=click.Choice(["auto", "cpu", "device"]), default="auto", show_default=True,
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
