"""How a family's pages become forward passes.

ColPali (a fixed-size image, so every page has the
same prompt) stacks pages into one batch; the dynamic-resolution families process each page alone
and share forward passes only between pages of the same shape; the Qwen families' pages are
prepared as one temporal frame, their prompt tokenized once per page size."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from .qwen_frames import first_frame, one_frame_patches, temporal_frames
from .render_size import ProcessorGeometry
from .runner import NetRunner

GRID_TEXTS_KEPT = 256  # page sizes whose tokenized text a Qwen-family encoder keeps
QUERY_BATCH = 32  # queries of one length per forward pass


def forward_by_shape(runner: NetRunner, processed: list, size: int, pixels_as_list: bool = False) -> list[np.ndarray]:
    """Inputs of the same shape (the same number of tokens) share forward passes of up to
    `size`; others never do, so nothing is padded and no output depends on its batch neighbours."""
    groups: dict[tuple, list[int]] = {}
    for number, inputs in enumerate(processed):
        shape = tuple((key, tuple(value.shape[1:])) for key, value in sorted(inputs.items()))
        groups.setdefault(shape, []).append(number)
    vectors: list[np.ndarray | None] = [None] * len(processed)
    for numbers in groups.values():
        for start in range(0, len(numbers), size):
            chunk = numbers[start : start + size]
            for number, vector in zip(chunk, runner(collate([processed[n] for n in chunk], pixels_as_list))):
                vectors[number] = vector
    return vectors  # type: ignore[return-value]  # every slot is filled: each number is in one group


def collate(inputs: list[dict], pixels_as_list: bool = False) -> dict:
    """One forward pass's inputs from inputs of the same shape. A Qwen-family model unpads its
    pixels (one tensor per page) with a concatenation of its own, so they are passed as a list of
    pages (`pixels_as_list`): concatenated here as well, a batch's pixels (7 MB a page in float32)
    would be copied twice."""
    import torch

    if len(inputs) == 1 and not pixels_as_list:  # one input (a query, mostly): its tensors as they are
        return dict(inputs[0])
    batch: dict[str, Any] = {key: torch.cat([one[key] for one in inputs]) for key in inputs[0] if key != "pixel_values"}
    if "pixel_values" in inputs[0]:
        pixels = [one["pixel_values"] for one in inputs]
        batch["pixel_values"] = [page for many in pixels for page in many] if pixels_as_list else torch.cat(pixels)
    return batch


class SharedPromptPages:
    """ColPali's pages: a fixed-size image, so the text half of every page's input (the prompt with
    its image tokens) is the same; it is tokenized once, and pages are stacked into batches."""

    def __init__(self, processor: Any, runner: NetRunner, geometry: ProcessorGeometry, compiled: bool = False) -> None:
        self.processor = processor
        self.runner = runner
        self.geometry = geometry
        self.compiled = compiled
        self._page_text: dict | None = None

    def prepare(self, image: Image.Image) -> Any:
        """The page's pixel values (may run off the model thread)."""
        import torch

        rgb = image.convert("RGB")
        # A page rendered at the model's size needs no resize (the result is identical).
        render_size = self.geometry.render_size
        resize = render_size is None or rgb.size != render_size
        pixels = self.processor.image_processor([rgb], return_tensors="pt", do_resize=resize)["pixel_values"]
        return torch.as_tensor(pixels[0])

    def process(self, pages: list) -> dict:
        """The processor's output for a batch of pages (images, or prepare's results).
        tests/test_encoder.py checks this against processor.process_images."""
        import torch

        if self._page_text is None:
            size = self.geometry.render_size  # (width, height) for ColPali's fixed-size image
            blank = self.processor.process_images([Image.new("RGB", size if isinstance(size, tuple) else (448, 448), "white")])
            self._page_text = {k: v for k, v in blank.items() if k not in ("pixel_values", "labels")}
        pixels = [p if isinstance(p, torch.Tensor) else self.prepare(p) for p in pages]
        batch = {k: v.expand(len(pages), -1) for k, v in self._page_text.items()}
        batch["pixel_values"] = torch.stack(pixels)
        return batch

    def encode(self, pages: Sequence, batch_size: int) -> list[np.ndarray]:
        """float16 vectors per page, in forward passes of `batch_size` pages."""
        vectors: list[np.ndarray] = []
        for start in range(0, len(pages), batch_size):
            chunk = list(pages[start : start + batch_size])
            count = len(chunk)
            if self.compiled and count < batch_size:
                # a new shape would cost a new compilation (tens of seconds): pad instead
                chunk += [chunk[-1]] * (batch_size - count)
            vectors += [v.astype(np.float16) for v in self.runner(self.process(chunk))[:count]]
        return vectors


