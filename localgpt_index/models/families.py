"""The ColPali-family models lgpt-index loads, and how each is recognised and loaded.

A family is recognised from the checkpoint's `config.json` (its `architectures`, then its
`model_type`), never from the folder name. ColPali and ColQwen2 load through byaldi, as
byaldi users expect; the families byaldi cannot load go through colpali-engine's own classes.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass


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


# Published checkpoints, scores and the hardware each suits: the README's Models table.
FAMILIES: tuple[Family, ...] = (
    Family("colpali", "ColPali", ("paligemma",), "ColPali", "ColPaliProcessor", "byaldi", False),
    Family("colqwen2", "ColQwen2", ("qwen2_vl",), "ColQwen2", "ColQwen2Processor", "byaldi", True),
    Family("colqwen2_5", "ColQwen2.5", ("qwen2_5_vl",), "ColQwen2_5", "ColQwen2_5_Processor", "colpali-engine", True),
    Family("colqwen3", "ColQwen3", ("qwen3_vl",), "ColQwen3", "ColQwen3Processor", "colpali-engine", True, dim=320),
    Family("colqwen3_5", "ColQwen3.5", ("qwen3_5",), "ColQwen3_5", "ColQwen3_5Processor", "colpali-engine", True),
    Family("colidefics3", "ColIdefics3 (ColSmol)", ("idefics3",), "ColIdefics3", "ColIdefics3Processor",
           "colpali-engine", True),
    Family("colmodernvbert", "ColModernVBert", ("modernvbert",), "ColModernVBert", "ColModernVBertProcessor",
           "colpali-engine", True),
    Family("colgemma3", "ColGemma3", ("gemma3",), "ColGemma3", "ColGemmaProcessor3", "colpali-engine", False),
)
QWEN_GRID = ("colqwen2", "colqwen2_5", "colqwen3", "colqwen3_5")  # a grid of image tokens sized by a pixel budget
FAKE = Family("fake", "fake (tests)", ("lgpt-fake",), "", "", "fake", False)
_BY_NAME = {family.name: family for family in (*FAMILIES, FAKE)}
FAMILY_NAMES = frozenset(_BY_NAME)


def supported() -> str:
    """The supported families, for messages."""
    return ", ".join(f"{f.display} ({'/'.join(f.model_types)})" for f in FAMILIES)


def family_named(name: str) -> Family:
    return _BY_NAME[name]


def detect_family(config: dict) -> Family | None:
    """The family of a checkpoint from its config.json: a Col* class in `architectures` wins
    (a single-vector Bi* model of the same backbone is not one), then `model_type`."""
    architectures = config.get("architectures") or []
    if isinstance(architectures, list):
        for family in FAMILIES:
            if family.architecture in architectures:
                return family
        if any(isinstance(a, str) and a.startswith("Bi") for a in architectures):
            return None
    model_type = str(config.get("model_type", ""))
    for family in (*FAMILIES, FAKE):
        if model_type in family.model_types:
            return family
    return None
