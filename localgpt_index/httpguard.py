"""The HTTP layer's policies, shared by `serve` and any later HTTP front (the MCP server):
what a request may carry, how long a connection may take, who may ask, and what an answer
or an error may reveal.

Everything here is plain functions and small classes with no FastAPI in them, so that
another server can apply the same rules.
"""

from __future__ import annotations

import re
from typing import Sequence

from .encode import MAX_QUERY_CHARS
from .errors import UsageError

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_query_texts(texts: Sequence[str], field: str = "queries") -> list[str]:
    """Each query on its own, before it joins a batch: a query the model could not read
    (empty, longer than it reads, a lone surrogate that no tokenizer encodes) is refused
    here, naming its place, so that it fails its own request and no other."""
    for number, text in enumerate(texts):
        where = f"{field}[{number}]"
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{where}: empty.")
        if len(text) > MAX_QUERY_CHARS:
            raise UsageError(f"{where}: {len(text):,} characters; queries are limited to {MAX_QUERY_CHARS:,}.")
        bad = _SURROGATE.search(text)
        if bad:
            raise UsageError(f"{where}: a lone surrogate (U+{ord(bad.group()):04X}) at character {bad.start()}; "
                             "send text that is valid Unicode.")
    return list(texts)
