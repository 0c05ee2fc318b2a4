"""A query set from what the user names: a BEIR folder, or a JSONL file."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import UsageError
from .beir import load_beir
from .queryset import QuerySet, load_jsonl


def load_query_set(path: str | Path, split: str = "test") -> QuerySet:
    """A JSONL query file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)."""
    source = Path(path)
    if source.is_dir():
        return load_beir(source, split)
    if not source.is_file():
        raise UsageError(f"{path}: no such file or folder.",
                         hint="Give a JSONL query file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
    return load_jsonl(source, str(path))
