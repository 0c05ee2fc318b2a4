"""A query request's bounds, as plain numbers: what the command line's options check without pydantic.

query.request builds its fields on them; `lgpt-index query` reads them for its options' ranges on the
warm path, which imports no pydantic (cli/query.py)."""

from __future__ import annotations

from typing import Final

from ..core.errors import UsageError

MAX_QUERY_CHARS: Final = 2048  # longer text is refused before tokenising (a 1 MB query took 600 s)
MAX_K: Final = 1000
MAX_FIRST_PASS: Final = 1_000_000
MAX_RRF_K: Final = 100_000
DPI: Final = (20, 150, 600)  # the least, the default and the most


def check_utf8(text: str, place: str, shown: bool = False) -> None:
    """`text` is UTF-8 (a lone surrogate, from argv bytes that are not UTF-8 or a JSON escape, no tokenizer reads),
    or a UsageError naming `place`; `shown`: with its bytes, for the command line's own arguments (a server does not
    repeat a request's value back: its messages leave its folders out, so an echo would say which a guess named)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        detail = ""
        if shown:
            try:
                detail = f" ({text.encode('utf-8', 'surrogateescape')!r})"  # the bytes a command line gave
            except UnicodeEncodeError:
                detail = f" ({text.encode('utf-8', 'backslashreplace')!r})"
        raise UsageError(f"{place} is not UTF-8 text{detail}.",
                         hint="Check the terminal's or the script's encoding (the locale): queries are UTF-8 text.") from None
