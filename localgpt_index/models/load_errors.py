"""A model folder that cannot be loaded, told in the checkpoint's terms (exit 4).

One message names the folder and the reason (no weights, pickled code, a width mismatch, another
family's files)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..core.errors import EnvironmentMissing, LgptError
from .resolve import ModelRef, offline_hint, weight_files


def check_weights(model: ModelRef) -> None:
    """A checkpoint folder without weights is refused before anything is imported or loaded."""
    folder = Path(model.path)
    if any(path.is_file() for path in weight_files(folder)):
        return
    try:
        present = sorted(path.name for path in folder.iterdir())
    except OSError:
        present = []
    shown = ", ".join(present[:8]) + (f" and {len(present) - 8} more" if len(present) > 8 else "")
    raise EnvironmentMissing(f"model {folder}: no weights: no *.safetensors or *.bin file there (it holds {shown or 'nothing'}).",
                             hint=load_hint(model))


def load_hint(model: ModelRef) -> str:
    """What to do about a checkpoint that cannot be loaded."""
    if model.revision:  # a hub snapshot: fetch it again
        return "Its copy in the Hugging Face cache looks damaged. " + offline_hint(model.id, model.revision)
    return ("Point --model at a complete checkpoint, as save_pretrained writes one: config.json (whose architectures "
            "name the family), the processor's files and the weights (safetensors), all of the same model.")


@contextmanager
def loading(model: ModelRef, loader: str, shown_as: str | None = None) -> Iterator[None]:
    """A checkpoint that cannot be loaded (pickled code, weights whose shapes do not match its
    config, another family's files) stops the command with one message naming the folder and the
    reason, exit 4. The loaders are third-party code reading files from anywhere: whatever
    they raise is turned into that message (the exception stays chained for a debugger)."""
    from .families import family_named

    try:
        yield
    except LgptError:
        raise
    except Exception as exc:
        reason = load_reason(exc)
        if shown_as:
            reason = reason.replace(shown_as, model.path)
        display = family_named(model.family).display
        raise EnvironmentMissing(f"model {model.path}: cannot be loaded as {display} by {loader}: {reason}.",
                                 hint=load_hint(model)) from exc


def load_reason(exc: BaseException) -> str:
    """What went wrong, in the terms of the checkpoint rather than of the loader's code."""
    import pickle

    text = " ".join(str(exc).split())
    if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in text:
        return ("its pickled weights (*.bin) hold more than tensors, and lgpt-index loads tensors only (no pickled "
                "code runs); convert them to safetensors")
    if "ignore_mismatched_sizes" in text or "size mismatch" in text:
        return "the shapes of its weights do not match the widths its config.json declares"
    first = re.split(r"(?<=[.!?]) ", text, maxsplit=1)[0]  # loaders put the cause first, then advice for their own API
    return f"{type(exc).__name__}: {first[:300].rstrip('.')}"
