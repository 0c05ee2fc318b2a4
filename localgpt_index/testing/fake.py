"""A fake model family for tests and benchmarks: deterministic vectors from page bytes, no torch.

A "fake checkpoint" is a folder with a config.json of `model_type: "lgpt-fake"`; it is
resolved, fingerprinted and recorded like any model, so the CLI, the planner, the store
and the pipeline run exactly as with a real model, in milliseconds. Its config can also
inject the failures a real device has (out of memory above a batch size, a device lost
after some pages, a page that fails), so those paths are tested without a GPU.

The module is a plugin (its `lgpt_families` hook adds the family): tests and benchmarks name
it in $LGPT_PLUGINS (tests/conftest.py does, for every process the suite starts); production
code never imports it.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..models.device import Precision
from ..core.plugins import hookimpl
from ..models.families import Family
from ..models.failures import DeviceLost, DeviceOutOfMemory
from ..models.geometry import PatchLayout, square_grid
from ..models.loaders import Loader
from ..models.protocols import PageEncoder
from ..models.resolve import ModelRef

MODEL_TYPE = "lgpt-fake"


def write_fake_checkpoint(folder: Path, dim: int = 128, page_tokens: int = 16, render_size: tuple[int, int] = (64, 64),
                          colours: dict[str, tuple[int, int, int]] | None = None, hubs: Sequence[tuple[int, int, int]] = (),
                          seeing_patches: bool = False, **faults: object) -> Path:
    """Write a fake checkpoint. `colours` (word -> RGB) gives its vectors some sight: a page whose mean
    colour is near one holds that word's vector, and a query that names the word holds it three times, so the visual
    list finds such a page and ranks it first (otherwise it carries no signal). `hubs` (RGBs) plays a
    random-weight model's bias: a page of such a colour holds a vector every query holds too, so it is
    visual rank 1 whatever is asked. `seeing_patches`: its vectors are patches too (FakePatches: a square
    grid of `page_tokens` over the page, row by row), and each patch whose mean colour is near a colour
    word's holds that word's vector, so a query naming it matches there alone. `faults`: oom_above_batch, device_lost_after_pages,
    page_error_color ([r, g, b]: a page whose centre pixel has it fails in the forward pass, raising
    page_error_type: RuntimeError by default, TypeError to play a bug of ours), prepare_error_color and
    prepare_error_type (the same in prepare_page: ValueError by default, as a processor rejecting a page), seconds_per_page,
    seconds_per_query (per call of encode_queries), seconds_to_load,
    load_error (a message: loading raises OSError with it), load_noise (a line loading prints on stdout, from
    Python and at the file-descriptor level, as model libraries do). A faults.json beside config.json adds
    faults to a checkpoint without changing its fingerprint."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": MODEL_TYPE, "dim": dim, "page_tokens": page_tokens, "render_size": list(render_size), "faults": faults}
    if colours:
        config["colours"] = {word: list(rgb) for word, rgb in colours.items()}
    if hubs:
        config["hubs"] = [list(rgb) for rgb in hubs]
    if seeing_patches:
        config["seeing_patches"] = True
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


