"""What both backends' transactions share: begin()'s template (a damaged base stops unless rebuilding;
staged work discarded at the end), the manifest a commit assembles, and the one message a failed
write gives (what the index keeps, and what to do about a full disk)."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, TypeVar

from ...core.errors import IndexProblem
from ..errors import IndexWriteError, write_failure
from ..format.manifest import (
    REBUILD_HINT,
    ArtifactRef,
    Document,
    Failure,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
)

T = TypeVar("T")


class _Staging(Protocol):
    def discard_staged(self) -> None: ...


S = TypeVar("S", bound=_Staging)


def _by_path(doc: Document) -> bytes:
    return doc.path.encode("utf-8", "surrogateescape")


def live_segments(documents: Sequence[Document], in_progress: Sequence[Document]) -> set[str]:
    """The segments a generation of these documents names."""
    return {span.segment for doc in [*documents, *in_progress] for span in doc.spans}


def assemble_manifest(generation: int, model: ModelInfo, settings: Settings, segments: dict[str, Segment],
                      documents: Sequence[Document], in_progress: Sequence[Document],
                      failures: Sequence[Failure], artifacts: dict[str, ArtifactRef] | None = None) -> Manifest:
    """The manifest of a new generation: documents ordered by their path's bytes, references checked."""
    manifest = Manifest.model_construct(
        generation=generation,
        created=time.time(),
        model=model,
        settings=settings,
        segments=segments,
        documents=sorted(documents, key=_by_path),
        in_progress=sorted(in_progress, key=_by_path),
        failures=list(failures),
        artifacts=dict(artifacts or {}),
    )
    manifest.check_references()
    return manifest


def kept(generation: int) -> str:
    """What an index whose HEAD names `generation` keeps, for people."""
    return f"generation {generation}" if generation else "no generation (it is still empty)"


def write_error(location: str, exc: OSError, generation: int) -> IndexWriteError:
    """An OSError while writing, said once: where, why, what the index keeps, and what to do. A full
    disk or quota and an I/O error are transient (TransientWriteError): a watcher tries again."""
    reason = exc.strerror or str(exc)
    kind = write_failure(exc, IndexWriteError)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "Free some space and run the command again: a build carries on from the last commit."
    else:
        hint = "Fix the cause (permissions, the disk) and run the command again."
    return kind(f"could not write to {location}: {reason}; the index keeps {kept(generation)}.", hint=hint)


def not_durable(location: str, exc: OSError, generation: int) -> IndexWriteError:
    """HEAD was renamed into place (readers see `generation`), but the fsync of its folder failed."""
    reason = exc.strerror or str(exc)
    return write_failure(exc, IndexWriteError)(
        f"could not make generation {generation} of {location} durable: {reason}; it answers queries now, but a power "
        "loss may take the index back to the generation before it.",
        hint="Fix the disk, then run the command again (`lgpt-index verify` checks the index).")


def base_or_rebuild(read: Callable[[], T], rebuild: bool) -> T | None:
    """begin()'s first step in both backends: the generation a writer starts from. A damaged index
    stops here, nothing changed, pointing to --rebuild; with `rebuild` it is None (start afresh)."""
    try:
        return read()
    except IndexProblem as exc:
        if not rebuild:
            raise IndexProblem(f"{exc.message} Nothing was changed.", hint=REBUILD_HINT) from None
        return None


@contextmanager
def discarding(transaction: S) -> Iterator[S]:
    """begin()'s last step in both backends: whatever happens, what was staged and not committed goes."""
    try:
        yield transaction
    finally:
        transaction.discard_staged()
