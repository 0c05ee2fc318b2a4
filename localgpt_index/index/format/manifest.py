"""The manifest of one index generation: one schema, validated on every read, with migrations.

The index folder is input like any other: a manifest that was edited by hand or by an
attacker must fail here, with a message, before any name in it is opened. Names of
files inside the index are constrained by patterns (no separators, no `..`), numbers
by ranges, and the cross-references (documents -> segments -> rows) are checked.

`migrate` turns an older manifest (as parsed JSON) into the current format; each
step is one function, tested on a real file of that format.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema, field_validator, model_validator

from ..._version import __version__
from ...core.errors import IndexProblem, Stage
from ...core.filestat import Count, FileStat
from ...core.types import Kind

FORMAT: Final = "lgpt-index/5"
READABLE_FORMATS = ("lgpt-index/1", "lgpt-index/2", "lgpt-index/3", "lgpt-index/4", FORMAT)
# Bytes of vectors per block checksum. A block is checked when first read (index/format/checksums.py), so a
# block is what reading one page costs beyond the page: 64 KiB blocks add at most 1.5x to a
# 258 KiB page (1,030 x 128 float16) and cost 8 MB of manifest for 26 GB of vectors (parsed
# in about 70 ms). Segments written before lazy checks have 64 MiB blocks; both are read.
CHECK_BLOCK = 64 << 10
LEGACY_CHECK_BLOCK = 64 << 20

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
SegmentId = Annotated[str, Field(pattern=r"^seg-[0-9A-Za-z-]{1,80}$")]
PdfName = Annotated[str, Field(pattern=r"^pdf/[0-9a-f]{64}\.pdf$")]
ManifestName = Annotated[str, Field(pattern=r"^gen-[0-9]{8,12}\.json$")]
Text = Annotated[str, Field(max_length=4096)]


def _os_text(value: Any) -> str:
    """A string as the OS gave it: file names that are not UTF-8 carry surrogate escapes, which
    pydantic's own str type refuses."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if len(value) > 8192:
        raise ValueError("longer than 8192 characters")
    return value


# a path as found on disk (bytes that are not UTF-8 kept as surrogate escapes)
OsPath = Annotated[str, PlainValidator(_os_text), WithJsonSchema({"type": "string", "maxLength": 8192})]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Span(_Strict):
    """Consecutive pages of a document stored in one segment: rows first .. first+pages-1 of its page table."""

    segment: SegmentId
    first: Count
    pages: Annotated[int, Field(ge=1, le=1 << 32)]


class Document(_Strict):
    path: OsPath  # absolute source path; bytes that are not UTF-8 kept as surrogate escapes
    sha256: Sha256
    size: Count
    stat: FileStat | None = None  # None: unknown, the next build hashes the file
    kind: Kind
    pages: Annotated[int, Field(ge=1, le=1 << 32)]  # pages stored (for a document in progress: so far)
    spans: Annotated[list[Span], Field(min_length=1)]
    converter: Annotated[str, Field(max_length=64)] | None = None
    pdf: PdfName | None = None  # the PDF a converted document was rendered from, named by its own sha256
    pdf_sha256: Sha256 | None = None
    metadata: dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=4096)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _pages_match_spans(self) -> "Document":
        if sum(span.pages for span in self.spans) != self.pages:
            raise ValueError(f"{self.pages} pages but its spans hold {sum(s.pages for s in self.spans)}")
        if (self.pdf is None) != (self.pdf_sha256 is None):
            raise ValueError("pdf and pdf_sha256 go together")
        return self

    def locate(self, page: int) -> tuple[str, int]:
        """Where its page `page` (1-based) is stored: (segment id, row of that segment); ValueError: no such page."""
        before = 0
        for span in self.spans:
            if 1 <= page <= before + span.pages:
                return span.segment, span.first + page - 1 - before
            before += span.pages
        raise ValueError(f"{self.path} has no page {page}")


class Checksum(_Strict):
    """One hash per block of the vectors file, each checked when the block is first read."""

    algorithm: Literal["xxh3_64", "sum64"]  # sum64: format 1's wrapping word sum, upgraded on the next write
    block_size: Annotated[int, Field(ge=1 << 12, le=1 << 34)] = LEGACY_CHECK_BLOCK  # always written; new segments: CHECK_BLOCK
    blocks: list[Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]]


