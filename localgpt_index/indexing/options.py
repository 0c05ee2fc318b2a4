"""What a build is asked to do (BuildOptions), what it reports (BuildReport), and its stage clock.

BuildOptions holds the settings an index records (BuildSettings) and their one rule."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..core.errors import ExitCode, IndexProblem
from ..core.metadata import Rules
from ..index.format.manifest import Failure, Manifest
from ..index.text.language import AUTO, from_ocr_lang
from ..ingest.ocr import DEFAULT_OCR_LANG, DEFAULT_OCR_TIMEOUT_S, Tesseract
from ..ingest.pagetext import TextSettings, TextTally, default_ocr_workers, ocr_mode, text_mode
from ..ingest.render import DEFAULT_RENDER_TIMEOUT_S

if TYPE_CHECKING:
    from ..models.loading import EncoderOptions
    from ..models.resolve import ModelSpec


def _setting(option: str, default: Callable[[], Any], why: str | None) -> Any:
    """A recorded setting: its option, a new index's value, and why another one needs --rebuild (None: it
    needs none, the next commit makes what depends on it again)."""
    return field(default=None, metadata={"option": option, "default": default, "why": why})


@dataclass(frozen=True)
class BuildSettings:
    """How an index's pages are made: what the manifest records under the same names (index/format/manifest.py
    Settings). Asked of a build, None is an option left out. One rule for all (`settled`): left out, the index's
    recorded value, else the default; another value than the recorded one needs --rebuild."""

    pool_factor: int | None = _setting(  # >1: hierarchical token pooling, about 1/pool_factor of the vectors (lossy)
        "--pool-factor", lambda: 1, "pages pooled differently would not score alike")
    max_visual_tokens: int | None = _setting(  # dynamic-resolution families (None: the model's budget)
        "--max-visual-tokens", lambda: None, "pages seen through another number of image tokens would not score alike")
    text: str | None = _setting(  # auto: each page's text layer, and OCR as `ocr` says; never: pixels only
        "--text", lambda: "auto", "its pages would not all have their text read alike")
    ocr: str | None = _setting(  # auto (pages with almost no text layer), always, never: ingest/pagetext.py
        "--ocr", lambda: ocr_mode(None), "its pages would not all have their text read alike")
    ocr_lang: str | None = _setting(  # Tesseract's language(s): eng, or eng+deu
        "--ocr-lang", lambda: DEFAULT_OCR_LANG, "its pages would not all have their text read alike")
    language: str | None = _setting(  # the text index's stemming: auto (detected per document), or de, de+en
        "--language", lambda: AUTO, None)

    def settled(self, base: Manifest | None, rebuild: bool = False, where: str = "the index") -> BuildSettings:
        """These settings for a build on `base` (None: a new index): each left out, the value `base` records,
        else the default ($LGPT_OCR, else auto, for --ocr); each given, itself, but where `base` holds pages
        and records another value, an IndexProblem unless `rebuild` (not --language: the next commit builds the
        text index again). --language left out with --ocr-lang given, and none recorded: Tesseract's languages.
        --text never (given or recorded) with an explicit --ocr auto or always is a UsageError."""
        recorded = base.settings if base is not None else None
        holds_pages = base is not None and bool(base.documents or base.in_progress)
        values = {}
        for setting in fields(self):
            given, held = getattr(self, setting.name), getattr(recorded, setting.name, None)
            if given is None:
                values[setting.name] = held if held is not None else setting.metadata["default"]()
                continue
            if held is not None and given != held and holds_pages and not rebuild and setting.metadata["why"]:
                option = setting.metadata["option"]
                raise IndexProblem(f"{where} was built with {option} {held}, not {given}; {setting.metadata['why']}.",
                                   hint=f"Leave out {option} to keep {held}, or use --rebuild to change it.")
            values[setting.name] = given
        if self.language is None and self.ocr_lang is not None and getattr(recorded, "language", None) is None:
            values["language"] = from_ocr_lang(self.ocr_lang)  # Tesseract's languages name the text's
        settled = BuildSettings(**values)
        text_mode(settled.text, self.ocr)
        return settled

    def recorded(self) -> dict[str, Any]:
        """What the manifest records of settled settings: no OCR mode or language for pages read for no
        text (--text never), which holds a later build to neither; no stemming language for auto."""
        values = asdict(self)
        if self.text == "never":
            values.update(ocr=None, ocr_lang=None)
        if self.text == "never" or self.language == AUTO:
            values.update(language=None)
        return values


def _any_model() -> ModelSpec:
    from ..models.resolve import ModelSpec  # the commit policy's modules need no model layer

    return ModelSpec()


@dataclass
class BuildOptions:
    model: ModelSpec = field(default_factory=_any_model)  # its id None: the model the index was built with, else the default
    settings: BuildSettings = field(default_factory=BuildSettings)  # as asked; `build_index` settles them on the index's
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
    metadata_rules: Rules | None = None  # from --metadata; None keeps what the index has
    commit_every_pages: int | None = None  # None: 1000, spaced out when commits get slow (huge catalogs)
    commit_every_s: float = 600.0
    wait_s: float = 0.0
    ray: str | None = None  # a Ray cluster (auto, an address, or local) for conversion, rendering and encoding
    ray_actors: int | None = None  # encoder actors (default: one per GPU, or half the CPUs)
    ray_gpus_per_actor: float = 1.0
    ocr_timeout_s: float = DEFAULT_OCR_TIMEOUT_S  # per page: its 300 dpi render and its OCR
    ocr_workers: int | None = None  # OCR threads beside the encoder (None: every CPU)
    ocr_later: bool = False  # --ocr later: return after the visual commit; pages that need OCR stay pending
    text_only: bool = False  # --text-only: read the pending text only (no discovery, no model)

    def encoder_options(self) -> EncoderOptions:
        """What the model layer needs of these options to load the page encoder (settled settings)."""
        from ..models.loading import EncoderOptions  # the commit policy's modules need no model layer

        return EncoderOptions(self.model, self.batch_size, self.compile, self.settings.max_visual_tokens)

    @property
    def reads_text(self) -> bool:
        """Whether the build reads and keeps page text (settled settings: not --text never)."""
        return self.settings.text != "never"

    def text_settings(self, tesseract: Tesseract | None) -> TextSettings:
        """How the build reads page text (settled settings), with the Tesseract find_ocr found."""
        return TextSettings(ocr=ocr_mode(self.settings.ocr), lang=self.settings.ocr_lang or DEFAULT_OCR_LANG,
                            ocr_timeout_s=self.ocr_timeout_s, ocr_workers=self.ocr_workers or default_ocr_workers(),
                            layer_timeout_s=self.render_timeout_s, tesseract=tesseract, later=self.ocr_later)


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
    visual_commit_s: float | None = None  # seconds from the build's start to its last commit of vectors
    text_commit_s: float | None = None  # ... to the commit with every page's text (None: some left pending)
    pages_text_pending: int = 0  # pages of the index whose text is pending when the build returns (--ocr later)

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
        self.began = time.perf_counter()  # the build's start: its commits' times count from there

    def since_start(self) -> float:
        return round(time.perf_counter() - self.began, 3)

    def add(self, stage: str, start: float) -> None:
        self.add_seconds(stage, time.perf_counter() - start)

    def add_seconds(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.report.stage_seconds[stage] = round(self.report.stage_seconds.get(stage, 0.0) + seconds, 3)
