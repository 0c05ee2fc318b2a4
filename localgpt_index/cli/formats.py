"""Output formats of `query`, `ls` and `eval`: a table for people, lines, TSV, JSON Lines, JSON or paths for scripts.

`--format` picks one (`--json` is `--format json`); without it, a terminal gets the table and a pipe
or file gets lines, one record a line (`path:page<TAB>score<TAB>snippet` for hits, in the spirit of
ripgrep's `path:line:text`): no wrapping, no markup, no colour. Each command describes its records
once (a `Listing`); `write` prints them in the chosen format."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import click

from ..core.errors import UsageError
from .app import Application

if TYPE_CHECKING:
    from rich.text import Text

FORMATS: Final = ("table", "lines", "tsv", "jsonl", "json", "paths")
_BREAKS = re.compile(r"[\t\n\r\v\f]")


@functools.cache
def _marked() -> re.Pattern[str]:
    """A snippet's marked words (index.text.snippet's MARK), compiled when a snippet is shown: the text
    analysis that module comes with (regex, the stemmers) stays out of a query that shows none."""
    from ..index.text.snippet import MARK

    return re.compile(re.escape(MARK[0]) + "(.+?)" + re.escape(MARK[1]))


def format_option(func):
    """--format, read first as --json is (an error in another option is reported in JSON): `--format json` is --json."""
    def callback(ctx: click.Context, param: click.Parameter, given: str | None) -> None:
        app = ctx.ensure_object(Application)
        app.output_format = given
        if given == "json":
            app.as_json = True

    return click.option("--format", "output_format", type=click.Choice(FORMATS), default=None, expose_value=False, is_eager=True,
                        callback=callback, help="table (on a terminal), lines (elsewhere: one a line, tab-separated), tsv "
                                                "(with a header), jsonl, json (--json) or paths (one a line).")(func)


def chosen_format(given: str | None, as_json: bool) -> str:
    """The format asked for (`--format`, or `--json`), else the table on a terminal and lines elsewhere."""
    if as_json and given not in (None, "json"):
        raise UsageError(f"--json and --format {given} ask for two formats: give one (--json is --format json).")
    if as_json:
        return "json"
    if given is not None:
        return given
    return "table" if sys.stdout.isatty() else "lines"


@dataclass(frozen=True)
class Listing:
    """A command's records for the formats but json (its document) and table (its own rich table):
    `rows` (one JSON object each, for jsonl), `columns` (tsv's header, and each cell from a row), `line`
    (lines), `paths` (the paths format: None where the command lists none)."""

    rows: Sequence[dict[str, Any]]
    columns: dict[str, Callable[[dict[str, Any]], Any]]
    line: Callable[[dict[str, Any]], str]
    paths: Callable[[dict[str, Any]], Sequence[str]] | None = None


def write(fmt: str, listing: Listing, document: dict, table: Callable[[], None], print_json: Callable[[Any], None]) -> None:
    """Print `listing` (or `document` as JSON, or `table()`) in `fmt` on stdout."""
    if fmt == "json":
        print_json(document)
    elif fmt == "table":
        table()
    elif fmt == "jsonl":
        for row in listing.rows:
            click.echo(json.dumps(row, ensure_ascii=True, default=str))
    elif fmt == "tsv":
        click.echo("\t".join(listing.columns))
        for row in listing.rows:
            click.echo("\t".join(cell(value(row)) for value in listing.columns.values()))
    elif fmt == "lines":
        for row in listing.rows:
            click.echo(listing.line(row))
    else:
        _write_paths(listing)


def _write_paths(listing: Listing) -> None:
    if listing.paths is None:
        raise UsageError("--format paths: this command lists no documents (use jsonl, tsv or lines).")
    seen: set[str] = set()
    for row in listing.rows:
        for path in listing.paths(row):
            if path not in seen:
                seen.add(path)
                # the path's own bytes (xargs opens them), unless a line break would split it
                click.echo(os.fsencode(path) if "\n" not in path and "\r" not in path else clean(path))


def cell(value: Any) -> str:
    """One cell or field of a line: text on one line (`clean`), a float with 4 decimals, a list joined
    with ', ', nothing for None."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(item) for item in value)
    return clean(str(value))


def clean(text: str) -> str:
    """`text` (a path, a name) on one line, fit for a terminal and a script: bytes that are not UTF-8 as
    U+FFFD, tabs, line breaks and other control characters as escapes (`two\\nlines.pdf`)."""
    from .options import display_path

    return display_path(text)


def plain(snippet: str) -> str:
    """A snippet as prose on one line: without the marks around its matched words, its tabs and line
    breaks as spaces."""
    if not snippet:  # (a visual hit's: nothing to import the marks for)
        return snippet
    return _BREAKS.sub(" ", _marked().sub(r"\1", snippet))


def styled_snippet(snippet: str, style: str = "bold yellow") -> Text:
    """A snippet as rich Text: its matched words in `style`, the marks gone."""
    from rich.text import Text

    from .options import display_path

    text, at = Text(), 0
    for match in _marked().finditer(snippet):
        text.append(display_path(snippet[at:match.start()]))
        text.append(display_path(match.group(1)), style=style)
        at = match.end()
    text.append(display_path(snippet[at:]))
    return text
