"""The garbage collector while a model loads, in a process that lgpt-index owns.

Importing torch, transformers and colpali-engine leaves about 740,000 objects. The collector
makes full passes over them while they arrive: seven, each longer than the last, 1.3 s of a
build's 6-9 s model load on this project's 2-core machine. After the load, every full pass
costs about 0.3 s. So the command-line process (and the server it runs) keeps the collector
off while a model loads, then freezes what exists: later passes skip it.

The imports' cyclic garbage, about 10 MiB, stays frozen with the rest; one full collection
to free it would cost about 0.3 s. A program that imports localgpt_index keeps its collector
as it is: nothing here acts unless `own_process` was called (cli.run calls it).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


class _Policy:
    owned = False  # set by own_process: this interpreter runs the lgpt-index command


_policy = _Policy()


def own_process() -> None:
    """This interpreter is the lgpt-index command's: model loads may pause and freeze the collector."""
    _policy.owned = True


def process_owned() -> bool:
    """Whether this interpreter is the lgpt-index command's (own_process was called)."""
    return _policy.owned


@contextmanager
def frozen_after() -> Iterator[None]:
    """Around a model load: the collector off inside; on the way out, with or without an error,
    everything alive is frozen and the collector is on again. A no-op where the process is not
    the command's, or where the collector is off already (a load inside a load)."""
    if not _policy.owned or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
