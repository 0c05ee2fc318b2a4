"""Page and query encoders: the interface, how its failures are told apart, and the model
loaded through byaldi (ColPali, ColQwen2) or colpali-engine (the other families), run in
batches under autocast.

A failed forward pass is either the machine's fault or a page's: `DeviceOutOfMemory`
(the build halves its batch and tries again), `DeviceLost` (the build stops, exit 4),
or any other error, which the build pins on the page that causes it alone.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np
from PIL import Image

from .device import Precision
from ..core.errors import EnvironmentMissing, LgptError, page_failure
from .guard import DtypeFix, ModuleTracker, audit_checkpoint, audit_live, translate_error
from .resolve import ModelRef, offline_hint, weight_files

if TYPE_CHECKING:
    from ..core.sizes import RenderSize

MAX_QUERY_CHARS = 2048  # longer text is refused before tokenising (a 1 MB query took 600 s)
MAX_QUERY_TOKENS = 512  # what the models read well: ColPali-family training queries are far shorter
QUERY_BATCH = 32  # queries of one length per forward pass
GRID_TEXTS_KEPT = 256  # page sizes whose tokenized text a Qwen-family encoder keeps


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory for this batch; a smaller batch may fit."""


class DeviceLost(EnvironmentMissing):
    """The device failed (a CUDA error, a lost GPU): nothing more can run on it in this process."""


_OOM = re.compile(r"out of memory|CUBLAS_STATUS_ALLOC_FAILED|MPS backend out of memory|DefaultCPUAllocator: can't allocate", re.I)
_LOST = re.compile(
    r"CUDA error|CUDA driver|cudaErrorDevice|device-side assert|illegal memory access|unspecified launch failure"
    r"|CUBLAS_STATUS_(?!ALLOC)|CUDNN_STATUS|NCCL error|no CUDA GPUs are available|device not ready|ECC error"
    r"|MPS backend|Metal",
    re.I,
)


def classify_failure(exc: BaseException) -> str:
    """"oom", "device" or "page": whose fault a RuntimeError from a forward pass is."""
    if type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, (DeviceOutOfMemory, MemoryError)):
        return "oom"
    text = str(exc)
    if _OOM.search(text):
        return "oom"
    if _LOST.search(text):
        return "device"
    return "page"


def check_queries(texts: Sequence[str]) -> list[str]:
    """Queries fit for a model: not empty, not longer than it reads (UsageError otherwise)."""
    from ..core.errors import UsageError

    checked = []
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"query {number} is empty.")
        if len(text) > MAX_QUERY_CHARS:
            raise UsageError(
                f"query {number} is {len(text):,} characters long; queries are limited to {MAX_QUERY_CHARS:,} "
                f"characters ({MAX_QUERY_TOKENS} tokens, what the model reads)."
            )
        checked.append(text)
    return checked


