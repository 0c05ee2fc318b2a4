"""Changes to an index that exists already, outside a build: `lgpt-index remove` and `lgpt-index upgrade`.

`remove` commits a new generation without some documents (and with `ignore`, adds their paths to the
`.lgptignore` of the indexed folder, so that no later build or watch brings them back).

`upgrade` writes what an index made by an older version lacks, as one new generation through the
transaction (the writers' lock, staged blobs, one HEAD switch: a kill at any point leaves the old
generation answering; never done by a reader). Today that is the binary codes of the first pass
(index/scoring/codes): every live segment without a part of the current version gets one, coded from
its stored vectors (read and checked block by block) exactly as a build would code them, and version 2
codes get their block hashes (version 3: read lazily; the codes themselves are kept). And a text index of
another analysis (local or Qdrant: its sparse vectors too, index/qdrant/sparse.py) is built again from the
stored page text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.errors import DocumentError, IndexProblem, LgptError, UsageError
from ..core.files import sha256_file
from ..core.words import PageWords
from ..core.failpoints import failpoint
from ..index.format.manifest import Document, Manifest, PartRef, Segment
from ..index.local.store import LocalStore
from ..index.protocols import Store
from ..index.scoring.codes.artifact import CODES, NAME, READABLE, VERSION, with_block_hashes
from ..index.text.artifact import LEXICAL, TEXT, current, needs_words, read_text_part
from ..index.text.words import WORDS, words_part
from ..index.transaction import Transaction
from ..ingest.ignore import IGNORE_FILE, add_ignored, ignore_line
from ..ingest.text import pdf_page_texts


@contextmanager
def changing_existing(store: Store, wait_s: float = 0.0) -> Iterator[tuple[Transaction, Manifest]]:
    """The writer's transaction and the generation it starts from; IndexProblem where there is no index
    (checked before the lock is taken, and again under it: another writer may have just removed it)."""
    if not store.exists():
        raise IndexProblem(f"no index at {store.location}.")
    with store.begin(wait_s) as txn:
        if txn.base is None:
            raise IndexProblem(f"no index at {store.location}.")
        yield txn, txn.base


@dataclass
class RemoveReport:
    index: str
    generation: int | None = None
    removed: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    pages_removed: int = 0
    ignored: dict[str, list[str]] = field(default_factory=dict)  # with ignore: each .lgptignore written, the patterns added
    ignored_above: list[str] = field(default_factory=list)  # those of them above the indexed folder (its builds read none)


def remove_documents(store: Store, paths: list[str | os.PathLike], wait_s: float = 0.0, ignore: bool = False) -> RemoveReport:
    """Drop the documents at `paths` (a folder drops everything under it); `ignore`: and add each path that
    held some to the `.lgptignore` of the indexed folder (the folder of every document of the index)."""
    report = RemoveReport(index=store.location)
    with changing_existing(store, wait_s) as (txn, manifest):
        drop: set[str] = set()
        targets: list[str] = []
        for raw in paths:
            target = os.path.abspath(raw)
            prefix = target.rstrip(os.sep) + os.sep
            hits = [d.path for d in [*manifest.documents, *manifest.in_progress] if d.path == target or d.path.startswith(prefix)]
            if hits:
                drop.update(hits)
                targets.append(target)
            else:
                report.not_found.append(os.fspath(raw))
        if not drop:
            return report
        report.removed = sorted(drop)
        report.pages_removed = sum(d.pages for d in manifest.documents if d.path in drop)
        tree = os.path.commonpath([os.path.dirname(d.path) for d in [*manifest.documents, *manifest.in_progress]])
        ignoring = _ignore_plan(tree, targets, drop) if ignore else []
        new = txn.commit(
            [d for d in manifest.documents if d.path not in drop],
            manifest.model,
            manifest.settings,
            [f for f in manifest.failures if f.path not in drop],
            [d for d in manifest.in_progress if d.path not in drop],
        )
        report.generation = new.generation
    for root, rel, is_dir in ignoring:
        written = add_ignored(root, rel, is_dir)
        report.ignored.setdefault(written, []).append(rel + ("/" if is_dir else ""))
        if root != tree and written not in report.ignored_above:
            report.ignored_above.append(written)
    return report


def _ignore_plan(tree: str, targets: list[str], removed: set[str]) -> list[tuple[str, str, bool]]:
    """Where each of `targets` is added (the ignore file's folder, the path relative to it, whether a folder): the
    ignore file of `tree`, the indexed folder; a target that is the tree or a folder above it, in its parent's. Worked
    out before anything is removed: a path no ignore file can hold (a line break, the file system's root), or an
    ignore file that cannot be written, changes nothing."""
    plan = []
    for target in targets:
        is_dir = target not in removed
        root = tree
        if target == tree or tree.startswith(target.rstrip(os.sep) + os.sep):
            root = os.path.dirname(target.rstrip(os.sep))
            if root == target.rstrip(os.sep) or not root:
                raise UsageError(f"--ignore {target}: the file system's root has no folder above it to hold an ignore file. "
                                 "Nothing was removed.", hint="Remove without --ignore, or name the folders to keep out.")
        rel = os.path.relpath(target, root).replace(os.sep, "/")
        try:
            ignore_line(rel, is_dir)
        except UsageError as exc:
            raise UsageError(f"{exc.message} Nothing was removed.", hint="Remove it without --ignore, or --ignore the folder "
                                                                          "that holds it.") from None
        file = os.path.join(root, IGNORE_FILE)
        if not os.access(file if os.path.exists(file) else root, os.W_OK):
            raise LgptError(f"--ignore {target}: {file} cannot be written here. Nothing was removed.",
                            hint="Remove without --ignore, or add the pattern to an ignore file you can write.")
        plan.append((root, rel, is_dir))
    return plan


@dataclass
class UpgradeReport:
    index: str
    generation: int  # the generation the index has now (the new one when something was written)
    upgraded: bool = False
    segments: int = 0  # live segments
    segments_coded: int = 0  # given codes by this run
    pages_coded: int = 0
    segments_hashed: int = 0  # version 2 codes given their block hashes (not coded again)
    text_reindexed: bool = False  # the text index built again from the stored page text (another analysis's)
    segments_positioned: int = 0  # given a words part by this run (word positions, read again from the text layers)
    pages_positioned: int = 0  # pages of them with positions (text-layer pages; OCR pages wait for a --rebuild)
    note: str = ""


# told of each segment done: (its number from 1, how many, the segment, what was done, seconds it took)
Progress = Callable[[int, int, Segment, str, float], None]


def needs_codes(segment: Segment) -> bool:
    part = segment.parts.get(NAME)
    return segment.storage == "file" and (part is None or part.version != VERSION)


def upgrade_index(store: Store, wait_s: float = 0.0, progress: Progress | None = None) -> UpgradeReport:
    """Codes for every live segment of a local index lacking current ones, and the text index of the current
    analysis, committed as one new generation; `progress` is told of each segment as it is done."""
    with changing_existing(store, wait_s) as (txn, manifest):
        report = UpgradeReport(store.location, manifest.generation, segments=len(manifest.segments))
        text = LEXICAL in manifest.artifacts and not current(manifest.artifacts[LEXICAL])  # the commit builds it again
        local = store if isinstance(store, LocalStore) and all(seg.storage == "file" for seg in manifest.segments.values()) else None
        stale = [seg for seg in manifest.segments.values() if needs_codes(seg)] if local is not None else []
        wordless = [seg for seg in manifest.segments.values() if needs_words(seg)] if local is not None else []
        if not stale and not text and not wordless:
            report.note = ("every segment has binary codes of the current version and word positions, and the text index the "
                           "current analysis" if local is not None else
                           "its text index has the current analysis; binary codes and word positions are written into local "
                           "indexes only (a Qdrant store ranks the pages itself)")
            return report
        if local is not None:
            _code_segments(local, txn, stale, report, progress)
        _position_segments(txn, manifest, wordless, report, progress)
        new = txn.commit(manifest.documents, manifest.model, manifest.settings, manifest.failures, manifest.in_progress)
        report.generation, report.upgraded, report.text_reindexed = new.generation, True, text
    return report


def _code_segments(store: LocalStore, txn: Transaction, stale: list[Segment], report: UpgradeReport, progress: Progress | None) -> None:
    """Codes for each of the `stale` segments, staged in `txn` (block hashes added where its codes are of a version still read)."""
    for number, segment in enumerate(stale, 1):
        started = time.monotonic()
        old = segment.parts.get(NAME)
        if old is not None and old.version in READABLE:  # the same codes: their block hashes added
            with txn.writing():
                part = with_block_hashes(old, store.blob_source(), txn.blobs)
            done = "block hashes added to its codes"
            report.segments_hashed += 1
        else:
            part = _coded(store, txn, segment)
            done = "coded"
            report.segments_coded += 1
            report.pages_coded += segment.pages
        txn.stage(segment.model_copy(update={"parts": {**segment.parts, NAME: part}}))
        if progress is not None:
            progress(number, len(stale), segment, done, time.monotonic() - started)
        failpoint("upgrade-segment")


def _position_segments(txn: Transaction, manifest: Manifest, wordless: list[Segment], report: UpgradeReport,
                       progress: Progress | None) -> None:
    """A words part for each of the `wordless` segments, read again from their documents' text layers, staged in `txn`."""
    for number, segment in enumerate(wordless, 1):
        started = time.monotonic()
        part, placed = _positioned(txn, manifest, segment)
        txn.stage(segment.model_copy(update={"parts": {**segment.parts, WORDS: part}}))
        report.segments_positioned += 1
        report.pages_positioned += placed
        if progress is not None:
            progress(number, len(wordless), segment, f"word positions of {placed} pages read", time.monotonic() - started)


def _positioned(txn: Transaction, manifest: Manifest, segment: Segment) -> tuple[PartRef, int]:
    """A segment's words part, from its documents' text layers read again (one pdftotext a document): a page
    whose text layer reads as the text stored gets its words' boxes; OCR text is not read again (another OCR
    run might read other words), so OCR pages get theirs with `build --rebuild`. (The part, pages with positions.)"""
    source = txn.backend.base_blobs()
    texts = read_text_part(segment.parts[TEXT], source)
    rows: list[PageWords | None] = [None] * len(texts)
    for doc in [*manifest.documents, *manifest.in_progress]:
        page = 0
        for span in doc.spans:
            wanted = [(page + offset + 1, span.first + offset) for offset in range(span.pages)
                      if span.segment == segment.id and span.first + offset < len(texts) and texts[span.first + offset][1] == "layer"]
            page += span.pages
            layers = _layers(txn, doc, wanted[0][0], wanted[-1][0]) if wanted else None
            for number, row in wanted:
                text, words = layers[number - wanted[0][0]] if layers else ("", None)
                rows[row] = words if text == texts[row][0] else None
    with txn.writing():
        return words_part(rows, txn.blobs), sum(1 for words in rows if words is not None)


def _layers(txn: Transaction, doc: Document, first: int, last: int) -> list[tuple[str, PageWords | None]] | None:
    """The text layer of a document's pages first..last, from its stored PDF or its unchanged file (None: neither)."""
    try:
        if doc.pdf is not None:
            pdf = txn.pdf_path(doc.pdf)
        elif doc.kind == "pdf" and sha256_file(doc.path) == doc.sha256:
            pdf = Path(doc.path)
        else:
            return None
        return pdf_page_texts(pdf, first, last)
    except (OSError, DocumentError, IndexProblem):
        return None


def _coded(store: LocalStore, txn: Transaction, segment: Segment) -> PartRef:
    """A segment's codes part, coded from its stored vectors (every block checked before it is coded)."""
    vectors, offsets = store.segment_arrays(segment)
    writer = CODES.part_writer(segment.dim)
    for page in range(segment.pages):
        writer.add(page, vectors[offsets[page] : offsets[page + 1]], None, {})
    with txn.writing():
        return writer.seal(txn.blobs)
