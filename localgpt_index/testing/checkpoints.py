"""Self-made checkpoints with random weights, for tests and benchmarks: ColPali's and every other family's.

No machine here reaches the model hub, so the real loading path (byaldi -> colpali-engine ->
transformers) is exercised on checkpoints built here. ColPali's (`make_checkpoint`): the PaliGemma
architecture with small widths, a tokenizer trained with the `tokenizers` library, and a SigLIP image
processor. The other families' (`make_family_checkpoint`) are written with the family's real classes
(colpali-engine's model, transformers' processors) and the real token and processor layout, with tiny
widths. The loading, processing and scoring paths are the real ones; the vectors have the real shape
but carry no meaning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.families import QWEN_GRID
from ..models.resolve import RANDOM_MARKER

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
    from transformers import PaliGemmaConfig, PreTrainedConfig

    config = PaliGemmaConfig(  # the token ids: kwargs the config takes, beyond its signature
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
    assert isinstance(config.text_config, PreTrainedConfig), "PaliGemmaConfig makes its text config from the dict"
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


# -- the other families --------------------------------------------------------------------------------

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>"]
VOCAB = 1024
# Qwen images: a grid of cells (patches merged 2 x 2: 28 px, 32 px from Qwen3 on), 4 to 64 cells a page;
# in the "bench" geometry up to 768, the image tokens a page colpali-engine's ColQwen2/2.5 were trained with;
# "full" (ColQwen2.5 only, for GPUs) has those and the real widths as well.
QWEN_CELLS = {"tiny": 64, "bench": 768, "full": 768}
# Qwen2.5-VL-3B's widths (the base of vidore/colqwen2.5-v0.2): the same layers, so the same FLOPs a page
QWEN2_5_3B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
                     "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu"}
QWEN2_5_3B_TEXT = {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
                   "num_key_value_heads": 2, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6}
# Idefics3-style images: split into tiles of TILE px (up to 2 x 2) plus the whole page, 4 tokens a tile.
IDEFICS_FAMILIES = ("colidefics3", "colmodernvbert")
TILE = 56
CHECKPOINT_FAMILIES = QWEN_GRID + IDEFICS_FAMILIES + ("colgemma3",)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<start_of_image>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
)


def _tokenizer(specials: list[str], **named):
    """A byte-level BPE tokenizer trained on a few words, with the family's special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([" ".join(_CORPUS)] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **named)


def _qwen_parts(family: str, geometry: str = "tiny"):
    """The processor parts and config of a tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL or Qwen3.5 checkpoint."""
    import transformers
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokenizer = _tokenizer(
        QWEN_SPECIALS, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                              "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
    )
    qwen3 = family in ("colqwen3", "colqwen3_5")
    patch = 16 if qwen3 else 14
    cell = 2 * patch
    grid = {"patch_size": patch, "merge_size": 2, "temporal_patch_size": 2}
    budget = QWEN_CELLS[geometry] * cell * cell
    images = Qwen2VLImageProcessor(**grid, min_pixels=4 * cell * cell, max_pixels=budget,
                                   image_mean=[0.5] * 3, image_std=[0.5] * 3)
    videos: Qwen2VLVideoProcessor | Qwen3VLVideoProcessor
    if qwen3:
        videos = Qwen3VLVideoProcessor(**grid, size={"shortest_edge": 4 * cell * cell, "longest_edge": budget})
    else:
        videos = Qwen2VLVideoProcessor(**grid, min_pixels=4 * cell * cell, max_pixels=budget)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_SPECIALS}
    text: dict[str, Any] = {
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": False}
    vision: dict[str, Any] = {"depth": 1, "num_heads": 2, "patch_size": patch, "spatial_merge_size": 2, "temporal_patch_size": 2}
    if family == "colqwen2":
        vision.update(embed_dim=32, hidden_size=64, mlp_ratio=2)
    elif family == "colqwen2_5" and geometry == "full":
        vision.update(QWEN2_5_3B_VISION)
        text.update(QWEN2_5_3B_TEXT)
        text["rope_parameters"].update(rope_theta=1000000.0, mrope_section=[16, 24, 24])
    elif family == "colqwen2_5":
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=64, fullatt_block_indexes=[0], window_size=56)
    else:
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=64, num_position_embeddings=64)
        text["head_dim"] = 32
        text["rope_parameters"]["mrope_interleaved"] = True
    if family == "colqwen3":
        vision["deepstack_visual_indexes"] = [0]
    if family == "colqwen3_5":  # one linear-attention (Gated DeltaNet) layer and one full-attention layer
        text.update(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                    linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4)
        text["rope_parameters"].update(partial_rotary_factor=0.25, mrope_section=[2, 1, 1])
    config_class = {"colqwen2": transformers.Qwen2VLConfig, "colqwen2_5": transformers.Qwen2_5_VLConfig,
                    "colqwen3": transformers.Qwen3VLConfig, "colqwen3_5": transformers.Qwen3_5Config}[family]
    config = config_class(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                          video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                          vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    return tokenizer, images, videos, config


def _idefics_parts(family: str):
    """The processor parts and config of a tiny Idefics3 (ColSmol) or ModernVBert checkpoint."""
    from transformers import Idefics3Config, ModernVBertConfig
    from transformers.models.idefics3.image_processing_idefics3 import Idefics3ImageProcessor

    start = "<|im_start|>" if family == "colidefics3" else "<|begin_of_text|>"
    grid = [f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)]
    specials = ["<|endoftext|>", start, "<end_of_utterance>", "<image>", "<fake_token_around_image>", "<global-img>", *grid]
    tokenizer = _tokenizer(specials, bos_token=start, eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
                           padding_side="left")
    images = Idefics3ImageProcessor(size={"longest_edge": 2 * TILE}, max_image_size={"longest_edge": TILE},
                                    do_image_splitting=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials[:4]}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": TILE, "patch_size": 14}
    text = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids[start],
            "eos_token_id": ids["<end_of_utterance>"], "tie_word_embeddings": False}
    config: Idefics3Config | ModernVBertConfig
    if family == "colidefics3":
        config = Idefics3Config(  # pad_token_id: a kwarg the config takes, beyond its signature
            vision_config=vision, text_config={**text, "model_type": "llama", "num_key_value_heads": 1},
            scale_factor=2, image_token_id=ids["<image>"], pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=False)
    else:
        config = ModernVBertConfig(vision_config={**vision, "model_type": "siglip_vision_model"},
                                   text_config={**text, "model_type": "modernbert", "global_attn_every_n_layers": 1,
                                                "cls_token_id": ids[start], "sep_token_id": ids["<end_of_utterance>"]},
                                   pixel_shuffle_factor=2, image_token_id=ids["<image>"], tie_word_embeddings=False)
    return tokenizer, images, config


