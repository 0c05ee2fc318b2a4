"""How a family's network and processor are loaded: `Loader`, which a `Family` carries.

The two built-in loaders, and transformers kept quiet while a model loads or runs:

- byaldi (ColPali, ColQwen2): through RAGMultiModalModel.from_pretrained, as byaldi users expect;
- colpali-engine (ColQwen2.5, ColQwen3, ColQwen3.5, ColSmol, ColModernVBert, ColGemma3): through
  colpali-engine's own model and processor classes, as the family names them.
Nothing here imports torch, byaldi or transformers before a model is loaded.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..core.collector import process_owned
from ..core.errors import EnvironmentMissing

if TYPE_CHECKING:
    from .device import Precision


@dataclass(frozen=True)
class LoadRequest:
    """What a loader is given (by models/loading.py: a loader imports nothing of the model layer
    above it, as the families that carry it are what resolving a model reads)."""

    path: str  # the checkpoint folder
    family: str  # its family's name
    architecture: str  # the family's colpali-engine model class
    processor: str  # and processor class
    precision: Precision  # the device and dtype the probe picked
    rag: Any  # byaldi's RAGMultiModalModel already loaded from the folder, or None
    # a load failure told in the checkpoint's terms, exit 4 (loading.load_guard); given the path
    # the loader shows the folder under, where that is not `path`
    guard: Callable[[str | None], AbstractContextManager[None]]


@dataclass(frozen=True)
class Loader:
    """A family's loader: its name (as `doctor` reports it and the schemas list it) and what loads the
    network (on the request's device and dtype) and processor that a TorchEncoder runs; None for a
    plugin family with its own encoder."""

    name: str
    load: Callable[[LoadRequest], tuple[Any, Any]] | None = None


def load_byaldi(request: LoadRequest) -> tuple[Any, Any]:
    """The network and its processor, loaded through byaldi (or taken from `request.rag`)."""
    try:
        RAGMultiModalModel = byaldi_model_class()
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EnvironmentMissing(f"byaldi cannot be imported: {exc}") from exc
    rag = request.rag
    if rag is None:
        device = "cuda" if request.precision.device == "cuda:0" else request.precision.device
        with byaldi_visible_path(request.path, request.family) as path, request.guard(path), quiet_transformers():
            rag = RAGMultiModalModel.from_pretrained(path, device=device, verbose=0)
    return rag.model.model, rag.model.processor


def byaldi_model_class() -> Any:
    """byaldi's RAGMultiModalModel, imported without its optional LangChain retriever: byaldi imports that
    wherever langchain-core is installed (all of LangChain's core: 0.3-0.4 s of CPU, 6% of a cold query's
    start on the bench checkpoint), and nothing here uses it. Already imported, or imported later, it is
    left as it is: only this import finds it missing (a None in sys.modules, which byaldi's ImportError catches)."""
    hidden = "byaldi.integrations" not in sys.modules
    if hidden:
        sys.modules["byaldi.integrations"] = None  # type: ignore[assignment]  # None: the import system says ImportError
    try:
        from byaldi import RAGMultiModalModel
    finally:
        if hidden and "byaldi.integrations" in sys.modules and sys.modules["byaldi.integrations"] is None:
            del sys.modules["byaldi.integrations"]
    return RAGMultiModalModel


@contextmanager
def byaldi_visible_path(path: str, family: str) -> Iterator[str]:
    """byaldi only loads paths whose name contains "colpali" or "colqwen2" (a family's name): link
    others under such a name."""
    if family in path.lower():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="lgpt-model-") as tmp:
        link = Path(tmp) / family
        os.symlink(path, link)
        yield str(link)


def load_colpali_engine(request: LoadRequest) -> tuple[Any, Any]:
    """The network and its processor, through the family's colpali-engine classes."""
    import torch

    try:
        import colpali_engine.models as engine
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EnvironmentMissing(f"colpali-engine cannot be imported: {exc}") from exc
    with request.guard(None), quiet_transformers():  # a checkpoint that does not fit the class
        net = getattr(engine, request.architecture).from_pretrained(request.path, dtype=request.precision.torch_dtype())
        processor = getattr(engine, request.processor).from_pretrained(request.path)
        return net.to(torch.device(request.precision.device)), processor


BYALDI = Loader("byaldi", load_byaldi)
COLPALI_ENGINE = Loader("colpali-engine", load_colpali_engine)

# transformers' own logging and progress bars, quietened while a model loads or runs and put back
# as they were afterwards: a library that imports lgpt-index keeps its logging settings. In the
# command's own process (core.collector.own_process) they are quietened once and left so: setting
# transformers' verbosity walks every logger (about 0.5 ms with a model loaded), twice a query.
_lock = threading.Lock()
_depth = 0
_saved: tuple[int, bool] | None = None


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' verbosity at "error" and its progress bars off inside the block; the settings
    found at the outermost entry are restored at the last exit (a count, so that the render thread's
    and the model thread's blocks may overlap)."""
    from transformers.utils import logging as hf_logging

    global _depth, _saved
    with _lock:
        if _depth == 0:
            quiet = hf_logging.get_verbosity() >= hf_logging.ERROR and not hf_logging.is_progress_bar_enabled()
            _saved = None if quiet or process_owned() else (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
            if not quiet:
                hf_logging.set_verbosity_error()
                hf_logging.disable_progress_bar()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                verbosity, bars = _saved
                hf_logging.set_verbosity(verbosity)
                if bars:
                    hf_logging.enable_progress_bar()
                _saved = None
