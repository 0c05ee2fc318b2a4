"""Self-made ColPali checkpoints with random weights, for tests and benchmarks.

No machine here reaches the model hub, so the real loading path (byaldi ->
colpali-engine -> transformers) is exercised on checkpoints built here: the
PaliGemma architecture with small widths, a tokenizer trained with the
`tokenizers` library, and a SigLIP image processor. Their vectors have the real
shape (128-d, one per token) but carry no meaning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..models.resolve import RANDOM_MARKER, is_random_checkpoint  # noqa: F401 (the marker's reader lives with the models)

# Words the tiny tokenizer is trained on: enough for queries and page text.
_CORPUS = """
the quick brown fox jumps over the lazy dog. what was q3 revenue in 2024?
quarterly report revenue profit loss margin growth sales customers market
invoice total amount due date payment table figure chart page section
introduction summary conclusion appendix results method data model index
document search retrieval question answer image scan slide sheet cell row
column word text markdown heading list item number one two three four five
""".split()


@dataclass(frozen=True)
class CheckpointSpec:
    """Widths of a random ColPali checkpoint."""

    name: str
    image_size: int
    patch_size: int
    vision_hidden: int
    vision_layers: int
    vision_heads: int
    text_hidden: int
    text_layers: int
    text_heads: int
    text_intermediate: int
    head_dim: int
    vocab_size: int = 2048
    vision_intermediate: int | None = None  # default: twice vision_hidden


SPECS: dict[str, CheckpointSpec] = {
    # 56 px / patch 14 = 16 image tokens: fast enough for every test.
    "tiny": CheckpointSpec("tiny", 56, 14, 32, 1, 2, 64, 1, 2, 128, 32),
    # Real geometry: 448 px, patch 14, 1024 image tokens, 128-d output; one narrow layer
    # each side, so that the CPU spends its time where a pipeline does, not in the model.
    "bench": CheckpointSpec("bench", 448, 14, 32, 1, 1, 64, 1, 1, 128, 32),
    # Real geometry and wider layers: about 24 GFLOP a page, so that a build is model-bound on a
    # CPU as with any real model there (the "bench" one is pipeline-bound: its model costs about
    # what rendering does).
    "cpu": CheckpointSpec("cpu", 448, 14, 256, 2, 4, 512, 2, 4, 2048, 128),
    # vidore/colpali-v1.3's architecture (PaliGemma-3B at 448 px: SigLIP So400m/14 and
    # Gemma-2B): the same FLOPs per page as the real model, for GPU throughput.
    "full": CheckpointSpec("full", 448, 14, 1152, 27, 16, 2048, 18, 8, 16384, 256, 257216, 4304),
}


def _build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([" ".join(_CORPUS)] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="right",
    )


def mark_random_checkpoint(folder: Path, spec: str, seed: int) -> None:
    """Record in `folder` that its weights are random (what is_random_checkpoint reads)."""
    (folder / RANDOM_MARKER).write_text(json.dumps({"spec": spec, "seed": seed, "random_weights": True}, indent=2))


def _paligemma_config(spec: CheckpointSpec, tokenizer, image_token_id: int):
    """PaliGemma's config (SigLIP vision tower, Gemma text model) at the widths of `spec`."""
    from transformers import PaliGemmaConfig

    config = PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": spec.vision_hidden,
            "intermediate_size": spec.vision_intermediate or spec.vision_hidden * 2,
            "num_hidden_layers": spec.vision_layers,
            "num_attention_heads": spec.vision_heads,
            "image_size": spec.image_size,
            "patch_size": spec.patch_size,
            "projection_dim": spec.text_hidden,
            "tie_word_embeddings": False,
        },
        text_config={
            "model_type": "gemma",
            "hidden_size": spec.text_hidden,
            "intermediate_size": spec.text_intermediate,
            "num_hidden_layers": spec.text_layers,
            "num_attention_heads": spec.text_heads,
            "num_key_value_heads": 1,
            "head_dim": spec.head_dim,
            "vocab_size": spec.vocab_size,
            "tie_word_embeddings": False,
        },
        image_token_index=image_token_id,
        projection_dim=spec.text_hidden,
        hidden_size=spec.text_hidden,
        vocab_size=spec.vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    config.text_config.tie_word_embeddings = False
    return config


def make_checkpoint(
    out_dir: Path,
    spec: CheckpointSpec | str = "tiny",
    seed: int = 0,
    dtype: str = "float32",
    module_dtypes: dict[str, str] | None = None,
    device: str = "cpu",
) -> Path:
    """Write a random ColPali checkpoint (model + processor) to `out_dir`.

    `dtype` is the storage dtype; `module_dtypes` stores some top-level modules in
    another one ({"vision_tower": "float32"}), as mixed-precision checkpoints do.

    byaldi only accepts paths containing "colpali", so callers should pick a
    folder name that does (the loader in this package also copes without).
    """
    import torch
    from colpali_engine.models import ColPali, ColPaliProcessor
    from transformers import SiglipImageProcessor
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if isinstance(spec, str):
        spec = SPECS[spec]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    tokenizer = _build_tokenizer(spec.vocab_size)
    n_image_tokens = (spec.image_size // spec.patch_size) ** 2
    image_processor = SiglipImageProcessor(
        size={"height": spec.image_size, "width": spec.image_size},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        resample=3,
        do_normalize=True,
        do_rescale=True,
        image_seq_length=n_image_tokens,
    )
    image_processor.image_seq_length = n_image_tokens
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)
    image_token_id = processor.image_token_id
    assert len(processor.tokenizer) <= spec.vocab_size, "tokenizer outgrew the vocabulary"

    config = _paligemma_config(spec, tokenizer, image_token_id)
    torch.manual_seed(seed)
    with torch.device(device):  # "cuda" initialises a full-size model in seconds
        model = ColPali(config).to(getattr(torch, dtype)).eval()
    config.dtype = dtype
    for name, module_dtype in (module_dtypes or {}).items():
        getattr(model.model.model, name).to(getattr(torch, module_dtype))
        if name == "vision_tower":
            config.vision_config.dtype = module_dtype
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)
    mark_random_checkpoint(out_dir, spec.name, seed)
    return out_dir
