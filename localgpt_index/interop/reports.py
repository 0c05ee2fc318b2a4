"""The JSON documents the CLI prints and the server answers with: one definition for both.

Their schemas are in localgpt_index/schemas/."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import ValidationError

from ..core.types import SearchHit
from ..index.protocols import View
from ..index.text.artifact import positions_missing
from .results import QUERY_SCHEMA_VERSION, QueryDocument, hint_notes


def query_document(view: View, texts: Sequence[str], results: Sequence[Sequence[SearchHit]], k: int,
                   mode: str | None = None, fusion: str | None = None, text_pending: int = 0,
                   hints: Sequence[Sequence[str]] = ()) -> dict:
    """`query --json` and `POST /query` (interop.results.QueryDocument, query.schema.json), without page
    images: pages.attach_images (serve: its PageImages) adds them to the hits. `text_pending`: pages the
    text list could not read yet (pending_text), told where there are some; `hints`: per query, why it
    found nothing (text_misses), told where there are some."""
    queries = [{"query": q, "results": [hit.to_dict() for hit in hits]} for q, hits in zip(texts, results)]
    for answer, said in zip(queries, hints):
        if said:
            answer["hints"] = list(said)
    how: dict = {"mode": mode} if mode else {}
    if mode == "hybrid" and fusion:
        how["fusion"] = fusion
    if text_pending:
        how["text_pending"] = text_pending
    document = _validated({"version": QUERY_SCHEMA_VERSION, "index": view.store.location, "model": view.manifest.model.id,
                           "k": k, **how, "queries": queries})
    if len(queries) == 1:
        document["query"] = queries[0]["query"]
    return document


def _validated(document: dict) -> dict:
    """`document` checked against QueryDocument in one pass (a model per hit was most of building a
    server's answer). Where it holds exactly the published types (strict validation passes) it is the
    document as built, which the model's dump would only copy; otherwise the validated model's dump,
    coerced; an invalid one raises."""
    try:
        QueryDocument.__pydantic_validator__.validate_python(document, strict=True)
        return document
    except ValidationError:
        return QueryDocument.model_validate(document).to_json()


def status_document(view: View) -> dict:
    """`status --json` and `GET /status` (status.schema.json)."""
    m = view.manifest
    return {
        "index": view.store.location,
        "generation": m.generation,
        "documents": len(m.documents),
        "pages": m.page_count,
        "vectors": sum(s.rows for s in m.segments.values()),
        "in_progress": len(m.in_progress),
        "model": m.model.model_dump(),
        "settings": m.settings.model_dump(exclude_none=True),
        "size_bytes": view.store.size_bytes(m),
        "last_build": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(m.created)),
        "tool_version": m.tool_version,
        "format": m.format,
        "failures": [f.model_dump() for f in m.failures],
        "text": _total(text_sources(view).values()),
        "first_pass": first_pass_status(view),
    }


def first_pass_status(view: View) -> dict:
    """The binary first pass: the `auto` threshold, whether this index's `--first-pass auto` queries
    would use it (and why), and how many segments have current codes (`lgpt-index upgrade` writes the rest)."""
    from ..index.scoring.codes.artifact import NAME, READABLE
    from ..index.scoring.codes.plan import AUTO_FROM_PAGES, DEFAULT_CANDIDATES, THRESHOLD, physical_memory

    segments = view.manifest.segments.values()
    path = view.scoring_path("auto")
    return {
        "threshold": THRESHOLD,
        "auto_from_pages": AUTO_FROM_PAGES,
        "memory_bytes": physical_memory(),
        "vector_bytes": sum(seg.rows * seg.dim * 2 for seg in segments),
        "auto_uses_it": path.path == "first-pass",
        "path": path.path,
        "reason": path.reason,
        "candidates": DEFAULT_CANDIDATES,
        "segments": len(segments),
        "coded_segments": sum(1 for seg in segments if NAME in seg.parts and seg.parts[NAME].version in READABLE),
    }


def documents_document(view: View, prefix: str = "", failed: bool = False) -> dict:
    """`ls --json` and `GET /documents` (documents.schema.json): the documents under `prefix`
    (a path prefix, absolute or as given), or with `failed` the documents the last build could not index."""
    m = view.manifest
    document: dict = {"index": view.store.location, "generation": m.generation, "prefix": prefix}
    if failed:
        document["failures"] = [f.model_dump() for f in m.failures if f.path.startswith(prefix)]
        return document
    sources = text_sources(view, prefix)
    document["documents"] = [
        {"path": d.path, "pages": d.pages, "kind": d.kind, "converter": d.converter, "sha256": d.sha256,
         "size": d.size, "metadata": dict(d.metadata), "text": sources[d.path]}
        for d in m.documents if d.path.startswith(prefix)
    ]
    return document


TEXT_SOURCES = ("layer", "ocr", "none", "pending", "unknown")


def text_sources(view: View, prefix: str = "") -> dict[str, dict[str, int]]:
    """Per document (under `prefix`), its pages by the source of their text: the PDF's text layer,
    OCR, none; pending for pages committed before their OCR was read (a later generation brings it);
    unknown for pages written before the index kept page text (a --rebuild reads it).
    Reads the text parts of the segments these documents are in (each once)."""
    from ..index.text.artifact import page_texts

    m = view.manifest
    read: dict = {}
    counts: dict[str, dict[str, int]] = {}
    for doc in m.documents:
        if not doc.path.startswith(prefix):
            continue
        count = dict.fromkeys(TEXT_SOURCES, 0)
        for found in page_texts(m.segments, doc, view.blobs(), read):
            source = found[1] if found is not None else "unknown"
            count[source if source in count else "unknown"] += 1
        counts[doc.path] = count
    return counts


def pending_text(view: View) -> int:
    """Pages of the index's documents whose text is pending (their OCR not read yet): reads only the
    text parts of the segments whose record counts some (none, mostly)."""
    from ..index.text.artifact import TEXT, pending_rows

    if not any(pending_rows(segment.parts.get(TEXT)) for segment in view.manifest.segments.values()):
        return 0
    return sum(count["pending"] for count in text_sources(view).values())


def _total(counts) -> dict[str, int]:
    total = dict.fromkeys(TEXT_SOURCES, 0)
    for count in counts:
        for source, pages in count.items():
            total[source] += pages
    return total


Note = tuple[str, str]  # (level: warn | info | detail, text): a message printed beside a query's answer


def query_answer(index, request, results: Sequence[Sequence[SearchHit]], encoder=None) -> tuple[dict, list[Note]]:
    """`lgpt-index query`'s document for `results` of `index` (a Searcher), and the messages printed
    beside it, alike wherever the query is answered (in the command's process or a warm service);
    `encoder` the model that encoded the queries (None in text mode)."""
    from ..models.resolve import is_random_checkpoint

    mode, notes = index.mode(request), []
    if mode != "text" and encoder is not None:
        if is_random_checkpoint(encoder.model.path):
            notes.append(("warn", f"{encoder.model.id} is a random-weight test checkpoint: these rankings are not meaningful."))
        notes.append(("detail", f"model {index.manifest.model.id} on {encoder.precision.device} in {encoder.precision.dtype}"))
    if mode != "visual" and (lexical := index.lexical) is not None:
        if not lexical.has_pages():
            notes.append(("info", "hint: no page of this index has text (pictures read with --ocr never, or no document): "
                                  "text finds nothing here."))
        if request.regions and positions_missing(index.view.manifest):
            notes.append(("info", "hint: pages indexed before word positions were kept have no text regions: "
                                  "`lgpt-index upgrade` adds them."))
    if request.regions and mode != "text" and (why := index.no_visual_regions()) is not None:
        notes.append(("info", f"hint: no visual regions: this index's hits have none, {why}."))
    pending = pending_text(index.view) if mode != "visual" else 0
    document = query_document(index.view, request.queries, results, request.k, mode, request.fusion, pending,
                              text_misses(index, mode, request.queries, results))
    notes += hint_notes(document)
    if pending:
        found = "ranks them by their pixels alone" if mode == "hybrid" else "cannot find them"
        notes.append(("info", f"note: {pending} page(s) of this index have their text pending (OCR not read yet): {mode} {found} "
                              "until it lands (`lgpt-index build --text-only` reads it)."))
    on_device = index.device_scoring() if mode != "text" else None
    if (request.first_pass is not None or on_device) and mode != "text":  # which path answered (QueryDocument.scoring)
        scoring_path = index.view.scoring_path(request.first_pass)
        document["scoring"] = scoring_path.to_json() | ({"device": on_device} if on_device else {})
        where = f" on {on_device['device']}" if on_device else ""
        notes.append(("detail", f"scored: {scoring_path.path}{where} ({scoring_path.reason})"))
        if scoring_path.hint:
            notes.append(("info", f"hint: {scoring_path.hint}"))
    return document, notes


def text_misses(index, mode: str, texts: Sequence[str], results: Sequence[Sequence[SearchHit]]) -> list[list[str]]:
    """Per query, why text mode found nothing (`miss_hints`; [] where it found pages, or in another mode): the
    hints of `query`, `POST /query` and the MCP search tool alike."""
    lexical = index.lexical if mode == "text" else None
    return [miss_hints(lexical, text) if lexical is not None and not hits else [] for text, hits in zip(texts, results)]


def miss_hints(lexical, text: str) -> list[str]:
    """Why a text query found nothing: the words no page holds, and the nearest indexed words; or its phrase."""
    miss, lines = lexical.explain(text), []
    for word in miss.unknown:
        near = miss.suggestions.get(word) or []
        lines.append(f"no page holds {word!r}" + (f"; the nearest indexed words: {', '.join(near)}" if near else ""))
    if not miss.unknown and lexical.parse(text).phrases:
        lines.append(f"every word of {text!r} is indexed, but no page holds its phrase as quoted")
    return lines

