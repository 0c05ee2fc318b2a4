"""Options and error handling shared by the commands."""

from __future__ import annotations

import functools
import sys
from typing import Callable

import click

from ..errors import ExitCode, LgptError
from ..terminal import Terminal

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


def output_options(func: Callable) -> Callable:
    func = click.option("--json", "as_json", is_flag=True, help="Print a JSON document on stdout.")(func)
    func = click.option("-v", "--verbose", is_flag=True, help="Say more on stderr.")(func)
    func = click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")(func)
    return func


def make_terminal(quiet: bool, verbose: bool) -> Terminal:
    return Terminal(verbosity=-1 if quiet else (1 if verbose else 0))


def report_errors(func: Callable) -> Callable:
    """Turn LgptError into a message and its exit code instead of a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except LgptError as exc:
            terminal = Terminal()
            terminal.error(exc.message)
            if exc.hint:
                terminal.console.print(f"hint: {exc.hint}", markup=False)
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            Terminal().error("interrupted; the index keeps its last committed generation.")
            sys.exit(int(ExitCode.FAILURE))

    return wrapper


def print_json(data) -> None:
    """JSON on stdout. ASCII escapes keep it valid whatever the file names hold (a name that
    is not UTF-8 comes out as \\udcXX escapes, which Python's json reads back to the same path)."""
    import json

    click.echo(json.dumps(data, indent=2, ensure_ascii=True, default=str))


def display_path(path: str) -> str:
    """A path fit for a terminal: bytes that are not UTF-8 shown as U+FFFD."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