class FakeEncoder(PageEncoder):
    """Vectors that depend only on the page's pixels (and the query's text): same page, same vectors."""

    def __init__(self, model: ModelRef, batch_size: int | None = None) -> None:
        config = json.loads((Path(model.path) / "config.json").read_text())
        self.model = model
        self.dim = int(config.get("dim", 128))
        self.page_tokens = int(config.get("page_tokens", 16))
        self._render_size = tuple(config.get("render_size", (64, 64)))
        self.faults: dict = config.get("faults") or {}
        self.colours: dict[str, list[int]] = config.get("colours") or {}
        self.hubs: list[list[int]] = config.get("hubs") or []
        self.seeing_patches = bool(config.get("seeing_patches"))
        late = Path(model.path) / "faults.json"  # faults added after a build: not part of the fingerprint
        if late.exists():
            self.faults = {**self.faults, **json.loads(late.read_text())}
        self.batch_size = batch_size or 4
        self.precision = Precision("cpu", "float32", False, "fake encoder: deterministic vectors, no model")
        self.forward_calls = 0
        self.pages_encoded = 0
        self.dtype_fixes = []
        time.sleep(float(self.faults.get("seconds_to_load", 0)))
        if self.faults.get("load_noise"):
            print(self.faults["load_noise"], flush=True)
            os.write(1, f"{self.faults['load_noise']} (fd 1)\n".encode())
        if self.faults.get("load_error"):  # what a model library raises: not one of our errors
            raise OSError(str(self.faults["load_error"]))

    @property
    def render_size(self) -> tuple[int, int]:
        return self._render_size

    def prepare_page(self, image) -> bytes:
        rgb = image.convert("RGB")
        if rgb.size != self.render_size:
            rgb = rgb.resize(self.render_size)
        data = rgb.tobytes()
        if self._is_poison(data, "prepare_error_color"):
            raise _fault_type(self.faults.get("prepare_error_type", "ValueError"))("fake: the processor rejects this page")
        return data

    def encode_pages(self, pages: Sequence) -> list[np.ndarray]:
        limit = self.faults.get("oom_above_batch")
        if limit is not None and len(pages) > int(limit):
            raise DeviceOutOfMemory(f"fake: out of memory for a batch of {len(pages)} pages")
        lost_after = self.faults.get("device_lost_after_pages")
        if lost_after is not None and self.pages_encoded + len(pages) > int(lost_after):
            raise DeviceLost("the device cpu failed: fake: CUDA error: unspecified launch failure")
        vectors = []
        for page in pages:
            data = page if isinstance(page, bytes) else self.prepare_page(page)
            if self._is_poison(data, "page_error_color"):
                raise _fault_type(self.faults.get("page_error_type", "RuntimeError"))("fake: this page makes the forward pass fail")
            found = _unit_vectors(data, self.page_tokens, self.dim)
            seen = self._colour_of(data)
            if seen is not None:
                found[0] = _unit_vectors(seen.encode(), 1, self.dim)[0]
            if any(_near(data, rgb) for rgb in self.hubs):
                found[1] = _unit_vectors(HUB, 1, self.dim)[0]
            if self.seeing_patches:
                self._see_patches(data, found)
            vectors.append(found.astype(np.float16))
        time.sleep(float(self.faults.get("seconds_per_page", 0)) * len(pages))
        self.forward_calls += 1
        self.pages_encoded += len(pages)
        return vectors

    def _see_patches(self, data: bytes, found: np.ndarray) -> None:
        """Each patch (FakePatches' grid) near a colour word's RGB holds that word's vector."""
        width, height = self.render_size
        pixels = np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3)
        side = math.isqrt(self.page_tokens)
        for row in range(side * side):
            y, x = divmod(row, side)
            cell = pixels[y * height // side : (y + 1) * height // side, x * width // side : (x + 1) * width // side]
            word = next((word for word, rgb in self.colours.items() if _near(cell.tobytes(), rgb)), None)
            if word is not None:
                found[row] = _unit_vectors(word.encode(), 1, self.dim)[0]

    def _is_poison(self, data: bytes, fault: str) -> bool:
        color = self.faults.get(fault)
        if not color:
            return False
        width, height = self.render_size
        centre = ((height // 2) * width + width // 2) * 3
        return list(data[centre : centre + 3]) == list(color)

    def _colour_of(self, data: bytes) -> str | None:
        """The colour word whose RGB is within 40 of the page's mean colour, if any."""
        return next((word for word, rgb in self.colours.items() if _near(data, rgb)), None)

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        time.sleep(float(self.faults.get("seconds_per_query", 0)))
        self.forward_calls += 1
        found = []
        for text in texts:
            vectors = _unit_vectors(text.encode("utf-8", "surrogateescape"), min(4 + len(text.split()), 32), self.dim)
            named = _named_colours(self.colours, text)
            hub = [_unit_vectors(HUB, 1, self.dim)] if self.hubs else []
            seeing = [np.repeat(_unit_vectors(word.encode(), 1, self.dim), 3, axis=0) for word in named]  # what it mostly asks
            found.append(np.concatenate([vectors, *seeing, *hub]))
        return found


HUB = b"hub"  # the seed of the vector hub pages and every query share


def _named_colours(colours: dict, text: str) -> list[str]:
    """The colour words a query names, in the order of the checkpoint's colours (one vector each, three times)."""
    return [word for word in colours if word in re.findall(r"\w+", text.lower())]


class FakePatches:
    """The fake family's patch geometry: its `page_tokens` vectors a square grid over the page, row by
    row (none where page_tokens is not a square); a query's tokens are its words, then its colour words'."""

    needs_page_size = False

    def __init__(self, folder: Path) -> None:
        config = json.loads((Path(folder) / "config.json").read_text())
        self.page_tokens = int(config.get("page_tokens", 16))
        self.colours: dict = config.get("colours") or {}
        self.grid = PatchLayout(np.arange(self.page_tokens), square_grid(self.page_tokens))

    def layout(self, count: int, page_size: tuple[int, int] | None) -> PatchLayout | None:
        return self.grid if count == self.page_tokens else None

    def query_tokens(self, text: str, rows: int) -> list[str | None]:
        words = text.split()
        rows_of_text = min(4 + len(words), 32)  # as encode_queries makes them: its words, then padding
        names: list[str | None] = [*words[:rows_of_text], *[None] * (rows_of_text - min(len(words), rows_of_text))]
        for word in _named_colours(self.colours, text):
            names += [word] * 3
        names += [None] * (rows - len(names))  # the hub's vector: every query's, nobody's word
        return names[:rows]


def fake_patches(family: Family, model: ModelRef, render_size: object) -> FakePatches | None:
    """The fake family's `patches`: FakePatches, for a checkpoint whose page_tokens make a square grid."""
    try:
        return FakePatches(Path(model.path))
    except ValueError:
        return None


def _near(data: bytes, rgb: Sequence[int]) -> bool:
    """The page's mean colour is within 40 of `rgb`."""
    mean = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3).mean(axis=0)
    return float(np.linalg.norm(mean - np.array(rgb))) < 40


def _fault_type(name: str) -> type[Exception]:
    """The exception class a configured fault raises (a built-in, by name)."""
    kinds = {kind.__name__: kind for kind in (ValueError, RuntimeError, OSError, TypeError, AttributeError, AssertionError)}
    return kinds[name]


def _unit_vectors(data: bytes, rows: int, dim: int) -> np.ndarray:
    import xxhash

    rng = np.random.default_rng(xxhash.xxh3_64_intdigest(data))
    vectors = rng.standard_normal((rows, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def fake_render_size(folder: Path) -> tuple[int, int] | None:
    """The render size a fake checkpoint's config asks for, read before the encoder loads."""
    try:
        config = json.loads((Path(folder) / "config.json").read_bytes()[: 1 << 20])
    except (OSError, ValueError):
        config = {}
    size = (config if isinstance(config, dict) else {}).get("render_size", [64, 64])
    return tuple(size) if isinstance(size, list) and len(size) == 2 and all(isinstance(n, int) for n in size) else None


FAMILY = Family("fake", "fake (tests)", (MODEL_TYPE,), "", "", Loader("fake"), False, config_dim=True, torch=False,
                encoder=FakeEncoder, render_size=fake_render_size, patches=fake_patches)


@hookimpl
def lgpt_families() -> tuple[Family, ...]:
    return (FAMILY,)