BlobName = Annotated[str, Field(pattern=r"^[0-9a-f]{64}\.[a-z0-9]{1,12}$")]  # <sha256>.<ext>: named by its content
ArtifactName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
Meta = dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=4096)] | int | float | bool | None]


class BlobRef(_Strict):
    """One stored blob of a derived artifact (index/artifacts.py): named, sized and hashed by its content."""

    name: BlobName
    bytes: Count
    sha256: Sha256


class PartRef(_Strict):
    """A segment's part of an artifact (written beside its vectors), in `Segment.parts[name]`."""

    version: Annotated[int, Field(ge=1, le=1 << 16)]
    blobs: list[BlobRef] = Field(default_factory=list)
    meta: Meta = Field(default_factory=dict)


class ArtifactRef(PartRef):
    """A generation's artifact (built at commit), in `Manifest.artifacts[name]`."""


class Segment(_Strict):
    """Pages written together. In a local index a pair of files (vectors, offsets); in a Qdrant
    collection a set of points, one per page, whose ids derive from the segment id and the row."""

    id: SegmentId
    pages: Annotated[int, Field(ge=1, le=1 << 32)]
    rows: Annotated[int, Field(ge=1, le=1 << 40)]
    dim: Annotated[int, Field(ge=1, le=8192)]
    storage: Literal["file", "qdrant"] = "file"
    vectors_bytes: Annotated[int, Field(ge=1, le=1 << 44)] | None = None
    vectors_sha256: Sha256 | None = None
    offsets_sha256: Sha256 | None = None
    checksum: Checksum | None = None
    parts: dict[ArtifactName, PartRef] = Field(default_factory=dict)  # left out of the JSON when empty

    @model_validator(mode="after")
    def _sizes_agree(self) -> "Segment":
        if self.rows < self.pages:
            raise ValueError(f"{self.pages} pages in {self.rows} rows")
        size, check = self.vectors_bytes, self.checksum
        files = (size, self.vectors_sha256, self.offsets_sha256, check)
        if self.storage == "qdrant":
            if any(f is not None for f in files):
                raise ValueError("a Qdrant segment has no files")
            return self
        if size is None or check is None or any(f is None for f in files):
            raise ValueError("a segment of files needs vectors_bytes, vectors_sha256, offsets_sha256 and checksum")
        payload = self.rows * self.dim * 2
        if not payload < size <= payload + 4096:
            raise ValueError(f"{size} bytes cannot hold {self.rows} x {self.dim} float16 values")
        if len(check.blocks) != max(1, math.ceil(size / check.block_size)):
            raise ValueError("one checksum per block expected")
        return self


class ModelInfo(_Strict):
    id: OsPath
    path: OsPath | None = None
    family: Annotated[str, Field(max_length=64)]
    revision: Annotated[str, Field(max_length=256)] | None = None
    fingerprint: Text
    # how the fingerprint was computed (models.resolve.FINGERPRINT_SCHEME); 1: format 2's, upgraded on the next write
    fingerprint_scheme: Literal[1, 2] = 2
    dim: Annotated[int, Field(ge=1, le=8192)] | None = None


class Settings(_Strict):
    device: Annotated[str, Field(max_length=64)] | None = None
    dtype: Literal["bfloat16", "float16", "float32"] | None = None
    autocast: bool | None = None
    batch_size: Annotated[int, Field(ge=1, le=1 << 16)] | None = None
    # [width, height], or [long side] for a dynamic-resolution family
    render_size: Annotated[list[Annotated[int, Field(ge=1, le=1 << 16)]], Field(min_length=1, max_length=2)] | None = None
    dim: Annotated[int, Field(ge=1, le=8192)] | None = None
    vector_dtype: Literal["float16"] = "float16"
    pool_factor: Annotated[int, Field(ge=1, le=64)] = 1
    max_visual_tokens: Annotated[int, Field(ge=1, le=1 << 20)] | None = None  # dynamic-resolution families
    # how the pages' text was read (--text, --ocr, --ocr-lang); None: not recorded (an index from before they were, or
    # for the OCR mode and language, --text never): the next build takes what it is given (indexing/options.py BuildSettings)
    text: Literal["auto", "never"] | None = None
    ocr: Literal["auto", "always", "never"] | None = None
    ocr_lang: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # the languages the text index stems in (--language: ISO 639-1 codes joined by +); None: each document's detected.
    # Written only when set, so an index without it reads as before; another value rebuilds the text index only
    language: Annotated[str, Field(min_length=2, max_length=256)] | None = None
    imported_from: Text | None = None


