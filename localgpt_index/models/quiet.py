"""transformers' own logging and progress bars, quietened while a model loads or runs.

They are put back as they were afterwards: a library that imports lgpt-index keeps its logging
settings. In the
command's own process (core.collector.own_process) they are quietened once and left so: setting
transformers' verbosity walks every logger (about 0.5 ms with a model loaded), twice a query."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from ..core.collector import process_owned

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
