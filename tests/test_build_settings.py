"""The settings an index records (issue 40: BuildSettings): --pool-factor, --max-visual-tokens, --text, --ocr and
--ocr-lang follow one rule in `build`, `watch`, `serve --watch` and `mcp --watch`: left out, the index's recorded
value; another value, refused without --rebuild. Through the CLI as typed; `watch` in this process, `serve --watch`
and `mcp --watch` as servers of their own (slow tier). Pooling needs torch, so an index built with --pool-factor 3 is
the slow tier's; the fast tier's watch keeps the OCR settings. --max-visual-tokens needs a dynamic-resolution
family: test_families.py's test_max_visual_tokens_is_recorded_and_kept (slow) covers it."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_cli
from helpers import build_ok, verify_ok, wait_until
from served import Server

GUARD_S = 180  # an event that has not come by then never will: the test fails
OCR = ("--ocr", "always", "--ocr-lang", "eng")
BUILT_WITH = ("--pool-factor", "3", *OCR)  # issue 40's


def memo(path: Path, text: str) -> Path:
    """A small one-page PDF with a text layer (so that OCR is quick, and `--ocr auto` would not read it)."""
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=(288, 144), invariant=1)
    c.setFont("Helvetica", 16)
    c.drawString(18, 90, text)
    c.showPage()
    c.save()
    return path


def status(index: Path) -> dict:
    result = run_cli("status", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def text_of(index: Path, name: str) -> dict[str, int]:
    """Where the pages of the document `name` got their text (`ls --json`): layer, ocr, none, unknown."""
    result = run_cli("ls", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    return next(doc["text"] for doc in json.loads(result.stdout)["documents"] if Path(doc["path"]).name == name)


def built_with(docs: Path, index: Path, model: Path, *options: str) -> dict:
    """An index of one memo built with `options`: its status."""
    memo(docs / "first.pdf", "the first memo")
    build_ok(str(docs), "--model", str(model), "--index-dir", str(index), *options)
    built = status(index)
    assert built["pages"] == 1 and text_of(index, "first.pdf")["ocr"] == ("--ocr" in options), built
    assert (built["vectors"] < 16) == ("--pool-factor" in options), built  # the fake model's 16 vectors a page, or pooled
    return built


def assert_kept(index: Path, built: dict) -> None:
    """The index still records the settings it was built with, and its added document was made with them: its
    page as many vectors as the first's (pooled alike) and its text read by OCR (not its text layer)."""
    after = status(index)
    assert {key: after["settings"][key] for key in ("pool_factor", "ocr", "ocr_lang", "text")} == \
        {"pool_factor": built["settings"]["pool_factor"], "ocr": "always", "ocr_lang": "eng", "text": "auto"}, after["settings"]
    assert after["pages"] == 2 and after["vectors"] == 2 * built["vectors"], after
    assert text_of(index, "added.pdf")["ocr"] == 1
    verify_ok(index)


# build: one rule for every recorded setting

SETTINGS = [  # the option, the value an index is built with, another value, what its pages show of it (status, ls)
    pytest.param("--pool-factor", "3", "2", lambda s, text: s["vectors"] < 16 * s["pages"], marks=pytest.mark.slow),  # torch
    ("--text", "never", "auto", lambda s, text: text == {"layer": 0, "ocr": 0, "none": 0, "pending": 0, "unknown": 1}),
    ("--ocr", "always", "never", lambda s, text: text["ocr"] == 1),
    ("--ocr-lang", "osd", "eng", lambda s, text: True),  # $LGPT_OCR is never here: recorded, never read
]