class ShapedPages:
    """The dynamic-resolution families' pages: each processed alone (`prepare`: the processor's
    whole output for the page, its text and pixels, whose shape depends on the page's size), then
    forward passes shared only by pages of the same shape."""

    def __init__(self, processor: Any, runner: NetRunner, prepare: Callable[[Image.Image], dict] | None = None,
                 pixels_as_list: bool = False) -> None:
        self.processor = processor
        self.runner = runner
        self.prepare = prepare or self._process
        self.pixels_as_list = pixels_as_list

    def _process(self, image: Image.Image) -> dict:
        return self.processor.process_images([image])

    def encode(self, pages: Sequence, batch_size: int) -> list[np.ndarray]:
        """float16 vectors per page (an image, or prepare's result)."""
        processed = [page if not isinstance(page, Image.Image) else self.prepare(page) for page in pages]
        return [v.astype(np.float16) for v in forward_by_shape(self.runner, processed, batch_size, self.pixels_as_list)]


class GridPages:
    """A Qwen-family page, as process_images([image]) gives it (with one_frame, one of its identical
    temporal frames), at less than half its cost: the text half (the prompt with one image token per
    grid cell) depends only on the page's size and is tokenized once per size; the pixels go through
    the image processor alone, or one_frame_patches where the processor takes the page as it is
    (process_images' split and pad of a single page is an unsqueeze)."""

    def __init__(self, processor: Any, dtype: Any, one_frame: bool) -> None:
        self.processor = processor
        self.dtype = dtype
        self.one_frame = one_frame
        # size -> (prompt, the processor's grid where it takes a page of that size as it is, else None)
        self._texts: dict[tuple[int, int], tuple[dict, object]] = {}

    def __call__(self, image: Image.Image) -> dict:
        rgb = image.convert("RGB")
        known = self._texts.get(rgb.size)
        if known is None:
            whole = self.processor.process_images([rgb])
            text = {k: v for k, v in whole.items() if k not in ("pixel_values", "image_grid_thw")}
            grid = whole["image_grid_thw"]
            patch = self.processor.image_processor.patch_size
            as_it_is = [patch * n for n in grid[0].tolist()] == [patch, rgb.size[1], rgb.size[0]]
            if len(self._texts) >= GRID_TEXTS_KEPT:
                self._texts.clear()
            known = self._texts[rgb.size] = (text, grid if as_it_is else None)
        text, grid = known
        pixels, grid = self._pixels(rgb, grid)
        # The boundary cast, done here on the render thread: a page's pixels are 7 MB in float32
        # (one frame), and the model thread would otherwise copy them twice more (batch, cast).
        pixels = pixels.to(self.dtype).unsqueeze(0)
        return {**text, "pixel_values": pixels, "image_grid_thw": grid}

    def _pixels(self, rgb: Image.Image, grid_as_it_is: Any) -> tuple:
        """A page's pixel rows and grid (`grid_as_it_is`: the processor's grid for a page of this
        size, where it takes it as it is)."""
        image_processor = self.processor.image_processor
        if self.one_frame and grid_as_it_is is not None and image_processor.do_rescale and image_processor.do_normalize:
            return one_frame_patches(rgb, image_processor), grid_as_it_is
        processed = image_processor(images=[rgb], return_tensors="pt")
        pixels, grid = processed["pixel_values"], processed["image_grid_thw"]
        if self.one_frame:
            pixels = first_frame(pixels, temporal_frames(self.processor), image_processor.patch_size)
        return pixels, grid