def _gemma_parts():
    """The processor parts and config of a tiny Gemma3 checkpoint (a fixed 56 px image, 4 tokens)."""
    from transformers import Gemma3Config
    from transformers.models.gemma3.image_processing_gemma3 import Gemma3ImageProcessor

    specials = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                "<image_soft_token>"]
    tokenizer = _tokenizer(specials, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", padding_side="left",
                           chat_template=GEMMA_TEMPLATE,
                           extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                                 "image_token": "<image_soft_token>"})
    images = Gemma3ImageProcessor(size={"height": TILE, "width": TILE}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                  do_pan_and_scan=False)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials}
    config = Gemma3Config(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": TILE, "patch_size": 14},
        text_config={"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "sliding_window": 64,
                     "pad_token_id": ids["<pad>"], "bos_token_id": ids["<bos>"], "eos_token_id": ids["<eos>"],
                     "tie_word_embeddings": False},
        mm_tokens_per_image=4, image_token_index=ids["<image_soft_token>"], boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"], tie_word_embeddings=False)
    return tokenizer, images, config


def make_family_checkpoint(out_dir: Path, family: str, seed: int = 0, geometry: str = "tiny", dtype: str = "float32",
                           device: str = "cpu") -> Path:
    """Write a random checkpoint of `family` (a name from localgpt_index.families) to `out_dir`:
    tiny widths, ("bench", Qwen families) the real number of image tokens a page, or ("full",
    ColQwen2.5) the real model's layers as well (3.4 B parameters: the real 3.75 B less most of its
    151,936-word embedding), initialised on `device`
    ("cuda" takes seconds) in `dtype`."""
    import torch
    import colpali_engine.models as engine
    from transformers.utils import logging as hf_logging

    from ..models.families import family_named

    if family not in CHECKPOINT_FAMILIES:
        raise ValueError(f"no checkpoint recipe for {family!r}; there are: {', '.join(CHECKPOINT_FAMILIES)}")
    if geometry != "tiny" and family not in QWEN_GRID:
        raise ValueError(f"the {geometry!r} geometry is there for the Qwen families only, not {family!r}")
    if geometry == "full" and family != "colqwen2_5":
        raise ValueError(f"the 'full' geometry is there for colqwen2_5 only, not {family!r}")
    hf_logging.disable_progress_bar()
    described = family_named(family)
    processor_class = getattr(engine, described.processor)
    if family in QWEN_GRID:
        tokenizer, images, videos, config = _qwen_parts(family, geometry)
        processor = processor_class(image_processor=images, tokenizer=tokenizer, video_processor=videos)
    elif family in IDEFICS_FAMILIES:
        tokenizer, images, config = _idefics_parts(family)
        processor = processor_class(image_processor=images, tokenizer=tokenizer, image_seq_len=(TILE // 14 // 2) ** 2)
    else:
        tokenizer, images, config = _gemma_parts()
        processor = processor_class(image_processor=images, tokenizer=tokenizer, image_seq_length=4,
                                    chat_template=GEMMA_TEMPLATE)
    torch.manual_seed(seed)
    with torch.device(device):
        model = getattr(engine, described.architecture)(config).to(getattr(torch, dtype)).eval()
    config.architectures = [described.architecture]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)
    mark_random_checkpoint(out_dir, f"{geometry}-{family}", seed)
    return out_dir
