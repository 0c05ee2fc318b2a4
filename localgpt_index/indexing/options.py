"""What a build is asked to do (BuildOptions) and what it reports (BuildReport), and its stage clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..core.errors import ExitCode
from ..core.metadata import Rules
from ..index.format.manifest import Failure
from ..ingest.ocr import DEFAULT_OCR_LANG, DEFAULT_OCR_TIMEOUT_S, Tesseract
from ..ingest.pagetext import TextSettings, TextTally, default_ocr_workers, ocr_mode, text_mode
from ..ingest.render import DEFAULT_RENDER_TIMEOUT_S

if TYPE_CHECKING:
    from ..models.loading import EncoderOptions

@dataclass
class BuildOptions:
    model: str | None = None  # None: the model the index was built with, else the default
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None
    rebuild: bool = False
    rehash: bool = False  # read every file, not only those whose stat changed
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    convert_timeout_s: float = 120.0
    render_timeout_s: float = DEFAULT_RENDER_TIMEOUT_S
    convert_workers: int = 2  # conversions running side by side, ahead of the model
    compile: bool = False  # torch.compile the model: faster on a GPU after a one-time compilation
    strict: bool = False  # any failed document: commit nothing
    pool_factor: int = 1  # >1: hierarchical token pooling, about 1/pool_factor of the vectors (lossy)
    metadata_rules: Rules | None = None  # from --metadata; None keeps what the index has
    commit_every_pages: int | None = None  # None: 1000, spaced out when commits get slow (huge catalogs)
    commit_every_s: float = 600.0
    wait_s: float = 0.0
    ray: str | None = None  # a Ray cluster (auto, an address, or local) for conversion, rendering and encoding
    ray_actors: int | None = None  # encoder actors (default: one per GPU, or half the CPUs)
    ray_gpus_per_actor: float = 1.0
    max_visual_tokens: int | None = None  # dynamic-resolution families: image tokens a page at most (None: the index's, else the model's)
    text: str | None = None  # auto: each page's text (its text layer, OCR as `ocr` says); never: pixels only (None: auto)
    ocr: str | None = None  # auto (pages with almost no text layer), always, never (None: $LGPT_OCR, else auto): ingest/pagetext.py
    ocr_lang: str = DEFAULT_OCR_LANG  # Tesseract's language(s): eng, or eng+deu
    ocr_timeout_s: float = DEFAULT_OCR_TIMEOUT_S  # per page: its 300 dpi render and its OCR
    ocr_workers: int | None = None  # OCR threads beside the encoder (None: every CPU)

    def encoder_options(self) -> EncoderOptions:
        """What the model layer needs of these options to load the page encoder."""
        from ..models.loading import EncoderOptions  # the commit policy's modules need no model layer

        return EncoderOptions(self.device, self.dtype, self.batch_size, self.compile, self.max_visual_tokens)

    @property
    def reads_text(self) -> bool:
        """Whether the build reads and keeps page text (not --text never); a UsageError for --text never
        with an explicit --ocr auto/always."""
        return text_mode(self.text, self.ocr) != "never"

    def text_settings(self, tesseract: Tesseract | None) -> TextSettings:
        """How the build reads page text, with the Tesseract find_ocr found."""
        return TextSettings(ocr=ocr_mode(self.ocr), lang=self.ocr_lang, ocr_timeout_s=self.ocr_timeout_s,
                            ocr_workers=self.ocr_workers or default_ocr_workers(), layer_timeout_s=self.render_timeout_s,
                            tesseract=tesseract)


@dataclass
class BuildReport:
    index: str
    source: str
    generation: int | None = None
    documents_seen: int = 0
    indexed: int = 0
    unchanged: int = 0
    retagged: int = 0  # unchanged, but given other metadata (--metadata): counted in unchanged too
    reused: int = 0  # renamed or duplicate content: vectors reused, nothing embedded
    removed: int = 0
    kept: int = 0  # documents of other folders, of folders that could not be listed, or outside the globs
    failed: int = 0
    skipped: int = 0
    hashed: int = 0  # files read because their stat changed (all of them with --rehash)
    pages_embedded: int = 0
    pages_total: int = 0
    model_calls: int = 0
    committed: bool = False
    strict: bool = False
    stopped: str | None = None  # why the build stopped before the end (a lost device)
    model: dict | None = None
    precision: dict | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    dtype_fixes: list[dict] = field(default_factory=list)  # what the precision guard aligned
    cpu_tuning: dict | None = None  # on a CPU: the batch size and threads measured and chosen
    failures: list[Failure] = field(default_factory=list)
    skipped_files: list[dict] = field(default_factory=list)
    unreadable: list[dict] = field(default_factory=list)  # folders and files that could not be read: their documents stay
    notes: list[dict] = field(default_factory=list)  # per document: what conversion changed
    text: dict = field(default_factory=lambda: TextTally().to_dict())  # pages embedded, by the source of their text
    page_warnings: list[dict] = field(default_factory=list)  # pages indexed without the text they should have (OCR failed)

    @property
    def exit_code(self) -> ExitCode:
        if self.strict and self.failures:
            return ExitCode.FAILURE
        if self.stopped or any(f.environment for f in self.failures):
            return ExitCode.ENVIRONMENT
        return ExitCode.PARTIAL if self.failures else ExitCode.OK

    def to_dict(self) -> dict:
        data = asdict(self)
        data["failures"] = [f.model_dump() for f in self.failures]
        data["exit_code"] = int(self.exit_code)
        return data


Log = Callable[[str], None]


class StageTimer:
    """Seconds spent per stage. Stages that run in parallel threads add up their busy time."""

    def __init__(self, report: BuildReport) -> None:
        self.report = report
        self._lock = threading.Lock()

    def add(self, stage: str, start: float) -> None:
        self.add_seconds(stage, time.perf_counter() - start)

    def add_seconds(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.report.stage_seconds[stage] = round(self.report.stage_seconds.get(stage, 0.0) + seconds, 3)