class PageEncoder(ABC):
    """Turns page images and query texts into multi-vectors (tokens x dim)."""

    model: ModelRef
    precision: Precision
    dim: int
    batch_size: int = 4
    forward_calls: int = 0
    dtype_fixes: list = []
    max_visual_tokens: int | None = None  # image tokens a page at most, where the family has such a budget

    @property
    @abstractmethod
    def render_size(self) -> "RenderSize":
        """(width, height) the model consumes; for dynamic resolution the long side pages are rendered at (or None)."""

    def prepare_page(self, image):
        """Work on one page that may run in another thread before encode_pages (default: none)."""
        return image

    @abstractmethod
    def encode_pages(self, pages: Sequence) -> list[np.ndarray]:
        """One float16 array (tokens, dim) per page (an image, or what prepare_page made of it).

        Raises DeviceOutOfMemory, DeviceLost, or another exception for a page it cannot encode."""

    @abstractmethod
    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 array (tokens, dim) per query."""


def encode_resiliently(encoder: PageEncoder, pages: list, log=lambda message: None) -> list:
    """Vectors per page, or the DocumentError of a page that cannot be encoded.

    Out of memory halves the encoder's batch and tries again; a lost device (DeviceLost)
    stops the caller; an error a page can cause (page_failure) is pinned on the pages that
    fail alone; any other error (a bug) propagates."""
    from ..core.errors import LgptError

    try:
        out: list = []
        for start in range(0, len(pages), encoder.batch_size):
            out += encoder.encode_pages(pages[start : start + encoder.batch_size])
        return out
    except DeviceOutOfMemory as exc:
        if encoder.batch_size <= 1:
            raise DeviceLost(
                f"the device {encoder.precision.device} is out of memory with a single page ({exc}).",
                hint="Free the device (other processes?), or use --device cpu.",
            ) from None
        encoder.batch_size = max(1, encoder.batch_size // 2)
        log(f"warning: out of memory; batch size lowered to {encoder.batch_size}")
        return encode_resiliently(encoder, pages, log)
    except (LgptError, KeyboardInterrupt):
        raise
    except Exception as exc:
        failure = page_failure("encode", exc)
        if failure is None:
            raise
        if len(pages) == 1:
            return [failure]
        return [r for page in pages for r in encode_resiliently(encoder, [page], log)]


def expected_render_size(model: ModelRef, max_visual_tokens: int | None = None) -> "RenderSize | None":
    """The render size the model's encoder will ask for, read from its saved processor settings
    before anything is imported or loaded (a build renders pages while the model loads). None
    where they do not tell; the loaded encoder's render_size is the authority, and a build whose
    expectation was wrong renders its pages again."""
    from ..core.sizes import PixelBudget, render_size_for
    from .families import family_named

    folder = Path(model.path)
    own = family_named(model.family).render_size
    if own is not None:
        return own(folder)
    image = _small_json(folder / "preprocessor_config.json") or _small_json(folder / "processor_config.json").get("image_processor")
    if not isinstance(image, dict) or not isinstance(image.get("size"), dict):
        return None
    try:
        expected = render_size_for(image["size"], image.get("patch_size"), image.get("merge_size"))
    except (TypeError, ValueError):
        return None
    if isinstance(expected, PixelBudget) and max_visual_tokens is not None:
        budget = max_visual_tokens * expected.cell * expected.cell  # as limit_visual_tokens sets it
        expected = PixelBudget(budget, min(expected.min_pixels, budget), expected.cell)
    return expected


def _small_json(path: Path, limit: int = 1 << 20) -> dict:
    """A small JSON object from a model folder, or {} (absent, too large, not an object)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(limit + 1))  # a larger file is cut short, and does not parse
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class EncoderOptions:
    """How to load a page encoder: what the model layer needs of a build's options."""

    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None  # None: the device's default
    compile: bool = False
    max_visual_tokens: int | None = None


def load_page_encoder(model: ModelRef, options: EncoderOptions) -> PageEncoder:
    """The encoder for a model's family: a plugin family's own (as the test double's), else byaldi's
    or colpali-engine's loader on the device and dtype the probe picks."""
    from .families import family_named

    own = family_named(model.family).encoder
    if own is not None:
        return own(model, options.batch_size)
    encoder = open_probed_encoder(model, options.device, options.dtype, options.batch_size, compile=options.compile)
    if options.max_visual_tokens is not None:
        encoder.limit_visual_tokens(options.max_visual_tokens)
    return encoder


def open_probed_encoder(model: ModelRef, device: str = "auto", dtype: str = "auto", batch_size: int | None = None,
                        queries: bool = False, compile: bool = False) -> "ByaldiEncoder":
    """The model on the device and dtype the probe picks for `device`/`dtype` (`queries`: for a query
    encoder), in batches of `batch_size` (None: the device's default); the collector paused meanwhile
    in the command's process (core/collector.py)."""
    from ..core.collector import frozen_after
    from .device import choose_precision, default_batch_size, detect_capabilities

    with frozen_after():  # torch and byaldi import here
        caps = detect_capabilities()
        precision = choose_precision(caps, device, dtype, queries=queries)
        return open_encoder(model, precision, batch_size or default_batch_size(precision, caps), compile=compile)


def open_encoder(model: ModelRef, precision: Precision, batch_size: int, compile: bool = False) -> "ByaldiEncoder":
    """The model loaded by its family's loader: byaldi where byaldi can, else colpali-engine."""
    from .families import family_named

    check_weights(model)
    if family_named(model.family).loader == "byaldi":
        return ByaldiEncoder(model, precision, batch_size, compile=compile)
    return ColpaliEngineEncoder(model, precision, batch_size, compile=compile)


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
                             hint=_load_hint(model))


