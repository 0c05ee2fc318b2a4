"""Word positions as a per-segment part beside the page text: each token's box, line and block, packed.

The "words" part of a segment holds, row by row, what core/words.PageWords holds for a page (None for a
page without positions: no text, read before positions were kept, or the `tesseract` command's OCR). One
zlib blob a segment: a header (a little-endian uint32 length, then JSON: each row's token and line counts,
-1 for none) and the arrays of every row one after the other, each coordinate plane, the tokens' lines and
the lines' blocks delta-coded (uint16, wrapping) so that zlib finds a line's shared top and bottom and a
line's steady steps. The part is written, sealed, checksummed, verified and collected by the transaction
core as the text part is (index/text/artifact.py); text read late (indexing/textfollow.py) replaces the
rows it brings. A segment without the part (an index from before word positions) gives no text regions
until `lgpt-index upgrade` adds it from the documents' text layers.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from ...core.errors import IndexProblem
from ...core.types import PageRef
from ...core.words import NO_LINE, PageWords
from ..artifacts import BlobSink, BlobSource, CommitContext
from ..format.manifest import ArtifactRef, Document, PartRef, Segment

WORDS = "words"


def _delta(values: np.ndarray) -> np.ndarray:
    return np.diff(values.astype(np.uint16), prepend=np.uint16(0)).astype(np.uint16)


def _undelta(values: np.ndarray) -> np.ndarray:
    return np.cumsum(values, dtype=np.uint64).astype(np.uint16) if len(values) else values.astype(np.uint16)


def encode_words(rows: Sequence[PageWords | None]) -> bytes:
    """A segment's rows of word positions as one blob (see the module's docstring)."""
    counts = [[len(w), len(w.blocks)] if w is not None else [-1, -1] for w in rows]
    present = [w for w in rows if w is not None]
    boxes = np.concatenate([w.boxes for w in present]) if present else np.zeros((0, 4), np.uint16)
    lines = np.concatenate([w.lines for w in present]) if present else np.zeros(0, np.uint16)
    blocks = np.concatenate([w.blocks for w in present]) if present else np.zeros(0, np.uint16)
    header = json.dumps({"rows": counts}, separators=(",", ":")).encode()
    planes = [_delta(boxes[:, column]) for column in range(4)] + [_delta(lines), _delta(blocks)]
    return zlib.compress(struct.pack("<I", len(header)) + header + b"".join(plane.astype("<u2").tobytes() for plane in planes), 9)


def decode_words(data: bytes) -> list[PageWords | None]:
    """The rows of a words blob; IndexProblem if it is damaged."""
    try:
        raw = zlib.decompress(data)
        (length,) = struct.unpack_from("<I", raw)
        counts = json.loads(raw[4: 4 + length])["rows"]
        tokens = sum(t for t, _ in counts if t >= 0)
        lines = sum(n for _, n in counts if n >= 0)
        body = np.frombuffer(raw, dtype="<u2", offset=4 + length)
        if len(body) != 5 * tokens + lines:
            raise ValueError(f"{len(body)} values for {tokens} words and {lines} lines")
        planes = [_undelta(body[i * tokens:(i + 1) * tokens]) for i in range(5)] + [_undelta(body[5 * tokens:])]
    except (zlib.error, ValueError, KeyError, TypeError, struct.error) as exc:
        raise IndexProblem(f"a words part is damaged ({exc}).") from None
    boxes, token_lines, blocks = np.stack(planes[:4], axis=1), planes[4], planes[5]
    rows: list[PageWords | None] = []
    at = line_at = 0
    for count, line_count in counts:
        if count < 0:
            rows.append(None)
            continue
        rows.append(PageWords(boxes[at: at + count], token_lines[at: at + count], blocks[line_at: line_at + line_count]))
        at, line_at = at + count, line_at + line_count
    return rows


class WordsPartWriter:
    """A segment's pages' word positions, in row order."""

    def __init__(self) -> None:
        self.rows: list[PageWords | None] = []

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None:
        if row != len(self.rows):
            raise ValueError(f"words part: row {row} after {len(self.rows)} rows")
        words = extra.get("words")
        self.rows.append(words if isinstance(words, PageWords) else None)

    def seal(self, sink: BlobSink) -> PartRef:
        return words_part(self.rows, sink)

    def discard(self) -> None:
        self.rows = []


def words_part(rows: Sequence[PageWords | None], sink: BlobSink) -> PartRef:
    return PartRef(version=WordsArtifact.version, blobs=[sink.put(encode_words(rows), "wordsz")],
                   meta={"rows": len(rows), "with_words": sum(1 for w in rows if w is not None)})


def read_words_part(ref: PartRef, source: BlobSource) -> list[PageWords | None]:
    return decode_words(source.read(ref.blobs[0]))


def rewritten_words_part(rows: Mapping[int, PageWords | None], ref: PartRef, source: BlobSource, sink: BlobSink) -> PartRef:
    """A segment's words part with `rows` (row -> words) read since: the others as they were."""
    current = read_words_part(ref, source)
    for row, words in rows.items():
        if not 0 <= row < len(current):
            raise ValueError(f"words part: row {row} of {len(current)}")
        current[row] = words
    return words_part(current, sink)


def page_words(segments: Mapping[str, Segment], doc: Document, page: int, source: BlobSource,
               cache: dict[str, list[PageWords | None]] | None = None) -> PageWords | None:
    """Page `page` (1-based) of `doc`'s word positions (None: its segment has no words part, or the page none)."""
    cache = {} if cache is None else cache
    before = 0
    for span in doc.spans:
        if page <= before + span.pages:
            segment = segments.get(span.segment)
            part = segment.parts.get(WORDS) if segment is not None else None
            if part is None or part.version != WordsArtifact.version:
                return None
            if span.segment not in cache:
                cache[span.segment] = read_words_part(part, source)
            rows = cache[span.segment]
            row = span.first + page - before - 1
            return rows[row] if row < len(rows) else None
        before += span.pages
    return None


def document_words(segments: Mapping[str, Segment], doc: Document, source: BlobSource,
                   cache: dict[str, list[PageWords | None]] | None = None) -> list[PageWords | None]:
    """Each page's word positions of `doc`, in page order (None where a page has none)."""
    cache = {} if cache is None else cache
    return [page_words(segments, doc, page, source, cache) for page in range(1, doc.pages + 1)]


class WordsArtifact:
    """The per-segment word positions (parts only)."""

    name = WORDS
    version = 1

    def part_writer(self, dim: int) -> WordsPartWriter:
        return WordsPartWriter()

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None  # positions come from the documents (`lgpt-index upgrade`), not from what the index holds

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef | None:
        return None

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        if ref.version != self.version:
            return []  # another version's: readers here treat it as absent
        try:
            rows = read_words_part(ref, source)
        except IndexProblem as exc:
            return [exc.message]
        if len(rows) != ref.meta.get("rows"):
            return [f"{len(rows)} rows of word positions, its record says {ref.meta.get('rows')}"]
        for number, words in enumerate(rows):
            if words is None:
                continue
            known = words.lines[words.lines != NO_LINE]
            if len(known) and int(known.max()) >= len(words.blocks):
                return [f"row {number}: a word names a line the page does not have"]
        return []

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> object:
        return dict(parts)
