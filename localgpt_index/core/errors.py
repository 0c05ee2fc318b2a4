"""Exceptions that carry the exit code the CLI returns for them, and which write failures may pass."""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import Literal, TypeVar

TRANSIENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)  # a full disk or quota, an I/O error: they may pass


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # nothing changed
    USAGE = 2
    PARTIAL = 3  # committed, but some documents failed
    ENVIRONMENT = 4  # a missing piece: model, converter, device


class LgptError(Exception):
    """An error with a message meant for the user, not a traceback."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self):  # pickled across processes (Ray workers): keyword arguments survive
        return _rebuild_error, (type(self), self.message, self.hint)


class UsageError(LgptError):
    exit_code = ExitCode.USAGE


class EnvironmentMissing(LgptError):
    """The model, a converter or a device is not available here."""

    exit_code = ExitCode.ENVIRONMENT


class IndexProblem(LgptError):
    """The index is missing, damaged or incompatible."""


class IndexBusy(LgptError):
    """Another writer holds the index lock."""


class MissingIndexFile(IndexProblem):
    """A file the manifest names is gone (damage, or a writer collected it under a slow reader)."""


class IndexWriteError(IndexProblem):
    """Writing the index failed (full disk, permissions); the index keeps its last generation."""


class TransientWriteError(IndexWriteError):
    """Writing failed for a reason that can pass with the program unchanged (a full disk or quota, an
    I/O error): a watcher tries again later instead of stopping."""


E = TypeVar("E", bound=IndexProblem)


def write_failure(exc: OSError, otherwise: type[E]) -> type[E] | type[TransientWriteError]:
    """The error a failed write of `exc` is: TransientWriteError where it may pass, else `otherwise`."""
    return TransientWriteError if exc.errno in TRANSIENT_ERRNOS else otherwise


Stage = Literal["discover", "convert", "render", "encode", "commit"]  # where a document failed (a Failure's stage)


class DocumentError(Exception):
    """One document failed at one stage; the build goes on without it."""

    def __init__(self, stage: Stage, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason

    def __reduce__(self):
        return _rebuild_document_error, (type(self), self.stage, self.reason)


def _rebuild_error(cls, message: str, hint: str | None) -> LgptError:
    error = LgptError.__new__(cls)
    LgptError.__init__(error, message, hint=hint)
    return error


def _rebuild_document_error(cls, stage: Stage, reason: str) -> "DocumentError":
    error = DocumentError.__new__(cls)
    DocumentError.__init__(error, stage, reason)
    return error


def page_failure(stage: Stage, exc: BaseException) -> "DocumentError | None":
    """The DocumentError to pin on a page for `exc`, or None where `exc` is not one a page can cause:
    a model or processor refusing its input raises ValueError, RuntimeError or OSError (PIL); a
    TypeError, AttributeError, AssertionError ... is a bug of ours, and must not pass for a bad page."""
    from PIL import Image

    if isinstance(exc, DocumentError):
        return exc
    if isinstance(exc, (NotImplementedError, RecursionError)) or not isinstance(
            exc, (ValueError, RuntimeError, OSError, Image.DecompressionBombError)):
        return None
    return DocumentError(stage, " ".join(str(exc).split())[:300] or type(exc).__name__)