def _load_hint(model: ModelRef) -> str:
    if model.revision:  # a hub snapshot: fetch it again
        return "Its copy in the Hugging Face cache looks damaged. " + offline_hint(model.id, model.revision)
    return ("Point --model at a complete checkpoint, as save_pretrained writes one: config.json (whose architectures "
            "name the family), the processor's files and the weights (safetensors), all of the same model.")


@contextmanager
def _loading(model: ModelRef, loader: str, shown_as: str | None = None) -> Iterator[None]:
    """A checkpoint that cannot be loaded (pickled code, weights whose shapes do not match its
    config, another family's files) stops the command with one message naming the folder and the
    reason, exit 4. The loaders below are third-party code reading files from anywhere: whatever
    they raise is turned into that message (the exception stays chained for a debugger)."""
    from .families import family_named

    try:
        yield
    except LgptError:
        raise
    except Exception as exc:
        reason = _load_reason(exc)
        if shown_as:
            reason = reason.replace(shown_as, model.path)
        display = family_named(model.family).display
        raise EnvironmentMissing(f"model {model.path}: cannot be loaded as {display} by {loader}: {reason}.",
                                 hint=_load_hint(model)) from exc


def _load_reason(exc: BaseException) -> str:
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


def check_visual_tokens_supported(model: ModelRef, tokens: int | None) -> None:
    """--max-visual-tokens applies to the Qwen families, whose processors size the grid by a pixel budget."""
    from ..core.errors import UsageError
    from .families import QWEN_GRID, family_named

    if tokens is not None and model.family not in QWEN_GRID:
        raise UsageError(f"--max-visual-tokens: {family_named(model.family).display} does not support it; "
                         f"it applies to {', '.join(family_named(name).display for name in QWEN_GRID)}.")


@contextmanager
def _byaldi_visible_path(model: ModelRef) -> Iterator[str]:
    """byaldi only loads paths whose name contains "colpali" or "colqwen2"; link others under such a name."""
    if model.family in model.path.lower():
        yield model.path
        return
    with tempfile.TemporaryDirectory(prefix="lgpt-model-") as tmp:
        link = Path(tmp) / model.family
        os.symlink(model.path, link)
        yield str(link)


