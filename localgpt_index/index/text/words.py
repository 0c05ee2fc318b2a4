"""Word positions as a per-segment part beside the page text: each token's box, line and block, packed.

The "words" part of a segment holds, row by row, what core/words.PageWords holds for a page (None for a
page without positions: no text, or read before positions were kept). One
zlib blob a segment: a header (a little-endian uint32 length, then JSON: each row's token and line counts,
-1 for none), then the arrays of every row one after the other: each line's box (4 x uint16, the union of
its words'), each word's line and each line's block (uint16), each word's ends along its line (2 x uint8,
in 1/255 of the line's length: its words share the line's top and bottom). Each array is delta-coded
(wrapping) so that zlib finds a page's steady steps. A word's box comes back within 1/255 of its line's
length along it (under 2 pt on a letter page's full line), and its line's box exactly. The part is
written, sealed, checksummed, verified and collected by the transaction core as the text part is
(index/text/artifact.py); text read late (indexing/textfollow.py) replaces the rows it brings. A segment
without the part (an index from before word positions) gives no text regions until `lgpt-index upgrade`
adds it from the documents' text layers.
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from ...core.errors import IndexProblem
from ...core.types import PageRef
from ...core.words import NO_LINE, PageWords
from ..artifacts import BlobSink, BlobSource, CommitContext
from ..format.manifest import ArtifactRef, Document, PartRef, Segment

WORDS = "words"


RELATIVE = 255  # a word's ends along its line, in steps of the line's length (uint8)


def _delta(values: np.ndarray, dtype: type = np.uint16) -> np.ndarray:
    return np.diff(values.astype(dtype), prepend=dtype(0)).astype(dtype)


def _undelta(values: np.ndarray, dtype: type = np.uint16) -> np.ndarray:
    return np.cumsum(values, dtype=np.uint64).astype(dtype) if len(values) else values.astype(dtype)


def _line_boxes(words: PageWords) -> np.ndarray:
    """Each line's box (uint16 (lines, 4)): the union of its words' boxes."""
    boxes = np.zeros((len(words.blocks), 4), np.uint16)
    known = words.lines != NO_LINE
    lines, tokens = words.lines[known].astype(np.int64), words.boxes[known]
    if len(lines):
        boxes[:, :2] = 0xFFFF
        np.minimum.at(boxes[:, 0], lines, tokens[:, 0])
        np.minimum.at(boxes[:, 1], lines, tokens[:, 1])
        np.maximum.at(boxes[:, 2], lines, tokens[:, 2])
        np.maximum.at(boxes[:, 3], lines, tokens[:, 3])
    return boxes


def _along(lines: np.ndarray) -> np.ndarray:
    """Whether each line runs across the page (True) or down it (a page turned a quarter): the axis its words follow."""
    return (lines[:, 2].astype(np.int64) - lines[:, 0]) >= (lines[:, 3].astype(np.int64) - lines[:, 1])


def _along_lines(lines: np.ndarray, token_lines: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For words on the lines `token_lines` (known ones): their line's box (float64), whether it runs across the
    page, and where it starts and ends along its axis."""
    own = lines[token_lines.astype(np.int64)].astype(np.float64)
    across = _along(lines)[token_lines.astype(np.int64)]
    return own, across, np.where(across, own[:, 0], own[:, 1]), np.where(across, own[:, 2], own[:, 3])


def _relative(words: PageWords, lines: np.ndarray) -> np.ndarray:
    """Each word's ends along its line, in RELATIVE steps of the line's length (uint8 (n, 2))."""
    found = np.zeros((len(words), 2), np.uint8)
    known = words.lines != NO_LINE
    if not known.any():
        return found
    _, across, start, end = _along_lines(lines, words.lines[known])
    boxes = words.boxes[known].astype(np.float64)
    low, high = np.where(across, boxes[:, 0], boxes[:, 1]), np.where(across, boxes[:, 2], boxes[:, 3])
    length = np.maximum(end - start, 1.0)
    found[known, 0] = np.clip(np.floor((low - start) / length * RELATIVE), 0, RELATIVE)
    found[known, 1] = np.clip(np.ceil((high - start) / length * RELATIVE), 0, RELATIVE)
    return found


