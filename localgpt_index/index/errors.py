"""The index's own problems (subclasses of core.errors.IndexProblem), shared by both backends."""

from __future__ import annotations

from ..core.errors import IndexProblem


class MissingIndexFile(IndexProblem):
    """A file the manifest names is gone (damage, or a writer collected it under a slow reader)."""


class IndexWriteError(IndexProblem):
    """Writing the index failed (full disk, permissions); the index keeps its last generation."""
