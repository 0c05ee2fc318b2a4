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


def index_options(func: Callable) -> Callable:
    func = click.option(
        "--name", "-n", envvar="LGPT_INDEX_NAME", default=None, metavar="NAME",
        help="Which index in the index folder. [env: LGPT_INDEX_NAME; default: default]",
    )(func)
    func = click.option(
        "--index-dir", envvar="LGPT_INDEX_DIR", default=None, metavar="DIR",
        type=click.Path(file_okay=False), help="Folder holding the indexes. [env: LGPT_INDEX_DIR; default: ./.lgpt-index]",
    )(func)
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