@pytest.mark.parametrize(("option", "built", "other", "shows"), SETTINGS, ids=["pool-factor", "text", "ocr", "ocr-lang"])
def test_a_recorded_setting_left_out_is_the_indexs_and_another_value_needs_rebuild(option, built, other, shows, fake_model,
                                                                                  tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    where = ["--index-dir", str(index)]
    key = option[2:].replace("-", "_")
    recorded = int(built) if built.isdigit() else built
    memo(docs / "first.pdf", "the first memo")
    build_ok(str(docs), "--model", str(fake_model), option, built, *where)
    assert status(index)["settings"][key] == recorded

    memo(docs / "added.pdf", "an added memo")
    kept = run_cli("build", str(docs), "--json", *where)  # left out: the index's
    assert kept.exit_code == 0 and json.loads(kept.stdout)["indexed"] == 1, kept.stderr
    after = status(index)
    assert after["settings"][key] == recorded and shows(after, text_of(index, "added.pdf")), after

    memo(docs / "later.pdf", "a later memo")
    refused = run_cli("build", str(docs), option, other, *where)
    assert refused.exit_code == 1, refused.stderr
    assert f"was built with {option} {built}, not {other}" in refused.stderr and "--rebuild" in refused.stderr, refused.stderr
    assert status(index)["generation"] == after["generation"]  # nothing committed

    rebuilt = run_cli("build", str(docs), option, other, "--rebuild", *where)
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert status(index)["settings"][key] == (int(other) if other.isdigit() else other)


def test_a_new_index_takes_the_defaults_and_a_format_4_index_records_what_its_next_build_is_given(fake_model, tmp_path):
    """A format 4 index (written before the text settings were recorded) opens, and its next build records what it
    is given (or the defaults), without --rebuild, in format 5."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    memo(docs / "first.pdf", "the first memo")
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    fresh = status(index)["settings"]
    assert (fresh["pool_factor"], fresh["text"], fresh["ocr"], fresh["ocr_lang"]) == (1, "auto", "never", "eng")  # $LGPT_OCR

    root = index / "default"
    head = json.loads((root / "HEAD").read_text())
    manifest = json.loads((root / head["manifest"]).read_text())
    settings = {key: value for key, value in manifest["settings"].items() if key not in ("text", "ocr", "ocr_lang")}
    raw = json.dumps({**manifest, "format": "lgpt-index/4", "settings": settings}).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "format": "lgpt-index/4", "sha256": hashlib.sha256(raw).hexdigest()}))
    assert "text" not in status(index)["settings"]  # read as it is: nothing recorded

    memo(docs / "added.pdf", "an added memo")
    result = run_cli("build", str(docs), "--index-dir", str(index), "--ocr", "always")
    assert result.exit_code == 0, result.stderr
    assert json.loads((root / "HEAD").read_text())["format"] == "lgpt-index/5"
    assert status(index)["settings"]["ocr"] == "always" and text_of(index, "added.pdf")["ocr"] == 1


# watch: the same rule, the same options as build


class Watching:
    """`lgpt-index watch ARGS` as typed, in this process's main thread, while a scenario runs in another one,
    told of the watcher's events; the watcher is stopped when the scenario ends."""

    def __init__(self, monkeypatch) -> None:
        from localgpt_index.watch import watcher as module

        self.events: queue.Queue = queue.Queue()
        self.made: queue.Queue = queue.Queue()
        init = module.Watcher.__init__

        def told(watcher, *args, **kwargs) -> None:
            init(watcher, *args, **kwargs)
            printer = watcher.on_event
            watcher.on_event = lambda event: (printer(event), self.events.put(event))
            self.made.put(watcher)

        monkeypatch.setattr(module.Watcher, "__init__", told)

    def next(self, *kinds: str, where=lambda event: True):
        while True:
            event = self.events.get(timeout=GUARD_S)
            if event.kind == "stopped":
                raise AssertionError(f"the watcher stopped before a {kinds} event: {event}")
            if event.kind in kinds and where(event):
                return event

    def run(self, args: list[str], scenario) -> object:
        errors: list[BaseException] = []

        def beside() -> None:
            watcher = self.made.get(timeout=GUARD_S)
            if watcher is None:  # the command ended before it made its watcher
                return
            try:
                scenario(self)
            except BaseException as exc:  # noqa: BLE001 - the test's finding, raised in the main thread
                errors.append(exc)
            finally:
                watcher.stop()

        thread = threading.Thread(target=beside, daemon=True)
        thread.start()
        try:
            result = run_cli("watch", *args)
        finally:
            self.made.put(None)
            thread.join(GUARD_S)
        if errors:
            raise errors[0]
        return result


@pytest.mark.parametrize("options", [OCR, pytest.param(BUILT_WITH, marks=pytest.mark.slow)], ids=["ocr", "pooled"])  # torch pools
def test_watch_keeps_the_settings_an_index_was_built_with(options, fake_model, tmp_path, monkeypatch):
    """`watch` without options for them on an index built with --pool-factor 3 --ocr always --ocr-lang eng: its builds
    keep those settings, and the document it adds is pooled and read by OCR."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    built = built_with(docs, index, fake_model, *options)

    def scenario(watch: Watching) -> None:
        watch.next("build-up-to-date", "build-committed")  # the catch-up build (a fresh stat recorded, or nothing)
        memo(docs / "added.pdf", "an added memo")
        watch.next("build-committed", where=lambda event: event.report.indexed == 1)

    result = Watching(monkeypatch).run([str(docs), "--index-dir", str(index), "--settle", "0.3"], scenario)
    assert result.exit_code == 0, result.stderr
    assert_kept(index, built)


WATCH_REFUSED = [("--pool-factor", "1", "2"), ("--ocr", "never", "always"), ("--ocr-lang", "eng", "osd"), ("--text", "auto", "never")]


@pytest.mark.parametrize(("option", "recorded", "given"), WATCH_REFUSED, ids=[option for option, *_ in WATCH_REFUSED])
def test_watch_with_another_value_of_a_recorded_setting_is_refused_and_stops(option, recorded, given, fake_model, tmp_path):
    """No retry can fix it: the catch-up build fails, the watcher exits 1, and the index is unchanged. (Built with the
    defaults: --ocr never is this suite's $LGPT_OCR.)"""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    before = built_with(docs, index, fake_model)
    result = run_cli("watch", str(docs), "--index-dir", str(index), option, given, "--json")
    assert result.exit_code == 1, result.stderr
    failed = next(json.loads(line) for line in result.stdout.splitlines() if json.loads(line)["event"] == "build-failed")
    assert failed["fatal"] and f"was built with {option} {recorded}, not {given}" in failed["message"], failed
    assert "--rebuild" in failed["hint"], failed
    assert status(index) == before


def test_watch_takes_builds_options_and_a_new_index_records_them(fake_model, tmp_path, monkeypatch):
    """watch's own --text, --ocr and --ocr-lang, on a folder with no index yet: its first build records them (and
    reads no text: --text never)."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    memo(docs / "first.pdf", "the first memo")

    def scenario(watch: Watching) -> None:
        watch.next("build-committed")

    args = [str(docs), "--model", str(fake_model), "--index-dir", str(index), "--text", "never", "--ocr", "never"]
    result = Watching(monkeypatch).run(args, scenario)
    assert result.exit_code == 0, result.stderr
    settings = status(index)["settings"]
    assert settings["text"] == "never" and "ocr" not in settings and "ocr_lang" not in settings, settings  # no text read
    assert text_of(index, "first.pdf") == {"layer": 0, "ocr": 0, "none": 0, "pending": 0, "unknown": 1}


# serve --watch and mcp --watch: servers of their own


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_watch_keeps_the_settings_an_index_was_built_with(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    built = built_with(docs, index, fake_model, *BUILT_WITH)
    server = Server("--index-dir", str(index), "--watch", str(docs))
    try:
        server.wait_ready()

        def line(pattern: str):
            return lambda: next((m for m in map(re.compile(pattern).search, server.lines) if m), None)

        wait_until(line(r"watch: build 1: (nothing to change|generation \d+ committed)"), GUARD_S, "the catch-up build",
                   server.proc)
        memo(docs / "added.pdf", "an added memo")
        wait_until(line(r"watch: build 2: generation \d+ committed: 1 indexed"), GUARD_S, "the added file's commit", server.proc)
    finally:
        code = server.stop()
        print("\n".join(server.lines))
    assert code == 0
    assert_kept(index, built)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_watch_with_another_value_of_a_recorded_setting_says_why_its_watcher_stopped(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    before = built_with(docs, index, fake_model, *OCR)
    server = Server("--index-dir", str(index), "--watch", str(docs), "--ocr", "auto")
    try:
        server.wait_ready()
        wait_until(lambda: any("was built with --ocr always, not auto" in line for line in server.lines), GUARD_S,
                   "the refused catch-up build", server.proc)
        with server.client() as client:
            body = client.get("/healthz").json()
        assert body["watch"]["state"] == "stopped" and "--ocr always" in body["watch"]["problem"], body
    finally:
        server.stop()
        print("\n".join(server.lines))
    assert status(index) == before


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_mcp_watch_keeps_the_settings_an_index_was_built_with(fake_model, tmp_path):
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    docs, index, errlog = tmp_path / "docs", tmp_path / "idx", tmp_path / "stderr.txt"
    built = built_with(docs, index, fake_model, *BUILT_WITH)

    def logged(pattern: str):
        return lambda: re.search(pattern, errlog.read_text(errors="replace"), re.M)

    async def scenario() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "localgpt_index", "mcp", "--index-dir", str(index),
                                                                     "--watch", str(docs)], env=dict(os.environ))
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=300) as session:
                    await session.initialize()
                    await asyncio.to_thread(wait_until, logged(r"watch: build 1: (nothing to change|generation \d+ committed)"),
                                            GUARD_S, "the catch-up")
                    memo(docs / "added.pdf", "an added memo")
                    await asyncio.to_thread(wait_until, logged(r"watch: build 2: generation \d+ committed: 1 indexed"), GUARD_S,
                                            "the added file's commit")

    asyncio.run(scenario())
    assert "Traceback" not in errlog.read_text()
    assert_kept(index, built)


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_serve_and_mcp_refuse_a_build_setting_without_watch(command, tmp_path):
    """The settings say how a watcher builds: without --watch they would do nothing, so they are refused
    before anything starts (exit 2, naming them)."""
    result = run_cli(command, "--pool-factor", "3", "--ocr", "always", "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2, result.output
    assert "--pool-factor, --ocr: only with --watch" in result.stderr and "Traceback" not in result.stderr
