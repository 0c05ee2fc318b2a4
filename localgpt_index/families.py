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
    example: str  # a published checkpoint
    vidore_v1: float | None  # its published ViDoRe V1 average (nDCG@5)
    hardware: str
    dim: int = 128  # vector size, when the checkpoint's config does not say ("dim")


# Scores: ViDoRe V1 averages as colpali-engine 0.3.18's README lists them, for the example.
FAMILIES: tuple[Family, ...] = (
    Family("colpali", "ColPali", ("paligemma",), "ColPali", "ColPaliProcessor", "byaldi", False,
           "vidore/colpali-v1.3", 84.8, "GPU; 3B parameters, seconds a page on a CPU"),
    Family("colqwen2", "ColQwen2", ("qwen2_vl",), "ColQwen2", "ColQwen2Processor", "byaldi", True,
           "vidore/colqwen2-v1.0", 89.3, "GPU; 2B parameters"),
    Family("colqwen2_5", "ColQwen2.5", ("qwen2_5_vl",), "ColQwen2_5", "ColQwen2_5_Processor", "colpali-engine", True,
           "vidore/colqwen2.5-v0.2", 89.4, "GPU; 3B parameters"),
    Family("colqwen3", "ColQwen3", ("qwen3_vl",), "ColQwen3", "ColQwen3Processor", "colpali-engine", True,
           "TomoroAI/tomoro-colqwen3-embed-4b", 90.6, "GPU; 4B parameters", dim=320),
    Family("colqwen3_5", "ColQwen3.5", ("qwen3_5",), "ColQwen3_5", "ColQwen3_5Processor", "colpali-engine", True,
           "athrael-soju/colqwen3.5-4.5B-v3", 90.9, "GPU; 4.5B parameters"),
    Family("colidefics3", "ColIdefics3 (ColSmol)", ("idefics3",), "ColIdefics3", "ColIdefics3Processor",
           "colpali-engine", True, "vidore/colSmol-256M", 80.1, "CPU or a small GPU; 256M (500M: 82.3)"),
    Family("colmodernvbert", "ColModernVBert", ("modernvbert",), "ColModernVBert", "ColModernVBertProcessor",
           "colpali-engine", True, "", None, "CPU; about 250M parameters"),
    Family("colgemma3", "ColGemma3", ("gemma3",), "ColGemma3", "ColGemmaProcessor3", "colpali-engine", False,
           "Cognitive-Lab/ColNetraEmbed", 86.4, "GPU; 4B parameters"),
)
QWEN_GRID = ("colqwen2", "colqwen2_5", "colqwen3", "colqwen3_5")  # a grid of image tokens sized by a pixel budget
FAKE = Family("fake", "fake (tests)", ("lgpt-fake",), "", "", "fake", False, "", None, "no torch")
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
