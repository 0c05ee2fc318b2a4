"""The ColPali-family models lgpt-index loads, and how each is recognised and loaded.

A family is recognised from the checkpoint's `config.json` (its `architectures`, then its
`model_type`), never from the folder name. ColPali and ColQwen2 load through byaldi, as
byaldi users expect; the families byaldi cannot load go through colpali-engine's own classes.
Nothing here imports torch.

The families live in a registry, and the built-in ones register through it like any other:
a plugin module (the test double of the `testing` package, or a third party's family)
calls `register()` when imported. The registry imports, at its first use in each process, the
modules named in $LGPT_PLUGINS (comma-separated; subprocesses inherit it: the CLI, `serve`, Ray
workers) and the entry points of the `lgpt_index.families` group (each a module, or a callable
it calls).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable


@dataclass(frozen=True)
class Family:
    """One model family: how it is recognised, loaded and described."""

    name: str  # as recorded in an index
    display: str
    model_types: tuple[str, ...]  # config.json model_type of its checkpoints (or of the base model of an adapter)
    architecture: str  # colpali-engine's class, as in config.json "architectures"
    processor: str  # colpali-engine's processor class
    loader: str  # "byaldi" or "colpali-engine"
    dynamic: bool  # the processor picks the number of image tokens from the page size
    dim: int = 128  # vector size, when the checkpoint's config does not say ("dim")
    config_dim: bool = False  # the checkpoint's config.json "dim" is the vector size
    torch: bool = True  # runs on torch: the CPU tuner and the thread count apply to it
    # a plugin's own encoder, (ModelRef, batch_size or None) -> PageEncoder; None: `loader`'s
    encoder: Callable[[Any, int | None], Any] | None = None
    # a plugin's expected render size, from the checkpoint folder (None: read the processor's settings)
    render_size: Callable[[Any], Any] | None = None
    # a grid of image tokens sized by a pixel budget (Qwen): --max-visual-tokens applies, and pages
    # go to the model as one temporal frame, their pixels as a list of pages
    pixel_grid: bool = False
    # a fixed-size image, so every page has the same prompt: pages are stacked into batches (ColPali)
    shared_prompt: bool = False
    logits_to_keep: bool = False  # the network takes logits_to_keep (it reads the last hidden states only)
    use_cache: bool = False  # the network takes use_cache (passed False: it builds no key-value cache per pass)
    compile_parts: tuple[str, ...] = ()  # the parts torch.compile compiles apart (dotted paths; none: the whole)


# Published checkpoints, scores and the hardware each suits: the README's Models table.
FAMILIES: tuple[Family, ...] = (
    Family("colpali", "ColPali", ("paligemma",), "ColPali", "ColPaliProcessor", "byaldi", False, shared_prompt=True,
           logits_to_keep=True, use_cache=True, compile_parts=("model.model.vision_tower", "model.model.language_model")),
    Family("colqwen2", "ColQwen2", ("qwen2_vl",), "ColQwen2", "ColQwen2Processor", "byaldi", True, pixel_grid=True),
    Family("colqwen2_5", "ColQwen2.5", ("qwen2_5_vl",), "ColQwen2_5", "ColQwen2_5_Processor", "colpali-engine", True,
           pixel_grid=True),
    Family("colqwen3", "ColQwen3", ("qwen3_vl",), "ColQwen3", "ColQwen3Processor", "colpali-engine", True, dim=320,
           pixel_grid=True),
    Family("colqwen3_5", "ColQwen3.5", ("qwen3_5",), "ColQwen3_5", "ColQwen3_5Processor", "colpali-engine", True,
           config_dim=True, pixel_grid=True),
    Family("colidefics3", "ColIdefics3 (ColSmol)", ("idefics3",), "ColIdefics3", "ColIdefics3Processor",
           "colpali-engine", True, use_cache=True),
    Family("colmodernvbert", "ColModernVBert", ("modernvbert",), "ColModernVBert", "ColModernVBertProcessor",
           "colpali-engine", True),
    Family("colgemma3", "ColGemma3", ("gemma3",), "ColGemma3", "ColGemmaProcessor3", "colpali-engine", False),
)
QWEN_GRID = tuple(family.name for family in FAMILIES if family.pixel_grid)  # the built-ins --max-visual-tokens applies to
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"  # a family's name, as an index records it (the schemas' pattern for plugins')
LOADER_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
PLUGINS_ENV = "LGPT_PLUGINS"
ENTRY_POINT_GROUP = "lgpt_index.families"

_REGISTRY: dict[str, Family] = {}
_plugins_loaded = False


def register(family: Family) -> Family:
    """Add a family (or replace the one of that name): built-ins and plugins alike. Its name and
    loader are lowercase words (NAME_PATTERN, LOADER_PATTERN: what the published schemas allow)."""
    if not re.match(NAME_PATTERN, family.name) or not re.match(LOADER_PATTERN, family.loader):
        raise ValueError(f"a model family's name and loader are lowercase words: {family.name!r}, {family.loader!r}")
    _REGISTRY[family.name] = family
    return family


for _family in FAMILIES:
    register(_family)


def _load_plugins() -> None:
    """Import the plugin modules of $LGPT_PLUGINS and of the entry-point group, once a process."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            import_module(name)
        except ImportError as exc:
            from ..core.errors import EnvironmentMissing

            raise EnvironmentMissing(f"{PLUGINS_ENV}: the plugin module {name} cannot be imported ({exc}).",
                                     hint=f"Install it, or remove it from {PLUGINS_ENV}.") from None
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        loaded = point.load()
        if callable(loaded):
            loaded()


def registered() -> tuple[Family, ...]:
    """Every family: the built-ins, then the plugins' in the order they registered."""
    _load_plugins()
    return tuple(_REGISTRY.values())


def built_in() -> tuple[Family, ...]:
    """The families lgpt-index itself registers (the published schemas list these)."""
    return FAMILIES


def supported() -> str:
    """The supported families, for messages."""
    return ", ".join(f"{f.display} ({'/'.join(f.model_types)})" for f in FAMILIES)


def family_named(name: str) -> Family:
    _load_plugins()
    return _REGISTRY[name]


def find_family(name: str) -> Family | None:
    """The family of that name, or None where no registered family has it."""
    _load_plugins()
    return _REGISTRY.get(name)


def detect_family(config: dict) -> Family | None:
    """The family of a checkpoint from its config.json: a Col* class in `architectures` wins
    (a single-vector Bi* model of the same backbone is not one), then `model_type`."""
    architectures = config.get("architectures") or []
    if isinstance(architectures, list):
        for family in registered():
            if family.architecture and family.architecture in architectures:
                return family
        if any(isinstance(a, str) and a.startswith("Bi") for a in architectures):
            return None
    model_type = str(config.get("model_type", ""))
    for family in registered():
        if model_type in family.model_types:
            return family
    return None


def check_visual_tokens_supported(model: Any, tokens: int | None) -> None:
    """--max-visual-tokens applies to the families whose processors size the grid by a pixel budget."""
    from ..core.errors import UsageError

    if tokens is not None and not family_named(model.family).pixel_grid:
        grid = ", ".join(family.display for family in registered() if family.pixel_grid)
        raise UsageError(f"--max-visual-tokens: {family_named(model.family).display} does not support it; "
                         f"it applies to {grid}.")
