"""The index's own problems (subclasses of core.errors.IndexProblem), shared by both backends."""

from __future__ import annotations

import errno
from typing import TypeVar

from ..core.errors import IndexProblem

TRANSIENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)  # a full disk or quota, an I/O error: they may pass


class MissingIndexFile(IndexProblem):
    """A file the manifest names is gone (damage, or a writer collected it under a slow reader)."""


class IndexWriteError(IndexProblem):
    """Writing the index failed (full disk, permissions); the index keeps its last generation."""


E = TypeVar("E", bound=IndexProblem)


class TransientWriteError(IndexWriteError):
    """Writing failed for a reason that can pass with the program unchanged (a full disk or quota, an
    I/O error): a watcher tries again later instead of stopping."""


def write_failure(exc: OSError, otherwise: type[E]) -> type[E] | type[TransientWriteError]:
    """The error a failed write of `exc` is: TransientWriteError where it may pass, else `otherwise`."""
    return TransientWriteError if exc.errno in TRANSIENT_ERRNOS else otherwise
