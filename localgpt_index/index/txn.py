"""What both backends' transactions share: the manifest a commit assembles, and the one message a
failed write gives (what the index keeps, and what to do about a full disk)."""

from __future__ import annotations

import errno
import time
from collections.abc import Sequence

from .errors import IndexWriteError
from .manifest import Document, Failure, Manifest, ModelInfo, Segment, Settings


def _by_path(doc: Document) -> bytes:
    return doc.path.encode("utf-8", "surrogateescape")


def live_segments(documents: Sequence[Document], in_progress: Sequence[Document]) -> set[str]:
    """The segments a generation of these documents names."""
    return {span.segment for doc in [*documents, *in_progress] for span in doc.spans}


def assemble_manifest(generation: int, model: ModelInfo, settings: Settings, segments: dict[str, Segment],
                      documents: Sequence[Document], in_progress: Sequence[Document],
                      failures: Sequence[Failure]) -> Manifest:
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
    )
    manifest._references_resolve()
    return manifest


def kept(generation: int) -> str:
    """What an index whose HEAD names `generation` keeps, for people."""
    return f"generation {generation}" if generation else "no generation (it is still empty)"


def write_error(location: str, exc: OSError, generation: int) -> IndexWriteError:
    """An OSError while writing, said once: where, why, what the index keeps, and what to do."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "Free some space and run the command again: a build carries on from the last commit."
    else:
        hint = "Fix the cause (permissions, the disk) and run the command again."
    return IndexWriteError(f"could not write to {location}: {reason}; the index keeps {kept(generation)}.", hint=hint)
