"""A query request's bounds, as plain numbers: what the command line's options check without pydantic.

query.request builds its fields on them; `lgpt-index query` reads them for its options' ranges on the
warm path, which imports no pydantic (cli/query.py)."""

from __future__ import annotations

from typing import Final

MAX_QUERY_CHARS: Final = 2048  # longer text is refused before tokenising (a 1 MB query took 600 s)
MAX_K: Final = 1000
MAX_FIRST_PASS: Final = 1_000_000
MAX_RRF_K: Final = 100_000
DPI: Final = (20, 150, 600)  # the least, the default and the most
