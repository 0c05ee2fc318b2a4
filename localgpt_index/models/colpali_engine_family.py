"""The families byaldi cannot load, through colpali-engine's own model and processor classes.

ColQwen2.5, ColQwen3, ColQwen3.5, ColSmol, ColModernVBert, ColGemma3: the classes as the registry
names them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import EnvironmentMissing
from .load_errors import loading
from .quiet import quiet_transformers

if TYPE_CHECKING:
    from .device import Precision
    from .resolve import ModelRef


def load_colpali_engine(model: ModelRef, precision: Precision, rag: Any = None) -> tuple[Any, Any]:
    """The network (on the precision's device and dtype) and its processor, through the family's
    colpali-engine classes (`rag`: byaldi's, not used here)."""
    import torch

    from .families import family_named

    family = family_named(model.family)
    try:
        import colpali_engine.models as engine
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EnvironmentMissing(f"colpali-engine cannot be imported: {exc}") from exc
    with loading(model, "colpali-engine"), quiet_transformers():  # a checkpoint that does not fit the class
        net = getattr(engine, family.architecture).from_pretrained(model.path, dtype=precision.torch_dtype())
        processor = getattr(engine, family.processor).from_pretrained(model.path)
        return net.to(torch.device(precision.device)), processor
