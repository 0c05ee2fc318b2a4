"""A third-party lgpt-index plugin, as a package outside localgpt_index would write one, for
tests/test_plugins.py: its entry point in the `lgpt_index` group (lgpt_test_plugin-0.dist-info
beside it) makes an installed lgpt-index load it. It adds

- a model family, "lgpt_plugin" (checkpoints of model_type "lgpt-plugin", encoded by the fake
  encoder of localgpt_index.testing: no torch);
- an artifact, "plugin_pages": per generation, its page count;
- a store scheme, mem://NAME: a scratch index for this process, kept by name in a temporary
  folder of the process (a local index underneath; its location reads mem://NAME).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from localgpt_index import open_store
from localgpt_index.core.plugins import hookimpl
from localgpt_index.index.artifacts import Artifact, BlobSink, BlobSource, CommitContext
from localgpt_index.index.format.manifest import ArtifactRef, Manifest, PartRef, Segment
from localgpt_index.index.open import StoreRequest, StoreScheme
from localgpt_index.index.protocols import Store
from localgpt_index.models.families import Family
from localgpt_index.models.loaders import Loader
from localgpt_index.testing.fake import FakeEncoder, fake_render_size

MODEL_TYPE = "lgpt-plugin"
ARTIFACT = "plugin_pages"


def write_checkpoint(folder: Path, dim: int = 128) -> Path:
    """A checkpoint of this plugin's family."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": MODEL_TYPE, "dim": dim, "page_tokens": 8, "render_size": [64, 64]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class PageCount:
    """Per generation, how many pages it holds (no parts)."""

    name = ARTIFACT
    version = 1

    def part_writer(self, dim: int) -> None:
        return None

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef:
        pages = sum(doc.pages for doc in ctx.documents)
        blob = sink.put(json.dumps({"generation": ctx.generation, "pages": pages}).encode(), "json")
        return ArtifactRef(version=1, blobs=[blob], meta={"pages": pages})

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        pages = json.loads(source.read(ref.blobs[0]))["pages"]
        return [] if pages == ref.meta["pages"] else [f"{pages} pages, its entry says {ref.meta['pages']}"]

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> dict | None:
        return json.loads(source.read(ref.blobs[0])) if ref is not None else None


_folders: dict[str, Path] = {}  # mem://NAME -> its folder, for this process


def _folder(name: str) -> Path:
    if name not in _folders:
        _folders[name] = Path(tempfile.mkdtemp(prefix="lgpt-mem-"))
        atexit.register(shutil.rmtree, _folders[name], True)
    return _folders[name]


class MemStore:
    """mem://NAME: the Store protocol, over a local index in this process's folder for NAME."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.inner: Store = open_store("local", index_dir=_folder(url.removeprefix("mem://")), name="index")

    @property
    def location(self) -> str:
        return self.url

    @property
    def local_folders(self) -> tuple[Path, ...]:
        return self.inner.local_folders

    def exists(self) -> bool:
        return self.inner.exists()

    def head_key(self) -> tuple:
        return self.inner.head_key()

    def read_manifest(self) -> Manifest | None:
        return self.inner.read_manifest()

    def open(self) -> Manifest:
        return self.inner.open()

    def open_view(self) -> Any:
        return self.inner.open_view()

    def reopened(self) -> MemStore:
        return MemStore(self.url)

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Any]:
        return self.inner.begin(wait_s, rebuild)

    def verify(self) -> list[str]:
        return self.inner.verify()

    def verify_notes(self) -> list[str]:
        return self.inner.verify_notes()

    def pdf_file(self, rel: str) -> Path:
        return self.inner.pdf_file(rel)

    def size_bytes(self, manifest: Manifest) -> int:
        return self.inner.size_bytes(manifest)

    def writable(self) -> MemStore:
        return self

    def close(self) -> None:
        self.inner.close()


def _open_mem(request: StoreRequest) -> MemStore:
    return MemStore(request.url)


FAMILY = Family("lgpt_plugin", "a plugin's family (tests)", (MODEL_TYPE,), "", "", Loader("lgpt-plugin"), False,
                config_dim=True, torch=False, encoder=FakeEncoder, render_size=fake_render_size)


@hookimpl
def lgpt_families() -> tuple[Family, ...]:
    return (FAMILY,)


@hookimpl
def lgpt_artifacts() -> tuple[Artifact, ...]:
    return (PageCount(),)


@hookimpl
def lgpt_store_schemes() -> tuple[StoreScheme, ...]:
    return (StoreScheme("mem", _open_mem, "mem://NAME"),)
