"""The families byaldi loads (ColPali, ColQwen2), as byaldi users expect.

They load through RAGMultiModalModel.from_pretrained."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..core.errors import EnvironmentMissing
from .load_errors import loading
from .quiet import quiet_transformers

if TYPE_CHECKING:
    from .device import Precision
    from .resolve import ModelRef


def load_byaldi(model: ModelRef, precision: Precision, rag: Any = None) -> tuple[Any, Any]:
    """The network and its processor, loaded through byaldi (or taken from `rag`, a
    RAGMultiModalModel already loaded from `model`)."""
    try:
        from byaldi import RAGMultiModalModel
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EnvironmentMissing(f"byaldi cannot be imported: {exc}") from exc
    if rag is None:
        device = "cuda" if precision.device == "cuda:0" else precision.device
        with byaldi_visible_path(model) as path, loading(model, "byaldi", shown_as=path), quiet_transformers():
            rag = RAGMultiModalModel.from_pretrained(path, device=device, verbose=0)
    return rag.model.model, rag.model.processor


@contextmanager
def byaldi_visible_path(model: ModelRef) -> Iterator[str]:
    """byaldi only loads paths whose name contains "colpali" or "colqwen2"; link others under such a name."""
    if model.family in model.path.lower():
        yield model.path
        return
    with tempfile.TemporaryDirectory(prefix="lgpt-model-") as tmp:
        link = Path(tmp) / model.family
        os.symlink(model.path, link)
        yield str(link)
