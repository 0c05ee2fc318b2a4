"""The ColPali-family models lgpt-index loads, and how each is recognised and loaded.

A family is recognised from the checkpoint's `config.json` (its `architectures`, then its
`model_type`), never from the folder name. ColPali and ColQwen2 load through byaldi, as
byaldi users expect; the families byaldi cannot load go through colpali-engine's own classes
(models/loaders.py). Nothing here imports torch.

The families come from the plugin manager's `lgpt_families` hook (core/plugins.py): the built-in
ones from this module's, a plugin's (the test double of the `testing` package, a third
party's) from its own.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..core.plugins import collected, hookimpl, plugin_manager
from .loaders import BYALDI, COLPALI_ENGINE, Loader

if TYPE_CHECKING:
    from .geometry import PatchGeometry


@dataclass(frozen=True)
class Family:
    """One model family: how it is recognised, loaded and described."""

    name: str  # as recorded in an index
    display: str
    model_types: tuple[str, ...]  # config.json model_type of its checkpoints (or of the base model of an adapter)
    architecture: str  # colpali-engine's class, as in config.json "architectures"
    processor: str  # colpali-engine's processor class
    loader: Loader  # loads the network and processor (BYALDI, COLPALI_ENGINE), or names a plugin's own `encoder`
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
    # where its pages' vectors lie on the page, (family, ModelRef, render size) -> PatchGeometry (models/geometry.py);
    # None: it has no visual regions
    patches: Callable[[Any, Any, Any], PatchGeometry | None] | None = None

    def patch_geometry(self, model: Any, render_size: Any) -> PatchGeometry | None:
        """Its patch geometry for `model` (a ModelRef of this family) rendered at `render_size`; None: it declares none."""
        return None if self.patches is None else self.patches(self, model, render_size)

    def __post_init__(self) -> None:
        """Its name and its loader's are lowercase words (NAME_PATTERN, LOADER_PATTERN: what the published schemas allow)."""
        if not re.match(NAME_PATTERN, self.name) or not re.match(LOADER_PATTERN, self.loader.name):
            raise ValueError(f"a model family's name and loader are lowercase words: {self.name!r}, {self.loader.name!r}")


NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"  # a family's name, as an index records it (the schemas' pattern for plugins')
LOADER_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"


def _processor_patches(arrangement: str) -> Callable[[Any, Any, Any], PatchGeometry]:
    """A built-in family's `patches`: its processor's image tokens, arranged by models/geometry.py's
    `<arrangement>_arrangement` (imported when a geometry is asked: it needs numpy, which the warm
    command line never imports)."""

    def patches(family: Any, model: Any, render_size: Any) -> PatchGeometry:
        from . import geometry

        return geometry.processor_patches(getattr(geometry, f"{arrangement}_arrangement"))(family, model, render_size)

    return patches


SQUARE = _processor_patches("square")  # a square grid over the page resized to a square
MERGED = _processor_patches("merged")  # Qwen: the page's own grid of merged patches
TILED = _processor_patches("tiled")  # Idefics3: tiles of the split page, then the global view

# Published checkpoints, scores and the hardware each suits: the README's Models table.
FAMILIES: tuple[Family, ...] = (
    Family("colpali", "ColPali", ("paligemma",), "ColPali", "ColPaliProcessor", BYALDI, False, shared_prompt=True,
           logits_to_keep=True, use_cache=True, compile_parts=("model.model.vision_tower", "model.model.language_model"), patches=SQUARE),
    Family("colqwen2", "ColQwen2", ("qwen2_vl",), "ColQwen2", "ColQwen2Processor", BYALDI, True, pixel_grid=True,
           patches=MERGED),
    Family("colqwen2_5", "ColQwen2.5", ("qwen2_5_vl",), "ColQwen2_5", "ColQwen2_5_Processor", COLPALI_ENGINE, True,
           pixel_grid=True, patches=MERGED),
    Family("colqwen3", "ColQwen3", ("qwen3_vl",), "ColQwen3", "ColQwen3Processor", COLPALI_ENGINE, True, dim=320,
           pixel_grid=True, patches=MERGED),
    Family("colqwen3_5", "ColQwen3.5", ("qwen3_5",), "ColQwen3_5", "ColQwen3_5Processor", COLPALI_ENGINE, True,
           config_dim=True, pixel_grid=True, patches=MERGED),
    Family("colidefics3", "ColIdefics3 (ColSmol)", ("idefics3",), "ColIdefics3", "ColIdefics3Processor",
           COLPALI_ENGINE, True, use_cache=True, patches=TILED),
    Family("colmodernvbert", "ColModernVBert", ("modernvbert",), "ColModernVBert", "ColModernVBertProcessor",
           COLPALI_ENGINE, True, patches=TILED),
    Family("colgemma3", "ColGemma3", ("gemma3",), "ColGemma3", "ColGemmaProcessor3", COLPALI_ENGINE, False,
           patches=SQUARE),
)
QWEN_GRID = tuple(family.name for family in FAMILIES if family.pixel_grid)  # the built-ins --max-visual-tokens applies to


@hookimpl(trylast=True)
def lgpt_families() -> tuple[Family, ...]:
    return FAMILIES


def registered_families() -> tuple[Family, ...]:
    """Every family: the built-ins, then the plugins' in the order they registered (a later family
    replaces an earlier one of its name)."""
    return tuple(_by_name().values())


def _by_name() -> dict[str, Family]:
    return {family.name: family for family in collected(plugin_manager(sys.modules[__name__]).hook.lgpt_families())}


def built_in() -> tuple[Family, ...]:
    """The families lgpt-index itself registers (the published schemas list these)."""
    return FAMILIES


def supported() -> str:
    """The supported families, for messages."""
    return ", ".join(f"{f.display} ({'/'.join(f.model_types)})" for f in FAMILIES)


def family_named(name: str) -> Family:
    """The family of that name (KeyError where no registered family has it)."""
    return _by_name()[name]


def find_family(name: str) -> Family | None:
    """The family of that name, or None where no registered family has it."""
    return _by_name().get(name)


def detect_family(config: dict) -> Family | None:
    """The family of a checkpoint from its config.json: a Col* class in `architectures` wins
    (a single-vector Bi* model of the same backbone is not one), then `model_type`."""
    architectures = config.get("architectures") or []
    if isinstance(architectures, list):
        for family in registered_families():
            if family.architecture and family.architecture in architectures:
                return family
        if any(isinstance(a, str) and a.startswith("Bi") for a in architectures):
            return None
    model_type = str(config.get("model_type", ""))
    for family in registered_families():
        if model_type in family.model_types:
            return family
    return None


def check_visual_tokens_supported(model: Any, tokens: int | None) -> None:
    """--max-visual-tokens applies to the families whose processors size the grid by a pixel budget."""
    from ..core.errors import UsageError

    if tokens is not None and not family_named(model.family).pixel_grid:
        grid = ", ".join(family.display for family in registered_families() if family.pixel_grid)
        raise UsageError(f"--max-visual-tokens: {family_named(model.family).display} does not support it; "
                         f"it applies to {grid}.")