class ByaldiEncoder(PageEncoder):
    """A ColPali-family model loaded with byaldi's RAGMultiModalModel.from_pretrained."""

    def __init__(self, model: ModelRef, precision: Precision, batch_size: int, rag=None, compile: bool = False) -> None:
        """Load `model` through byaldi, or adopt `rag`, a RAGMultiModalModel already loaded from it.

        `compile` runs the vision tower and the language model through torch.compile: their
        many small element-wise kernels (norms, casts, activations) get fused, at the cost
        of a compilation on the first batch of each size. Errors then name no module.
        """
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self.model = model
        self.precision = precision
        self.batch_size = batch_size
        self.forward_calls = 0
        self._torch_dtype = precision.torch_dtype()
        self._device = torch.device(precision.device)
        self.net, self.processor = self._load(rag)
        self.net.eval()
        # byaldi hard-codes bfloat16 weights; the probe decides instead. The audit
        # casts what is off, tensor by tensor, and keeps a record of it.
        self.dtype_fixes: list[DtypeFix] = audit_checkpoint(model.path, precision.dtype)
        self.dtype_fixes += audit_live(self.net, self._torch_dtype, self._device, "load")
        self._audits_due = 1  # once more after the first batch: catches modules changed after loading
        self.patch_embeddings_as_products = patch_embeddings_as_products(self.net)
        # Qwen pages go to the model as one of their identical temporal frames (see _one_frame_patches)
        self.one_frame = bool(self.patch_embeddings_as_products) and _temporal_frames(self.processor) > 1
        self.compiled = compile
        if compile:
            self._compile()
        self._tracker = ModuleTracker(None if compile else self.net)
        self._page_text: dict | None = None
        # size -> (prompt, the processor's grid where it takes a page of that size as it is, else None)
        self._grid_texts: dict[tuple[int, int], tuple[dict, object]] = {}
        self.dim = int(getattr(self.net, "dim", 128))

    def _load(self, rag):
        """The network and its processor, through byaldi (or from `rag`, already loaded)."""
        try:
            from byaldi import RAGMultiModalModel
        except ImportError as exc:  # pragma: no cover - a broken install
            raise EnvironmentMissing(f"byaldi cannot be imported: {exc}") from exc
        if rag is None:
            byaldi_device = "cuda" if self.precision.device == "cuda:0" else self.precision.device
            with _byaldi_visible_path(self.model) as path, _loading(self.model, "byaldi", shown_as=path):
                rag = RAGMultiModalModel.from_pretrained(path, device=byaldi_device, verbose=0)
        return rag.model.model, rag.model.processor

    def _compile(self) -> None:
        if self.model.family == "colpali":
            inner = self.net.model.model
            inner.vision_tower.compile(dynamic=False)
            inner.language_model.compile(dynamic=False)
        else:
            self.net.compile(dynamic=False)

    @property
    def _grid_cell(self) -> int | None:
        """Pixels a side of one image token, where the processor sizes its grid by a pixel budget."""
        from ..core.sizes import grid_cell

        image_processor = self.processor.image_processor
        return grid_cell(_size_of(image_processor), getattr(image_processor, "patch_size", None),
                         getattr(image_processor, "merge_size", None))

    @property
    def max_visual_tokens(self) -> int | None:
        """Image tokens a page at most, where the processor sizes its grid by a pixel budget."""
        cell = self._grid_cell
        return None if cell is None else int(self.processor.image_processor.size["longest_edge"]) // (cell * cell)

    def limit_visual_tokens(self, tokens: int) -> None:
        """At most `tokens` image tokens a page (what colpali-engine's `max_num_visual_tokens` sets)."""
        check_visual_tokens_supported(self.model, tokens)
        cell = self._grid_cell
        size = self.processor.image_processor.size
        size["longest_edge"] = tokens * cell * cell
        size["shortest_edge"] = min(int(size["shortest_edge"]), tokens * cell * cell)

    @property
    def render_size(self) -> "RenderSize":
        """What pages are rendered at: (width, height) for a family with a fixed input size; for a
        dynamic one, the processor's pixel budget (each page then comes out at the size the
        processor would give it, and is not resized again), or its longest edge."""
        from ..core.sizes import render_size_for

        image_processor = self.processor.image_processor
        return render_size_for(_size_of(image_processor), getattr(image_processor, "patch_size", None),
                               getattr(image_processor, "merge_size", None))

    def _forward(self, batch) -> list[np.ndarray]:
        import torch

        inputs = {}
        for key, value in batch.items():
            if key == "labels":  # training targets: only cost a loss computation
                continue
            inputs[key] = [self._to_model(v) for v in value] if isinstance(value, list) else self._to_model(value)
        if self.model.family == "colpali":
            # ColPali reads the last hidden states only; without this the LM head turns every
            # token into vocabulary logits (about 1 TFLOP per page on the real model) for nothing.
            inputs["logits_to_keep"] = 1
        autocast = torch.autocast(
            device_type=self.precision.device_type, dtype=self._torch_dtype, enabled=self.precision.autocast
        )
        try:
            with torch.inference_mode(), autocast, self._tracker.running():
                out = self.net(**inputs)
        except RuntimeError as exc:
            kind = classify_failure(exc)
            if kind == "oom":
                raise DeviceOutOfMemory(" ".join(str(exc).split())[:300]) from exc
            if kind == "device":
                raise DeviceLost(
                    f"the device {self.precision.device} failed: {' '.join(str(exc).split())[:300]}",
                    hint="Check the GPU (nvidia-smi), then run build again: it carries on from the last commit.",
                ) from exc
            translated = translate_error(exc, self._tracker.innermost, self.precision.dtype)
            if translated is None:
                raise
            raise translated from exc
        self.forward_calls += 1
        if self._audits_due:
            self._audits_due -= 1
            self.dtype_fixes += audit_live(self.net, self._torch_dtype, self._device, "first-batch")
        mask = inputs["attention_mask"].bool().cpu()
        out = out.float().cpu()
        return [out[i][mask[i]].numpy() for i in range(out.shape[0])]

    def _to_model(self, value):
        """`value` on the model's device, floating point cast to its dtype (the model boundary)."""
        if value.is_floating_point():
            value = value.to(self._torch_dtype)
        return value.to(self._device)

    def prepare_page(self, image):
        """Per-page preprocessing that can run off the model thread (the build's render thread
        calls it): ColPali's pixel values; for the other families, the processor's whole output
        for the page (its text and pixels: their shape depends on the page's size)."""
        from .families import QWEN_GRID

        if self.model.family in QWEN_GRID:
            return self._prepare_grid_page(image)
        if self.model.family != "colpali":
            return self.processor.process_images([image])
        import torch

        rgb = image.convert("RGB")
        # A page rendered at the model's size needs no resize (the result is identical).
        resize = self.render_size is None or rgb.size != self.render_size
        pixels = self.processor.image_processor([rgb], return_tensors="pt", do_resize=resize)["pixel_values"]
        return torch.as_tensor(pixels[0])

    def _prepare_grid_page(self, image) -> dict:
        """A Qwen-family page, as process_images([image]) gives it (with one_frame, one of its
        identical temporal frames), at less than half its cost: the text half (the prompt with one
        image token per grid cell) depends only on the page's size and is tokenized once per size;
        the pixels go through the image processor alone, or _one_frame_patches where the processor
        takes the page as it is (process_images' split and pad of a single page is an unsqueeze)."""
        rgb = image.convert("RGB")
        known = self._grid_texts.get(rgb.size)
        if known is None:
            whole = self.processor.process_images([rgb])
            text = {k: v for k, v in whole.items() if k not in ("pixel_values", "image_grid_thw")}
            grid = whole["image_grid_thw"]
            patch = self.processor.image_processor.patch_size
            as_it_is = [patch * n for n in grid[0].tolist()] == [patch, rgb.size[1], rgb.size[0]]
            if len(self._grid_texts) >= GRID_TEXTS_KEPT:
                self._grid_texts.clear()
            known = self._grid_texts[rgb.size] = (text, grid if as_it_is else None)
        text, grid = known
        pixels, grid = self._grid_pixels(rgb, grid)
        # The boundary cast, done here on the render thread: a page's pixels are 7 MB in float32
        # (one frame), and the model thread would otherwise copy them twice more (batch, cast).
        pixels = pixels.to(self._torch_dtype).unsqueeze(0)
        return {**text, "pixel_values": pixels, "image_grid_thw": grid}

    def _grid_pixels(self, rgb: Image.Image, grid_as_it_is) -> tuple:
        """A Qwen-family page's pixel rows and grid (`grid_as_it_is`: the processor's grid for a page
        of this size, where it takes it as it is)."""
        image_processor = self.processor.image_processor
        if self.one_frame and grid_as_it_is is not None and image_processor.do_rescale and image_processor.do_normalize:
            return _one_frame_patches(rgb, image_processor), grid_as_it_is
        processed = image_processor(images=[rgb], return_tensors="pt")
        pixels, grid = processed["pixel_values"], processed["image_grid_thw"]
        if self.one_frame:
            pixels = first_frame(pixels, _temporal_frames(self.processor), image_processor.patch_size)
        return pixels, grid

    def process_pages(self, pages: list) -> dict:
        """ColPali's processor output for a batch of pages (images, or prepare_page's results).

        The text half (the fixed prompt with its image tokens) is the same for
        every page, so it is tokenized once and reused; only pixels are processed per page.
        tests/test_encoder.py checks this against processor.process_images.
        """
        import torch

        if self._page_text is None:
            blank = self.processor.process_images([Image.new("RGB", self.render_size or (448, 448), "white")])
            self._page_text = {k: v for k, v in blank.items() if k not in ("pixel_values", "labels")}
        pixels = [p if isinstance(p, torch.Tensor) else self.prepare_page(p) for p in pages]
        batch = {k: v.expand(len(pages), -1) for k, v in self._page_text.items()}
        batch["pixel_values"] = torch.stack(pixels)
        return batch

    def encode_pages(self, pages: Sequence) -> list[np.ndarray]:
        if self.model.family != "colpali":
            return self._encode_by_shape(pages)
        vectors: list[np.ndarray] = []
        for start in range(0, len(pages), self.batch_size):
            chunk = list(pages[start : start + self.batch_size])
            count = len(chunk)
            if self.compiled and count < self.batch_size:
                # a new shape would cost a new compilation (tens of seconds): pad instead
                chunk += [chunk[-1]] * (self.batch_size - count)
            batch = self.process_pages(chunk)
            vectors += [v.astype(np.float16) for v in self._forward(batch)[:count]]
        return vectors

    def _encode_by_shape(self, pages: Sequence) -> list[np.ndarray]:
        """Dynamic-resolution families: each page processed alone (or by prepare_page), then
        forward passes shared only by pages of the same shape (see _forward_by_shape)."""
        processed = [page if _is_processed(page) else self.prepare_page(page) for page in pages]
        return [vector.astype(np.float16) for vector in self._forward_by_shape(processed, self.batch_size)]

    def _forward_by_shape(self, processed: list, size: int) -> list[np.ndarray]:
        """Inputs of the same shape (the same number of tokens) share forward passes of up to
        `size`; others never do, so nothing is padded and no output depends on its batch neighbours."""
        import torch

        groups: dict[tuple, list[int]] = {}
        for number, inputs in enumerate(processed):
            shape = tuple((key, tuple(value.shape[1:])) for key, value in sorted(inputs.items()))
            groups.setdefault(shape, []).append(number)
        vectors: list[np.ndarray | None] = [None] * len(processed)
        for numbers in groups.values():
            for start in range(0, len(numbers), size):
                chunk = numbers[start : start + size]
                for number, vector in zip(chunk, self._forward(self._collate([processed[n] for n in chunk]))):
                    vectors[number] = vector
        return vectors  # type: ignore[return-value]

    def _collate(self, inputs: list[dict]) -> dict:
        """One forward pass's inputs from inputs of the same shape. A Qwen-family model unpads its
        pixels (one tensor per page) with a concatenation of its own, so they are passed as a list of
        pages: concatenated here as well, a batch's pixels (7 MB a page in float32) would be copied
        twice."""
        import torch
        from .families import QWEN_GRID

        batch = {key: torch.cat([one[key] for one in inputs]) for key in inputs[0] if key != "pixel_values"}
        if "pixel_values" in inputs[0]:
            pixels = [one["pixel_values"] for one in inputs]
            batch["pixel_values"] = [page for many in pixels for page in many] if self.model.family in QWEN_GRID else torch.cat(pixels)
        return batch

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Queries of the same token length share forward passes; queries of different lengths
        never do. Padding would make a query's vectors depend on its neighbours: with the sdpa
        attention of transformers 5, a padded PaliGemma query differs from the same query alone
        by up to 0.07 per component (tests/test_encoder.py), which reorders results."""
        from ..core.errors import UsageError

        texts = check_queries(texts)
        tokenised = [self.processor.process_queries([text]) for text in texts]
        for number, batch in enumerate(tokenised):
            length = int(batch["attention_mask"].shape[1])
            if length > MAX_QUERY_TOKENS + 16:  # the prompt and augmentation tokens come on top
                raise UsageError(f"query {number + 1} is {length} tokens long; queries are limited to {MAX_QUERY_TOKENS}.")
        return self._forward_by_shape(tokenised, max(self.batch_size, QUERY_BATCH))


def patch_embeddings_as_products(net) -> int:
    """Run the Qwen vision towers' patch embedding as the matrix product it is; how many were changed.

    Its Conv3d's kernel equals its stride and each input row is exactly one kernel's worth of
    pixels, so the convolution is a product of the flattened rows with the flattened kernel. oneDNN's
    Conv3d is slow at it: on the CPU, at ColQwen2.5's real width (1,280), 213 ms a page in float32
    against 59 ms for the product (73 against 22 ms in bfloat16), with the same result."""
    import types

    import torch

    changed = 0
    for module in net.modules():
        proj = getattr(module, "proj", None)
        if (isinstance(proj, torch.nn.Conv3d) and hasattr(module, "temporal_patch_size") and proj.kernel_size == proj.stride
                and proj.padding == (0, 0, 0) and proj.dilation == (1, 1, 1) and proj.groups == 1):
            module.forward = types.MethodType(_patch_embedding_product, module)
            changed += 1
    return changed


def _patch_embedding_product(self, hidden_states):
    """Qwen's PatchEmbed.forward, with its Conv3d as a product (see patch_embeddings_as_products);
    rows of one temporal frame (a page: see _one_frame_patches) go through the summed kernel."""
    import torch.nn.functional as F

    weight = self.proj.weight
    if self.temporal_patch_size > 1 and hidden_states.shape[-1] * self.temporal_patch_size == weight[0].numel():
        return _one_frame_product(self, hidden_states)
    rows = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
    return F.linear(rows, weight.reshape(weight.shape[0], -1), self.proj.bias)


def _one_frame_product(self, rows):
    """The patch embedding of rows whose temporal frames are all the same: W_1 x + W_2 x = (W_1 + W_2) x.
    The summed kernel is kept in float32 (a sum of two bfloat16 weights is exact there) and the
    product runs in float32, as the convolution accumulates; the result has the dtype the
    convolution's would have."""
    import torch
    import torch.nn.functional as F

    weight, bias = self.proj.weight, self.proj.bias
    key = (weight.data_ptr(), weight.dtype, weight.device)
    if getattr(self, "_one_frame_kernel", (None,))[0] != key:
        self._one_frame_kernel = (key, weight.detach().float().sum(dim=2).reshape(weight.shape[0], -1))
    device = rows.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    with torch.autocast(device, enabled=False):
        out = F.linear(rows.float(), self._one_frame_kernel[1], None if bias is None else bias.float())
    return out.to(dtype)