class Failure(_Strict):
    path: OsPath
    stage: Stage
    reason: Annotated[str, Field(max_length=2000)]
    environment: bool = False  # a missing converter or tool, not the document's fault


class Manifest(_Strict):
    """One generation of an index: what it holds and where every page's vectors are."""

    format: Literal["lgpt-index/5"] = FORMAT
    generation: Annotated[int, Field(ge=1, le=10**12 - 1)]
    created: float = Field(default_factory=time.time)
    tool_version: Annotated[str, Field(max_length=64)] = __version__
    model: ModelInfo
    settings: Settings
    segments: dict[str, Segment] = Field(default_factory=dict)
    documents: list[Document] = Field(default_factory=list)
    in_progress: list[Document] = Field(default_factory=list)  # long documents whose first pages are committed
    failures: list[Failure] = Field(default_factory=list)
    artifacts: dict[ArtifactName, ArtifactRef] = Field(default_factory=dict)  # left out of the JSON when empty

    @field_validator("created")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("not a finite time")
        return value

    @model_validator(mode="after")
    def _references_resolve(self) -> "Manifest":
        self.check_references()
        return self

    def check_references(self) -> None:
        """Segments listed under their own id, spans inside their segment, no path twice (ValueError)."""
        for key, segment in self.segments.items():
            if key != segment.id:
                raise ValueError(f"segment {key!r} is listed under another id ({segment.id!r})")
        for where, docs in (("documents", self.documents), ("in_progress", self.in_progress)):
            paths: set[str] = set()  # a path may be in both: its old content answers while the new one is embedded
            for number, doc in enumerate(docs):
                if doc.path in paths:
                    raise ValueError(f"{where}[{number}]: {doc.path!r} is listed twice")
                paths.add(doc.path)
                for span in doc.spans:
                    holder = self.segments.get(span.segment)
                    if holder is None:
                        raise ValueError(f"{where}[{number}]: segment {span.segment!r} is not in the manifest")
                    if span.first + span.pages > holder.pages:
                        raise ValueError(
                            f"{where}[{number}]: pages {span.first}..{span.first + span.pages - 1} "
                            f"lie outside segment {span.segment} ({holder.pages} pages)"
                        )

    @property
    def page_count(self) -> int:
        return sum(d.pages for d in self.documents)

    def to_json(self) -> bytes:
        # ensure_ascii keeps file names that are not UTF-8 (surrogate escapes) representable
        data = self.model_dump(mode="python")
        if not data["artifacts"]:  # no artifact: the bytes of a manifest from before artifacts existed
            del data["artifacts"]
        if data["settings"]["language"] is None:  # none told: the bytes of a manifest from before --language
            del data["settings"]["language"]
        for segment in data["segments"].values():
            if not segment["parts"]:
                del segment["parts"]
        return json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "Manifest":
        """Parse, migrate and validate a manifest; every problem is an IndexProblem naming `where`."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise IndexProblem(f"{where}: the manifest is not valid JSON ({_short(exc)}).", hint=REBUILD_HINT) from None
        return cls.from_data(migrate(data, where), where)

    @classmethod
    def from_data(cls, data: Any, where: str) -> "Manifest":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise IndexProblem(f"{where}: the manifest is malformed: {describe(exc)}.", hint=REBUILD_HINT) from None


class Head(_Strict):
    """The pointer to the current generation; replaced atomically by every commit."""

    format: Literal["lgpt-index/1", "lgpt-index/2", "lgpt-index/3", "lgpt-index/4", "lgpt-index/5"]
    generation: Annotated[int, Field(ge=1, le=10**12 - 1)]
    manifest: ManifestName
    sha256: Sha256


REBUILD_HINT = "Rebuild it (lgpt-index build DOCS --rebuild), or restore the index folder from a backup."


def describe(exc: ValidationError, limit: int = 3) -> str:
    """The first few problems of a validation error, with where they are."""
    parts = []
    for error in exc.errors()[:limit]:
        location = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{location}: {error['msg']}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


# Migrations: one function per format step, applied in order to the parsed JSON.


def migrate(data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise IndexProblem(f"{where}: the manifest is malformed: not a JSON object.", hint=REBUILD_HINT)
    found = data.get("format")
    if found == FORMAT:
        return data
    if found == "lgpt-index/1":
        return _migrate_4_to_5(_migrate_3_to_4(_migrate_2_to_3(_migrate_1_to_2(data, where), where)))
    if found == "lgpt-index/2":
        return _migrate_4_to_5(_migrate_3_to_4(_migrate_2_to_3(data, where)))
    if found == "lgpt-index/3":
        return _migrate_4_to_5(_migrate_3_to_4(data))
    if found == "lgpt-index/4":
        return _migrate_4_to_5(data)
    raise IndexProblem(
        f"{where}: unknown index format {found!r} (this lgpt-index {__version__} reads {', '.join(READABLE_FORMATS)}).",
        hint="A newer lgpt-index wrote it: upgrade lgpt-index (pip install -U lgpt-index), or rebuild the index.",
    )


def _migrate_1_to_2(data: dict, where: str) -> dict:
    """Format 1 -> 2: documents list spans (a long document may span segments), carry a stat
    cache (unknown after migration: the next build hashes each file once), and block
    checksums name their algorithm (format 1's word sums stay valid until the next write
    replaces them with XXH3). A document's stored PDF keeps its name."""
    try:
        documents = []
        for doc in data["documents"]:
            doc = dict(doc)
            doc.pop("mtime", None)
            doc["stat"] = None
            doc["spans"] = [{"segment": doc.pop("segment"), "first": doc.pop("first_page"), "pages": doc["pages"]}]
            documents.append(doc)
        segments = {}
        for key, seg in data["segments"].items():
            seg = dict(seg)
            sums = seg.pop("vectors_sum64", None) or []
            seg["checksum"] = {"algorithm": "sum64", "block_size": LEGACY_CHECK_BLOCK, "blocks": [f"{int(s):016x}" for s in sums]}
            segments[key] = seg
        settings = {k: v for k, v in dict(data.get("settings") or {}).items() if k in Settings.model_fields}
        return {
            **data,
            "format": "lgpt-index/2",
            "documents": documents,
            "segments": segments,
            "settings": settings,
            "in_progress": [],
            "failures": [{k: f.get(k) for k in ("path", "stage", "reason", "environment") if k in f} for f in data.get("failures", [])],
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise IndexProblem(f"{where}: a format 1 manifest that cannot be read ({_short(exc)}).", hint=REBUILD_HINT) from None


def _migrate_2_to_3(data: dict, where: str) -> dict:
    """Format 2 -> 3: the model's fingerprint names its scheme. Format 2 fingerprinted a local
    model by its config and the first MiB of each weight file (scheme 1); that value is kept and
    compared the same way (models.resolve.same_model) until the next write records the whole-weights one."""
    model = data.get("model")
    if not isinstance(model, dict):
        raise IndexProblem(f"{where}: a format 2 manifest that cannot be read (no model).", hint=REBUILD_HINT)
    return {**data, "format": "lgpt-index/3", "model": {**model, "fingerprint_scheme": 1}}


def _migrate_3_to_4(data: dict) -> dict:
    """Format 3 -> 4: generations may name per-generation artifacts and segment parts (page text,
    the full-text index); a format 3 generation has none (it answers visual queries only until a
    `build --rebuild` writes its text). Nothing else changes."""
    return {**data, "format": "lgpt-index/4"}


def _migrate_4_to_5(data: dict) -> dict:
    """Format 4 -> 5: the settings record how the pages' text was read (text, ocr, ocr_lang), which an older
    lgpt-index refuses (extra="forbid"); a format 4 generation records none, and its next build takes what it is
    given (or the defaults) and records it. Nothing else changes."""
    return {**data, "format": FORMAT}


def json_schema() -> dict:
    """The published JSON schema of the manifest (localgpt_index/schemas/manifest.schema.json)."""
    schema = Manifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "lgpt-index manifest (format 5)"
    return schema


if __name__ == "__main__":  # python -m localgpt_index.index.format.manifest: write the published schema
    from pathlib import Path

    target = Path(__file__).resolve().parents[2] / "schemas" / "manifest.schema.json"
    target.write_text(json.dumps(json_schema(), indent=2) + "\n")
    print(target)