def _placed(lines: np.ndarray, token_lines: np.ndarray, relative: np.ndarray, blocks: np.ndarray) -> PageWords:
    """A page's words from its line boxes and each word's ends along its line."""
    boxes = np.zeros((len(token_lines), 4), np.uint16)
    known = token_lines != NO_LINE
    if known.any():
        own, across, start, end = _along_lines(lines, token_lines[known])
        low = np.rint(start + (end - start) * relative[known, 0] / RELATIVE)
        high = np.rint(start + (end - start) * relative[known, 1] / RELATIVE)
        placed = own.copy()
        placed[:, 0], placed[:, 2] = np.where(across, low, own[:, 0]), np.where(across, high, own[:, 2])
        placed[:, 1], placed[:, 3] = np.where(across, own[:, 1], low), np.where(across, own[:, 3], high)
        boxes[known] = placed.astype(np.uint16)
    return PageWords(boxes, token_lines.copy(), blocks.copy())  # (copies: a page kept must not hold its segment's arrays)


def encode_words(rows: Sequence[PageWords | None]) -> bytes:
    """A segment's rows of word positions as one blob: each line's box (uint16), each word's line and its ends
    along it (uint8 steps of the line's length: the words of a line share its top and bottom), each line's block."""
    counts = [[len(w), len(w.blocks)] if w is not None else [-1, -1] for w in rows]
    present = [w for w in rows if w is not None]
    lines = [_line_boxes(w) for w in present]
    relative = [_relative(w, box) for w, box in zip(present, lines)]
    line_boxes = np.concatenate(lines) if lines else np.zeros((0, 4), np.uint16)
    token_lines = np.concatenate([w.lines for w in present]) if present else np.zeros(0, np.uint16)
    blocks = np.concatenate([w.blocks for w in present]) if present else np.zeros(0, np.uint16)
    ends = np.concatenate(relative) if relative else np.zeros((0, 2), np.uint8)
    header = json.dumps({"rows": counts}, separators=(",", ":")).encode()
    wide = [_delta(line_boxes[:, column]) for column in range(4)] + [_delta(token_lines), _delta(blocks)]
    narrow = [_delta(ends[:, 0], np.uint8), (ends[:, 1] - ends[:, 0]).astype(np.uint8)]
    return zlib.compress(struct.pack("<I", len(header)) + header + b"".join(p.astype("<u2").tobytes() for p in wide)
                         + b"".join(p.tobytes() for p in narrow), 9)


def decode_words(data: bytes) -> list[PageWords | None]:
    """The rows of a words blob, every one placed and checked; IndexProblem if it is damaged."""
    rows = WordRows(data)
    return [rows[row] for row in range(len(rows))]


class WordRows:
    """A words blob's rows, each placed (and checked) when asked for: the blob is read and its arrays decoded at
    once (IndexProblem if they are damaged), but a query that reads a few pages of a segment of thousands places
    those few (decode_words places every one)."""

    def __init__(self, data: bytes) -> None:
        try:
            raw = zlib.decompress(data)
            (length,) = struct.unpack_from("<I", raw)
            counts = json.loads(raw[4: 4 + length])["rows"]
            tokens = sum(t for t, _ in counts if t >= 0)
            lines = sum(n for _, n in counts if n >= 0)
            if len(raw) != 4 + length + 2 * (5 * lines + tokens) + 2 * tokens:
                raise ValueError(f"{len(raw) - 4 - length} bytes for {tokens} words and {lines} lines")
            wide = np.frombuffer(raw, dtype="<u2", offset=4 + length, count=5 * lines + tokens)
            narrow = np.frombuffer(raw, dtype=np.uint8, offset=4 + length + 2 * (5 * lines + tokens))
            self.line_boxes = np.stack([_undelta(wide[i * lines:(i + 1) * lines]) for i in range(4)], axis=1)
            self.token_lines = _undelta(wide[4 * lines: 4 * lines + tokens])
            self.blocks = _undelta(wide[4 * lines + tokens:])
            low = _undelta(narrow[:tokens], np.uint8)
            self.ends = np.stack([low, (low + narrow[tokens:]).astype(np.uint8)], axis=1)
            self.counts = [(int(t), int(n)) for t, n in counts]  # each row's tokens and lines (-1: a row without words)
        except (zlib.error, ValueError, KeyError, TypeError, struct.error) as exc:
            raise IndexProblem(f"a words part is damaged ({exc}).") from None
        sizes = np.array([[max(t, 0), max(n, 0)] for t, n in self.counts], np.int64).reshape(-1, 2)
        self.starts = (np.cumsum(sizes, axis=0) - sizes).tolist()  # where each row's tokens and lines begin

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, row: int) -> PageWords | None:
        count, line_count = self.counts[row]
        if count < 0:
            return None
        at, line_at = self.starts[row]
        page_lines, token_lines = self.line_boxes[line_at: line_at + line_count], self.token_lines[at: at + count]
        known = token_lines[token_lines != NO_LINE]
        if len(known) and int(known.max()) >= line_count:
            raise IndexProblem("a words part is damaged (a word names a line its page does not have).")
        return _placed(page_lines, token_lines, self.ends[at: at + count], self.blocks[line_at: line_at + line_count])


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