def _temporal_frames(processor) -> int:
    """How many temporal frames the processor makes of a still image (Qwen: 2, copies of the image)."""
    return int(getattr(processor.image_processor, "temporal_patch_size", 1) or 1)


def first_frame(pixels, frames: int, patch: int):
    """The first temporal frame of Qwen pixel rows (rows, channels x frames x patch x patch)."""
    return pixels.view(pixels.shape[0], -1, frames, patch * patch)[:, :, 0].reshape(pixels.shape[0], -1)


def _one_frame_patches(rgb: Image.Image, image_processor):
    """A page already at its grid's size as a Qwen image processor makes it, but with one temporal
    frame: it copies a still image into every frame (14 MB a page in float32, its permuted copy
    most of the processor's time), and the patch embedding then sums over identical frames
    (_one_frame_product). Bit for bit the processor's first frame: the same float32 subtraction
    and division, in its fused mean and std, on the same pixels (tests/test_families.py)."""
    import torch

    patch, merge = image_processor.patch_size, image_processor.merge_size
    pixels = torch.from_numpy(np.array(rgb))
    height, width, channels = pixels.shape
    grid_h, grid_w = height // patch, width // patch
    rows = (
        pixels.view(grid_h // merge, merge, patch, grid_w // merge, merge, patch, channels)
        .permute(0, 3, 1, 4, 6, 2, 5)  # the processor's order of rows, then channel, patch row, patch column
        .reshape(grid_h * grid_w, channels, patch * patch)
    )
    mean = torch.tensor(image_processor.image_mean) * (1.0 / image_processor.rescale_factor)
    std = torch.tensor(image_processor.image_std) * (1.0 / image_processor.rescale_factor)
    return rows.to(torch.float32).sub_(mean[:, None]).div_(std[:, None]).view(grid_h * grid_w, -1)


def _size_of(image_processor) -> dict:
    """An image processor's size settings as a plain dict (transformers keeps a SizeDict)."""
    return dict(getattr(image_processor, "size", None) or {})


def _is_processed(page) -> bool:
    """A page prepare_page has already run the processor on (not an image)."""
    return not isinstance(page, Image.Image)


class ColpaliEngineEncoder(ByaldiEncoder):
    """A family byaldi cannot load (ColQwen2.5, ColQwen3, ColQwen3.5, ColSmol, ColModernVBert,
    ColGemma3), through colpali-engine's own model and processor classes; the probe, autocast,
    dtype audit, boundary casts and error translation are the same."""

    def _load(self, rag):
        from .families import family_named

        family = family_named(self.model.family)
        try:
            import colpali_engine.models as engine
        except ImportError as exc:  # pragma: no cover - a broken install
            raise EnvironmentMissing(f"colpali-engine cannot be imported: {exc}") from exc
        with _loading(self.model, "colpali-engine"):  # a checkpoint that does not fit the class
            net = getattr(engine, family.architecture).from_pretrained(self.model.path, dtype=self._torch_dtype)
            processor = getattr(engine, family.processor).from_pretrained(self.model.path)
            return net.to(self._device), processor
