"""The build planner: files found + the current manifest + options -> what to embed, reuse, keep, remove.

Pure functions, no I/O: every rule about what a build does to the catalog lives here
and is tested in milliseconds. The rules:

- A file whose stat (size, mtime_ns, inode, ctime) matches the index's record is
  unchanged without reading it; any other file is hashed (`files_to_hash`), and is
  embedded only when its bytes differ from what the index holds.
- Same bytes under another path reuse the vectors already stored; identical new files
  in one build are embedded once.
- A document leaves the index only when discovery positively listed its folder, would
  have looked at it (--include/--exclude let it through), and did not find it. Documents
  in folders that could not be listed, of files that could not be read, or of other
  folders stay, and are counted.
- A document whose file changed keeps its old entry until the new one is committed.
- A long document whose first pages were committed carries on from there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..ingest.discover import Discovery, FoundFile, selected
from ..index.format.manifest import Document, FileStat, Manifest
from ..core.files import RACY_NS
from ..core.metadata import Rules, metadata_for



@dataclass(frozen=True)
class Embed:
    """A document to convert, render and embed."""

    file: FoundFile
    sha256: str
    metadata: dict[str, str]
    resume: Document | None = None  # its first pages are already committed (in progress)
    # same bytes elsewhere in this build: (file, its metadata, the entry of its previous content)
    twins: tuple[tuple[FoundFile, dict[str, str], Document | None], ...] = ()
    replaces: Document | None = None  # the entry of this path's previous content, kept until this commits


@dataclass
class BuildPlan:
    keep: list[Document] = field(default_factory=list)  # stay (possibly with a fresh stat or new metadata)
    reused: list[Document] = field(default_factory=list)  # new paths with the vectors of stored twins
    embed: list[Embed] = field(default_factory=list)
    removed: list[Document] = field(default_factory=list)
    unchanged: int = 0
    kept_elsewhere: int = 0  # documents of other folders
    kept_unlisted: int = 0  # in folders that could not be listed, or files that could not be read
    kept_filtered: int = 0  # outside --include/--exclude
    retagged: int = 0
    restatted: int = 0  # touched but unchanged: only the stat record changes

    @property
    def changes_catalog(self) -> bool:
        return bool(self.embed or self.reused or self.removed or self.retagged or self.restatted)

    @property
    def documents(self) -> list[Document]:
        """What the index holds before anything new is embedded."""
        return self.keep + self.reused


def trusted_stat(stat: FileStat, scan_started_ns: int | None) -> FileStat | None:
    """The stat to record, or None when the file was modified so recently before the scan that a
    change within the same timestamp tick could go unseen (git's "racily clean" entries): such a
    file is hashed again next time."""
    if scan_started_ns is not None and stat.mtime_ns >= scan_started_ns - RACY_NS:
        return None
    return stat


def files_to_hash(found: Discovery, base: Manifest | None, rehash: bool = False) -> list[FoundFile]:
    """The files whose content must be read: all with `rehash`, else those whose stat differs from the record."""
    if rehash or base is None:
        return list(found.files)
    recorded = {d.path: d.stat for d in base.documents}
    return [f for f in found.files if recorded.get(f.path) is None or recorded[f.path] != f.stat]


def plan_build(
    found: Discovery,
    hashes: dict[str, str],
    base: Manifest | None,
    rules: Rules | None = None,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    rebuild: bool = False,
    scan_started_ns: int | None = None,
) -> BuildPlan:
    """Decide what a build of `found` does to `base`. `hashes` holds the sha256 of every file
    that `files_to_hash` asked for and could be read; `found.unreadable` lists the others."""
    plan = BuildPlan()
    root = found.root.rstrip(os.sep) + os.sep
    old_docs = base.documents if base else []
    by_path = {d.path: d for d in old_docs}
    partial = {d.path: d for d in (base.in_progress if base and not rebuild else [])}
    reusable: dict[str, Document] = {} if rebuild else {d.sha256: d for d in reversed(old_docs)}
    found_paths = {f.path for f in found.files}
    unreadable = {path for path, _ in found.unreadable}

    for doc in old_docs:
        if not doc.path.startswith(root):
            plan.keep.append(doc)
            plan.kept_elsewhere += 1
        elif doc.path not in found_paths:
            _keep_or_remove(plan, doc, found, unreadable, include, exclude)

    new_by_sha: dict[str, int] = {}  # sha256 -> position in plan.embed, for twins within this build
    for file in found.files:
        if file.path in unreadable:
            if file.path in by_path:
                plan.keep.append(by_path[file.path])
                plan.kept_unlisted += 1
            continue
        old = by_path.get(file.path)
        sha = hashes.get(file.path) or (old.sha256 if old is not None and old.stat == file.stat else None)
        if sha is None:
            raise ValueError(f"{file.path}: neither hashed nor unchanged by stat")
        metadata = _metadata(file, found.root, rules, old)
        stat = trusted_stat(file.stat, scan_started_ns)
        if old is not None and old.sha256 == sha and not rebuild:
            plan.unchanged += 1
            plan.keep.append(_refreshed(plan, old, stat, metadata))
        elif sha in reusable:
            plan.reused.append(_twin_of(reusable[sha], file, sha, stat, metadata))
        elif sha in new_by_sha:
            at = new_by_sha[sha]
            plan.embed[at] = _with_twin(plan.embed[at], file, metadata, old)
        else:
            new_by_sha[sha] = len(plan.embed)
            resume = partial.get(file.path)
            plan.embed.append(Embed(file, sha, metadata, resume if resume and resume.sha256 == sha else None,
                                    replaces=old))
    return plan


def _keep_or_remove(plan: BuildPlan, doc: Document, found: Discovery, unreadable: set[str],
                    include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """A document of this folder whose file was not found: removed only if discovery looked where it was."""
    folder = os.path.dirname(doc.path)
    rel = os.path.relpath(doc.path, found.root).replace(os.sep, "/")
    if any(doc.path.startswith(d.rstrip(os.sep) + os.sep) for d in found.excluded):
        plan.removed.append(doc)  # inside the index folder: never a document
    elif doc.path in unreadable or (folder not in found.listed and not _folder_gone(folder, found, unreadable)):
        plan.keep.append(doc)
        plan.kept_unlisted += 1
    elif not selected(rel, include, exclude):
        plan.keep.append(doc)
        plan.kept_filtered += 1
    else:
        plan.removed.append(doc)


def _folder_gone(folder: str, found: Discovery, unreadable: set[str]) -> bool:
    """Whether a folder discovery did not list is gone: the nearest folder above it that was listed held
    no folder of that name (deleted, renamed, or a file now has its name), not one it could not list."""
    child = folder
    while child != found.root and os.path.dirname(child) != child:
        parent = os.path.dirname(child)
        if parent in found.listed:
            return child not in found.folders and child not in unreadable
        child = parent
    return False


def _metadata(file: FoundFile, root: str, rules: Rules | None, old: Document | None) -> dict[str, str]:
    if rules is None:
        return dict(old.metadata) if old is not None else {}
    return metadata_for(file.path, root, rules)


def _refreshed(plan: BuildPlan, old: Document, stat: FileStat | None, metadata: dict[str, str]) -> Document:
    """An unchanged document, with the stat and metadata of this build."""
    update: dict = {}
    if metadata != old.metadata:
        plan.retagged += 1
        update["metadata"] = metadata
    if stat != old.stat:
        plan.restatted += 1
        update["stat"] = stat
    return old.model_copy(update=update) if update else old


def _twin_of(stored: Document, file: FoundFile, sha: str, stat: FileStat | None, metadata: dict[str, str]) -> Document:
    return stored.model_copy(update={"path": file.path, "sha256": sha, "size": file.size, "stat": stat, "metadata": metadata})


def _with_twin(embed: Embed, file: FoundFile, metadata: dict[str, str], old: Document | None) -> Embed:
    return Embed(embed.file, embed.sha256, embed.metadata, embed.resume, embed.twins + ((file, metadata, old),), embed.replaces)