def read_words_part(ref: PartRef, source: BlobSource) -> WordRows:
    """A segment's words part, its rows placed as they are asked for."""
    return WordRows(source.read(ref.blobs[0]))


def rewritten_words_part(rows: Mapping[int, PageWords | None], ref: PartRef, source: BlobSource, sink: BlobSink) -> PartRef:
    """A segment's words part with `rows` (row -> words) read since: the others as they were."""
    current = decode_words(source.read(ref.blobs[0]))
    for row, words in rows.items():
        if not 0 <= row < len(current):
            raise ValueError(f"words part: row {row} of {len(current)}")
        current[row] = words
    return words_part(current, sink)


def page_words(parts: Mapping[str, PartRef], doc: Document, page: int, source: BlobSource,
               cache: dict[str, WordRows] | None = None) -> PageWords | None:
    """Page `page` (1-based) of `doc`'s word positions, from the words `parts` of its segments (None: its segment
    has no words part of this version, or the page has none). `cache`: parts already read, by segment id."""
    placed = _part_of(parts, doc, page)
    if placed is None:
        return None
    segment, row, part = placed
    cache = {} if cache is None else cache
    if segment not in cache:
        cache[segment] = read_words_part(part, source)
    rows = cache[segment]
    return rows[row] if row < len(rows) else None


def _part_of(parts: Mapping[str, PartRef], doc: Document, page: int) -> tuple[str, int, PartRef] | None:
    """Where a page's words are: its segment, its row there and the segment's words part (None: none of this version)."""
    try:
        segment, row = doc.locate(page)
    except ValueError:
        return None
    part = parts.get(segment)
    return (segment, row, part) if part is not None and part.version == WordsArtifact.version else None


def document_words(segments: Mapping[str, Segment], doc: Document, source: BlobSource) -> list[PageWords | None]:
    """Each page's word positions of `doc`, in page order (None where a page has none)."""
    parts = {sid: segment.parts[WORDS] for sid, segment in segments.items() if WORDS in segment.parts}
    cache: dict[str, WordRows] = {}
    return [page_words(parts, doc, page, source, cache) for page in range(1, doc.pages + 1)]


class WordPositions:
    """A generation's word positions as a reader has them (`View.artifact("words")`): each segment's part read
    (checked) and decoded at its first use, a page's words placed when it is asked for (WordRows), the last CACHED
    segments used kept; the last DERIVED pages handed
    out kept by their place, with what readers derive from them (`PageWords.derived`: their line pieces and the
    pieces' texts), so that a page asked again is the same object even after its segment was let go."""

    CACHED = 64
    DERIVED = 1024

    def __init__(self, parts: Mapping[str, PartRef], source: BlobSource) -> None:
        self.parts, self.source = dict(parts), source
        self._read: OrderedDict[str, WordRows] = OrderedDict()  # by segment id, least recently used first
        self._handed: OrderedDict[tuple[str, int], PageWords] = OrderedDict()  # by (segment id, row), likewise
        self._lock = threading.Lock()

    def page(self, doc: Document, page: int) -> PageWords | None:
        placed = _part_of(self.parts, doc, page)
        if placed is None:
            return None
        segment, row, part = placed
        with self._lock:
            words = self._handed.get((segment, row))
            if words is not None:
                self._handed.move_to_end((segment, row))
                return words
            rows = self._read.get(segment)
            if rows is not None:
                self._read.move_to_end(segment)
        if rows is None:  # read and decoded outside the lock: a thread asking for a page kept does not wait on it
            rows = read_words_part(part, self.source)
        with self._lock:
            if segment not in self._read:
                self._read[segment] = rows
                if len(self._read) > self.CACHED:
                    self._read.popitem(last=False)
            words = self._handed.get((segment, row))  # (another thread's, handed while this one read)
            if words is None and row < len(rows):
                words = rows[row]
            if words is not None:
                self._handed[(segment, row)] = words
                self._handed.move_to_end((segment, row))
                if len(self._handed) > self.DERIVED:
                    self._handed.popitem(last=False)[1].derived.clear()
            return words


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
            rows = decode_words(source.read(ref.blobs[0]))  # (every row placed: each checked)
        except IndexProblem as exc:
            return [exc.message]
        return [] if len(rows) == ref.meta.get("rows") else [f"{len(rows)} rows of word positions, its record says {ref.meta.get('rows')}"]

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> WordPositions:
        return WordPositions(parts, source)
