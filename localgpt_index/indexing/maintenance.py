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
from typing import Callable

from ..core.errors import IndexProblem
from ..core.failpoints import failpoint
from ..index.format.manifest import Manifest, PartRef, Segment
from ..index.local.store import LocalStore
from ..index.protocols import Store
from ..index.scoring.codes.artifact import CODES, NAME, READABLE, VERSION, with_block_hashes
from ..index.text.artifact import LEXICAL, current
from ..index.transaction import Transaction
from ..ingest.ignore import add_ignored


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
    ignore_file: str | None = None  # with ignore: the .lgptignore the paths were added to
    ignored: list[str] = field(default_factory=list)  # with ignore: the patterns added


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
        new = txn.commit(
            [d for d in manifest.documents if d.path not in drop],
            manifest.model,
            manifest.settings,
            [f for f in manifest.failures if f.path not in drop],
            [d for d in manifest.in_progress if d.path not in drop],
        )
        report.generation = new.generation
    if ignore:
        folders = [os.path.dirname(d.path) for d in [*manifest.documents, *manifest.in_progress]]
        _ignore_paths(report, os.path.commonpath(folders), targets)
    return report


def _ignore_paths(report: RemoveReport, tree: str, targets: list[str]) -> None:
    """Add `targets` to the ignore file of `tree` (of its parent for a target that is the tree itself)."""
    for target in targets:
        root = os.path.dirname(target) if target == tree else tree
        is_dir = not any(path == target for path in report.removed)
        rel = os.path.relpath(target, root).replace(os.sep, "/")
        report.ignore_file = add_ignored(root, rel, is_dir)
        report.ignored.append(rel + ("/" if is_dir else ""))


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
        if not stale and not text:
            report.note = ("every segment has binary codes of the current version, and the text index the current analysis"
                           if local is not None else "its text index has the current analysis; binary codes are written into "
                                                     "local indexes only (a Qdrant store ranks the pages itself)")
            return report
        if local is not None:
            _code_segments(local, txn, stale, report, progress)
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


def _coded(store: LocalStore, txn: Transaction, segment: Segment) -> PartRef:
    """A segment's codes part, coded from its stored vectors (every block checked before it is coded)."""
    vectors, offsets = store.segment_arrays(segment)
    writer = CODES.part_writer(segment.dim)
    for page in range(segment.pages):
        writer.add(page, vectors[offsets[page] : offsets[page + 1]], None, {})
    with txn.writing():
        return writer.seal(txn.blobs)
