"""`lgpt-index watch` and `serve --watch`: a folder that stays indexed.

Every test waits on the watcher's own events (in this process, or its --json lines) or on
failpoints, never on sleeps: an event that never comes fails the test after a generous guard.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import run_cli, torchless, validate, with_torch
from docgen import make_pdf
from helpers import build_ok, held_build, make_pdfs, verify_ok, wait_until
from served import Server

pytestmark = torchless  # its processes serve the fake model (but where a test gives them with_torch())

BUILD_ENDS = ("build-committed", "build-up-to-date", "build-failed")
GUARD_S = 180  # an event that has not come by then never will: the test fails


def picture(path: Path, n: int) -> Path:
    """A small PNG whose pixels (and so its fake vectors) are its own."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 64), (n % 251, (n // 251) % 251, 100 + n % 7)).save(path)
    return path


def indexed(index: Path) -> dict[str, str]:
    """path -> sha256 of the documents of the index's current generation."""
    from localgpt_index import open_index

    return {d.path: d.sha256 for d in open_index(index).manifest.documents}


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


class Events:
    """Events in arrival order, waited for one kind at a time."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self.seen: list = []

    def next(self, kind: str, where=lambda event: True):
        while True:
            try:
                event = self.queue.get(timeout=GUARD_S)
            except queue.Empty:
                raise AssertionError(f"no {kind} event; seen: {[self._kind(e) for e in self.seen]}") from None
            self.seen.append(event)
            if (self._kind(event) in BUILD_ENDS if kind == "build-ended" else self._kind(event) == kind) and where(event):
                return event
            if self._kind(event) == "stopped":
                raise AssertionError(f"the watcher stopped before a {kind} event: {event}")

    def ended(self, started):
        """How the build that `started` ended: its build-committed, build-up-to-date or build-failed event."""
        return self.next("build-ended", lambda e: e.number == started.number)

    def since(self, start, kind: str, where=lambda event: True):
        """The first `kind` event after the event `start`, already seen or still to come."""
        earlier = next((e for e in self.seen[self.seen.index(start) + 1:] if self._kind(e) == kind and where(e)), None)
        return earlier if earlier is not None else self.next(kind, where)

    def of(self, kind: str) -> list:
        return [e for e in self.seen if self._kind(e) == kind]

    @staticmethod
    def _kind(event) -> str:
        return event["event"] if isinstance(event, dict) else event.kind


@contextmanager
def watching(docs: Path, index: Path, model: Path, **kwargs):
    """A Watcher of `docs` in a thread of this process; yields (watcher, events)."""
    from localgpt_index.indexing.options import BuildOptions
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.open import open_store
    from localgpt_index.watch.watcher import Watcher

    events = Events()
    options = BuildOptions(model=ModelSpec(str(model)), wait_s=kwargs.pop("wait_s", 60))
    watcher = Watcher(docs, open_store(index_dir=str(index)), options, events.queue.put,
                      settle_s=kwargs.pop("settle_s", 0.3), **kwargs)
    watcher.start_background()
    try:
        yield watcher, events
    finally:
        assert watcher.stop(wait_s=GUARD_S)


@contextmanager
def querying(index: Path):
    """Queries through the Python API in a thread, and at every switch of HEAD (just before and just
    after it, in the writer's thread): none may fail."""
    from localgpt_index import open_index
    from localgpt_index.core import failpoints

    errors: list[BaseException] = []
    answered = {"thread": 0, "before-head": 0, "after-head": 0}
    stop = threading.Event()

    def query(where: str) -> None:
        try:
            assert open_index(index).search("the quarterly report", k=3)[0]
            answered[where] += 1
        except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
            errors.append(exc)

    def loop() -> None:
        while not stop.wait(0.02):  # paced, to leave the builder a core
            query("thread")

    query("thread")
    failpoints.set_hook(lambda name: query(name) if name in ("before-head", "after-head") else None)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield answered
    finally:
        failpoints.set_hook(None)
        stop.set()
        thread.join()
    assert not errors, errors[:3]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_saved_file_becomes_searchable_after_the_next_commit_with_the_model_kept(fake_model, tmp_path):
    from localgpt_index import open_index

    docs, index = tmp_path / "docs", tmp_path / "idx"
    first = picture(docs / "first.png", 1)
    with watching(docs, index, fake_model) as (watcher, events):
        events.next("build-committed")  # the catch-up build
        with querying(index) as answered:
            saved = picture(docs / "sub" / "saved.png", 2)
            committed = events.next("build-committed", lambda e: e.report.indexed == 1)
            assert committed.report.model_calls == 1  # this build's call, not the warm model's total
            assert str(saved) in indexed(index)
            hits = open_index(index).search("a saved page", k=5)[0]
            assert str(saved) in {hit.path for hit in hits}
            picture(first, 3)  # saved again, new content
            events.next("build-committed", lambda e: e.generation > committed.generation)
            assert indexed(index)[str(first)] == sha256(first)
        assert answered["before-head"] >= 2 and answered["after-head"] >= 2
    assert watcher.encoders.loads == 1  # three builds embedded pages; the model loaded once
    assert [e.number for e in events.of("build-started")] == [1, 2, 3]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("name", ["scans.pdf", "scans"])
def test_a_sub_folder_renamed_away_and_a_file_put_at_its_path_leaves_no_ghosts(fake_model, tmp_path, name):
    """Issue 39, 10: the documents of a folder renamed away (a document-like name or not) leave the index,
    though a file now has the folder's path; the index ends up exactly matching the folder."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    folder = docs / name
    inside = make_pdfs(folder, 2, 1)
    top = make_pdf(docs / "top.pdf", ["top"])
    with watching(docs, index, fake_model) as (watcher, events):
        events.next("build-committed")
        assert set(indexed(index)) == {str(top), *map(str, inside)}
        folder.rename(tmp_path / "moved-away")
        make_pdf(folder, ["a file where the folder was"])
        sentinel = picture(docs / "sentinel.png", 1)  # its build starts after both changes: a full build sees them
        events.next("build-committed", lambda e: str(sentinel) in indexed(index))
        assert watcher.exit_code == 0
    expected = {str(top), str(sentinel)} | ({str(folder)} if name.endswith(".pdf") else set())
    assert set(indexed(index)) == expected
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_deleted_or_renamed_file_leaves_the_index(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    gone, moved = picture(docs / "gone.png", 1), picture(docs / "moved.png", 2)
    picture(docs / "kept.png", 3)
    with watching(docs, index, fake_model) as (_, events):
        events.next("build-committed")
        with querying(index):
            gone.unlink()
            events.next("build-committed", lambda e: e.report.removed == 1)
            assert str(gone) not in indexed(index)
            moved.rename(docs / "renamed.png")
            events.next("build-committed", lambda e: e.report.reused == 1)
    assert set(indexed(index)) == {str(docs / "kept.png"), str(docs / "renamed.png")}
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_burst_of_1000_files_unpacked_at_once_costs_at_most_5_builds(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    picture(docs / "first.png", 0)
    archive = tmp_path / "burst.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for n in range(1, 1001):
            bundle.write(picture(tmp_path / "made" / f"page-{n:04}.png", n), f"burst/page-{n:04}.png")
    with watching(docs, index, fake_model, settle_s=1.0) as (_, events):
        events.next("build-committed")
        with querying(index):
            zipfile.ZipFile(archive).extractall(docs)
            events.next("build-committed", lambda e: e.report.pages_total == 1001)
            # every build the burst causes (those of its events still pending too) comes before the sentinel's
            sentinel = picture(docs / "sentinel.png", 5000)
            events.next("build-started", lambda e: str(sentinel) in e.paths)
            events.next("build-committed", lambda e: e.report.pages_total == 1002)
    burst_builds = [e for e in events.of("build-started")[1:] if str(sentinel) not in e.paths]
    assert 1 <= len(burst_builds) <= 5, [len(e.paths) for e in burst_builds]
    assert len(indexed(index)) == 1002


def test_the_filter_drops_the_stores_own_folders_hidden_and_junk_files(tmp_path):
    """What `watch` never reacts to, for each store: a local index and its folder, a qdrant+path store
    and its PDF store (inside the watched folder); hidden and junk names; types that are never documents."""
    from localgpt_index.index.open import open_store
    from localgpt_index.watch.changes import ChangeFilter

    docs = tmp_path / "docs"
    (docs / "notes.txt").parent.mkdir(parents=True)
    (docs / "notes.xyz").write_text("not a document type")
    local = open_store(None, str(docs / "idx"), None)
    qdrant = open_store(f"qdrant+path://{docs / 'qd'}/pages")
    relevant = ChangeFilter(docs, [*local.local_folders, *qdrant.local_folders])
    (docs / "idx" / "default").mkdir(parents=True)
    for own in ["idx", "idx/default/HEAD", "idx/default/segments/x.npy", "qd/collection/pages/storage.sqlite",
                "qd/pages-pdf/ab.pdf", ".git/index", "sub/.hidden.pdf", "~$memo.docx", "report.pdf~", "notes.xyz"]:
        assert not relevant(str(docs / own)), own
    for change in ["report.pdf", "sub/deck.pptx", "sub", "gone.xyz", "notes.txt", "IDX.pdf", "idx-notes.pdf"]:
        assert relevant(str(docs / change)), change
    assert not relevant(str(tmp_path / "elsewhere.pdf"))
    # a folder of any name deleted or renamed away, and a file put at its path since: its documents must go
    (docs / "scans").write_text("a file where a folder was")
    assert not relevant(str(docs / "scans")) and relevant(str(docs / "scans"), deleted=True)


def test_half_written_files_wait_until_they_keep_their_size(tmp_path):
    """The settle check stats the batch's files twice; a file that grew in between waits one more interval."""
    from localgpt_index.core import failpoints
    from localgpt_index.watch.changes import Pending

    growing = tmp_path / "growing.pdf"
    growing.write_bytes(b"%PDF-1.4 half")
    checks = []

    def hook(name: str) -> None:
        if name == "watch.settle-check":
            checks.append(growing.stat().st_size)
            if len(checks) == 1:
                with open(growing, "ab") as handle:
                    handle.write(b" and the rest")

    pending = Pending()
    pending.add([str(growing)])
    failpoints.set_hook(hook)
    try:
        assert pending.take_settled(settle_s=0.01, max_wait_s=600) == {str(growing)}
    finally:
        failpoints.set_hook(None)
    assert len(checks) == 2  # it waited for the write to end


def test_a_file_that_changes_all_the_time_is_built_once_the_cap_has_passed(tmp_path):
    """A log that grows between every two looks never settles: it is taken anyway once max_wait_s passed."""
    import time

    from localgpt_index.core import failpoints
    from localgpt_index.watch.changes import Pending

    log = tmp_path / "always.pdf"
    log.write_bytes(b"%PDF-1.4 ")
    checks = 0

    def hook(name: str) -> None:
        nonlocal checks
        if name == "watch.settle-check" and checks < 1000:  # 1000 checks: it stops growing, so a test without the cap ends
            checks += 1
            with open(log, "ab") as handle:
                handle.write(b"line ")

    pending = Pending()
    pending.add([str(log)])
    failpoints.set_hook(hook)
    started = time.monotonic()
    try:
        assert pending.take_settled(settle_s=0.002, max_wait_s=0.05) == {str(log)}
    finally:
        failpoints.set_hook(None)
    assert time.monotonic() - started >= 0.05
    assert 1 < checks < 1000  # taken while it still grew at every look
    from inspect import signature

    from localgpt_index.watch.watcher import Watcher

    assert signature(Watcher).parameters["max_wait_s"].default == 60  # the cap docs/watch.md gives


class WatchProcess:
    """`lgpt-index watch ... --json` in a process of its own, its event lines read as they come."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict | None = None, process=None) -> None:
        self.process = process or subprocess.Popen([sys.executable, "-m", "localgpt_index", "watch", *args, "--json"],
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                                   env={**os.environ, **(env or {})})
        self.events = Events()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.events.queue.put(json.loads(line))

    def stop(self, sig=signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=GUARD_S)
        self.events.next("stopped")
        return code


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_watch_dot_never_reacts_to_its_own_index(fake_model, tmp_path):
    """The index lives inside the watched folder (not hidden, so only the watcher's own filter keeps
    it out): its writes are seen and dropped, and the next build is the sentinel's, and only it."""
    docs = tmp_path / "docs"
    picture(docs / "a.png", 1)
    watch = WatchProcess(".", "--model", str(fake_model), "--index-dir", "index", "--settle", "0.3", cwd=docs)
    try:
        events = watch.events
        assert events.next("watching")["polling"] is False
        started = events.next("build-started")
        events.next("build-committed")
        events.since(started, "changes-seen", lambda e: e["ignored"] > 0)  # the build's own writes, seen and dropped
        for n, name in [(2, "sentinel-1.png"), (3, "sentinel-2.png")]:
            picture(docs / name, n)
            started = events.next("build-started")
            assert started["paths"] == [str(docs / name)], started
            events.next("build-committed", lambda e: e["number"] == started["number"])
            events.since(started, "changes-seen", lambda e: e["ignored"] > 0 and not e["paths"])
        assert watch.stop(signal.SIGINT) == 0
    finally:
        if watch.process.poll() is None:
            watch.process.kill()
    assert [e["number"] for e in events.of("build-started")] == [1, 2, 3]
    assert events.seen[-1] == {**events.seen[-1], "event": "stopped", "exit_code": 0, "builds": 3}
    verify_ok(docs / "index")


@pytest.mark.slow
def test_the_second_build_reuses_what_the_first_builds_cpu_tuner_found(tiny_model, tmp_path):
    """A real checkpoint on the CPU: the catch-up build runs the batch-size trials (47 pages at most), the
    next build, with the model kept, runs none and keeps the size and threads found."""
    docs = tmp_path / "docs"
    make_pdfs(docs, 6, 10)
    watch = WatchProcess(str(docs), "--model", str(tiny_model), "--index-dir", str(tmp_path / "idx"), "--settle", "0.3", env=with_torch())
    try:
        first = watch.events.next("build-committed")["report"]["cpu_tuning"]
        assert first["decided"] and first["trial_batches"] > 0 and first["pages_per_second_by_batch"], first
        make_pdf(docs / "saved.pdf", ["a page saved later"])
        report = watch.events.next("build-committed", lambda e: e["report"]["indexed"] == 1)["report"]
        validate(report, "build")
        second = report["cpu_tuning"]
        assert second == {**first, "trial_batches": 0}, (first, second)
        assert watch.stop() == 0
    finally:
        if watch.process.poll() is None:
            watch.process.kill()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_kill_9_mid_build_leaves_an_index_that_verifies_and_the_next_watch_catches_up(fake_model, tmp_path):
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    make_pdfs(docs, 2, 2, stem="old")
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    before = indexed(index)
    new = make_pdfs(docs, 3, 3, stem="new")
    args = ["watch", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--json"]
    held = WatchProcess(process=held_build(args, release, "encode"))  # its catch-up build, held mid-way
    try:
        with querying(index):
            manual = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
            assert manual.exit_code == 1
            assert f"is being written by pid {held.process.pid} on" in manual.stderr  # who holds the lock
            assert indexed(index) == before  # queries answer from the last generation meanwhile
    finally:
        held.process.kill()  # kill -9, mid-build
        held.process.wait(timeout=GUARD_S)
    verify_ok(index)
    assert indexed(index) == before
    with watching(docs, index, fake_model) as (_, events):
        with querying(index):
            events.next("build-committed", lambda e: e.report.indexed == 3)
    assert set(indexed(index)) == set(before) | {str(p) for p in new}
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_sigterm_mid_build_abandons_it_and_exits_0(fake_model, tmp_path):
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    make_pdfs(docs, 2, 3)
    args = ["watch", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--json"]
    held = WatchProcess(process=held_build(args, release, "encode"))
    assert held.stop(signal.SIGTERM) == 0
    stopped = held.events.of("stopped")[0]
    assert stopped["exit_code"] == 0 and "build 1, in progress, was abandoned" in stopped["reason"]
    assert not held.events.of("build-committed")
    assert "Traceback" not in "".join(held.stderr)
    with watching(docs, index, fake_model) as (_, events):  # the next watch carries on
        events.next("build-committed", lambda e: e.report.indexed == 2)
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_manual_build_holding_the_lock_past_wait_fails_a_build_and_the_watcher_goes_on(fake_model, tmp_path):
    """The watcher's build waits --wait for a manual build's lock, then reports build-failed (not fatal)
    and tries the same changes again; once the manual build is done, its builds commit again."""
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    make_pdfs(docs, 1, 2)
    manual = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(index)], release, "encode")
    try:
        with watching(docs, index, fake_model, wait_s=0.5) as (watcher, events):
            for number in (1, 2):  # the catch-up, then its retry, with no change in between
                failed = events.next("build-failed")
                assert (failed.number, failed.fatal, failed.exit_code) == (number, False, 1), failed
                assert f"is being written by pid {manual.pid} on" in failed.message, failed
            assert not events.of("changes-seen")
            release.touch()
            assert manual.wait(timeout=GUARD_S) == 0, manual.communicate()
            saved = picture(docs / "saved.png", 4)
            events.next("build-committed", lambda e: str(saved) in indexed(index))
            assert watcher.exit_code == 0
    finally:
        if manual.poll() is None:
            manual.kill()
            manual.communicate()
    assert set(indexed(index)) == {str(docs / "report-0.pdf"), str(saved)}
    verify_ok(index)


def aged(path: Path) -> Path:
    """Saved an hour ago: the index trusts its recorded stat (a file just written is read again)."""
    os.utime(path, (path.stat().st_mtime - 3600,) * 2)
    return path


def full_disk(release: Path, nth: int = 1) -> dict:
    """The environment of a watcher whose index cannot be written from the `nth` commit on, until the
    file `release` exists (space freed), its retries 0.2 s apart, then 0.4 s."""
    return {"LGPT_FAILPOINT": f"before-head:{nth}:enospc:until", "LGPT_FAILPOINT_HOLD": str(release),
            "LGPT_WATCH_RETRY_S": "0.2,0.4"}


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_full_disk_at_a_commit_is_retried_with_backoff_and_the_watcher_goes_on(fake_model, tmp_path):
    """Issue 39, 6: ENOSPC at a watcher's commit is a build-failed that is not fatal, tried again with
    the wait doubling (0.2 s, 0.4 s, capped at 0.4 s); the index keeps its generation meanwhile and, once
    space is freed, the same changes commit and the watcher goes on with the next ones."""
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "space-freed"
    first = picture(docs / "a.png", 1)
    watch = WatchProcess(str(docs), "--model", str(fake_model), "--index-dir", str(index), "--settle", "0.3",
                         env=full_disk(release, nth=2))
    try:
        events = watch.events
        generation = events.next("build-committed")["generation"]
        saved = picture(docs / "saved.png", 2)
        failed = [events.next("build-failed") for _ in range(3)]
        for event, wait in zip(failed, (0.2, 0.4, 0.4)):
            assert not event["fatal"] and event["exit_code"] == 1 and event["retry_in_s"] == wait, event
            assert "No space left on device" in event["message"] and "keeps generation" in event["message"], event
            assert "Free some space" in event["hint"] and "tries again" in event["hint"], event
            retry = events.since(event, "build-started")
            assert retry["number"] == event["number"] + 1 and str(saved) in retry["paths"], retry  # the same changes
            assert retry["time"] - event["time"] >= wait - 0.01, (event, retry)  # after the backoff
        assert indexed(index) == {str(first): sha256(first)}  # nothing half-written, nothing lost
        verify_ok(index)
        release.touch()
        committed = events.next("build-committed")
        assert committed["generation"] == generation + 1 and committed["report"]["indexed"] == 1, committed
        later = picture(docs / "later.png", 3)  # the watcher went on
        events.next("build-committed", lambda e: e["generation"] == generation + 2)
        assert watch.process.poll() is None
        assert watch.stop() == 0
    finally:
        if watch.process.poll() is None:
            watch.process.kill()
    # more tries may fail while the test checks the index (0.4 s apart); none after space was freed
    assert all(not e["fatal"] and e["time"] <= committed["time"] for e in events.of("build-failed"))
    assert "Traceback" not in "".join(watch.stderr)
    assert set(indexed(index)) == {str(first), str(saved), str(later)}
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_an_io_error_at_a_commit_is_retried_and_the_watchers_status_says_so(fake_model, tmp_path, monkeypatch):
    """EIO, as ENOSPC: `Watcher.status()` (what serve and MCP report) says `retrying`, why and when,
    then `watching` once a build could write."""
    import errno

    from localgpt_index.core import failpoints

    docs, index = tmp_path / "docs", tmp_path / "idx"
    picture(docs / "a.png", 1)
    fixed = threading.Event()

    def failing_disk(name: str) -> None:
        if name == "before-head" and not fixed.is_set():
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setenv("LGPT_WATCH_RETRY_S", "0.05,0.1")
    failpoints.set_hook(failing_disk)
    try:
        with watching(docs, index, fake_model) as (watcher, events):
            failed = events.next("build-failed")
            assert not failed.fatal and "Input/output error" in failed.message, failed
            events.next("build-failed", lambda e: e.number == 2)
            status = watcher.status()
            assert status["state"] == "retrying" and status["failed_in_a_row"] >= 2, status
            assert "Input/output error" in status["problem"] and 0 <= status["retry_in_s"] <= 0.1, status
            fixed.set()
            events.next("build-committed")
            wait_until(lambda: watcher.status()["state"] == "watching", GUARD_S, "the watcher back to watching")
            assert watcher.status() == {**watcher.status(), "problem": None, "failed_in_a_row": 0, "retry_in_s": None}
    finally:
        failpoints.set_hook(None)
    stopped = watcher.status()
    assert (stopped["state"], stopped["exit_code"], stopped["problem"]) == ("stopped", 0, None), stopped
    verify_ok(index)
    from localgpt_index.watch.watcher import retry_delays

    monkeypatch.delenv("LGPT_WATCH_RETRY_S")
    assert retry_delays() == (1.0, 60.0)  # the backoff docs/watch.md gives


def test_polling_takes_over_where_file_system_events_are_unavailable(fake_model, tmp_path, monkeypatch):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    picture(docs / "a.png", 1)
    monkeypatch.setenv("LGPT_FAILPOINT", "watch.native:1:enospc")  # what inotify says when its watch limit is reached
    with watching(docs, index, fake_model) as (_, events):
        armed = events.next("watching")
        assert armed.polling and "unavailable" in armed.reason and "max_user_watches" in armed.reason
        events.next("build-committed")
        saved = picture(docs / "b.png", 2)
        events.next("build-committed", lambda e: e.report.indexed == 1)
    assert str(saved) in indexed(index)


def test_the_event_source_losing_its_folder_fails_with_exit_2(tmp_path, monkeypatch):
    """Where the file system watch itself fails and the folder is gone, the watcher stops with exit 2, as a
    build of a missing DOCS does (docs/watch.md), not 4: the folder was the user's argument."""
    from localgpt_index.watch.source import EventSource

    failed: queue.Queue = queue.Queue()
    monkeypatch.setenv("LGPT_FAILPOINT", "watch.native:1:enospc")
    source = EventSource(tmp_path / "gone", lambda paths: None, lambda *armed: None, lambda *why: failed.put(why))
    source.start()
    message, exit_code = failed.get(timeout=GUARD_S)
    source.stop()
    assert exit_code == 2 and "the watched folder is gone" in message


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_watch_refuses_a_file_and_a_missing_model_stops_it_with_exit_4(fake_model, tmp_path):
    docs = tmp_path / "docs"
    one = picture(docs / "a.png", 1)
    refused = run_cli("watch", str(one), "--index-dir", str(tmp_path / "idx"))
    assert refused.exit_code == 2 and "is a file" in refused.stderr
    watch = WatchProcess(str(docs), "--model", "example-org/no-such-model", "--index-dir", str(tmp_path / "idx"))
    assert watch.process.wait(timeout=GUARD_S) == 4
    failed = watch.events.next("build-failed")
    assert failed["fatal"] and failed["exit_code"] == watch.process.returncode
    assert watch.events.next("stopped")["exit_code"] == watch.process.returncode
    assert "Traceback" not in "".join(watch.stderr)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_an_index_of_another_model_stops_the_watcher_with_exit_1(fake_model, tmp_path):
    """No retry can fix it: the catch-up build's build-failed is fatal, the watcher exits 1, the index unchanged.
    With --poll (its saved files committed as in the polling test above): polling, and saying why."""
    from localgpt_index.testing.fake import write_fake_checkpoint

    docs, index = tmp_path / "docs", tmp_path / "idx"
    picture(docs / "a.png", 1)
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    before = indexed(index)
    other = write_fake_checkpoint(tmp_path / "other-model", dim=64)
    watch = WatchProcess(str(docs), "--model", str(other), "--index-dir", str(index), "--poll")
    try:
        armed = watch.events.next("watching")
        assert armed["polling"] is True and "--poll" in armed["reason"], armed
        failed = watch.events.next("build-failed")
        assert failed["fatal"] and failed["exit_code"] == 1 and "is a different model" in failed["message"], failed
        assert watch.events.next("stopped")["exit_code"] == 1
        assert watch.process.wait(timeout=GUARD_S) == 1
    finally:
        if watch.process.poll() is None:
            watch.process.kill()
    assert "Traceback" not in "".join(watch.stderr)
    assert indexed(index) == before
    verify_ok(index)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_watch_answers_with_a_saved_file_after_its_commit(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "report.pdf", ["quarterly report"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    server = Server("--index-dir", str(index), "--watch", str(docs))
    try:
        server.wait_ready()
        def line(pattern: str):
            return lambda: next((m for m in map(re.compile(pattern).search, server.lines) if m), None)

        wait_until(line(r"watch: build 1: (nothing to change|generation \d+ committed)"), GUARD_S, "the catch-up build", server.proc)
        picture(docs / "saved.png", 7)
        wait_until(line(r"watch: build 2: generation \d+ committed: 1 indexed"), GUARD_S, "the saved file's commit", server.proc)
        with server.client() as client:
            answer = client.post("/query", json={"queries": ["what was saved"], "k": 5})
        assert answer.status_code == 200, answer.text
        assert "saved.png" in {Path(hit["path"]).name for hit in answer.json()["queries"][0]["results"]}
    finally:
        code = server.stop()
        print("\n".join(server.lines))
    assert code == 0
    assert any("watch: ended" in line for line in server.lines)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_watch_retries_a_full_disk_and_healthz_says_so(fake_model, tmp_path):
    """Issue 39, 6, under `serve --watch`: a commit that meets a full disk is retried, /healthz's `watch`
    says `retrying` and why (no path of this machine in it), queries answer from the last generation,
    and once space is freed the change commits and /healthz says `watching` again."""
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "space-freed"
    aged(make_pdf(docs / "report.pdf", ["quarterly report"]))  # the catch-up build commits nothing
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    server = Server("--index-dir", str(index), "--watch", str(docs), env=full_disk(release))
    try:
        server.wait_ready()

        def line(pattern: str):
            return lambda: next((m for m in map(re.compile(pattern).search, server.lines) if m), None)

        def watch_state(client, state: str):
            return lambda: (body := client.get("/healthz").json()) and body["watch"]["state"] == state and body

        wait_until(line(r"watch: build 1: nothing to change"), GUARD_S, "the catch-up build", server.proc)
        picture(docs / "saved.png", 7)
        failed = r"watch: build 2: could not write to .*: No space left on device; the index keeps generation 1; trying again in 0.2 s$"
        wait_until(line(failed), GUARD_S, "the failed commit", server.proc)
        with server.client() as client:
            body = wait_until(watch_state(client, "retrying"), GUARD_S, "retrying in /healthz", server.proc)
            assert body["status"] == "ready" and body["generation"] == 1, body
            assert "No space left on device" in body["watch"]["problem"] and str(tmp_path) not in body["watch"]["problem"], body
            assert body["watch"]["failed_in_a_row"] >= 1 and body["watch"]["exit_code"] is None, body
            assert client.post("/query", json={"queries": ["quarterly report"], "k": 5}).status_code == 200
            release.touch()
            wait_until(line(r"watch: build \d+: generation 2 committed: 1 indexed"), GUARD_S, "the commit", server.proc)
            body = wait_until(watch_state(client, "watching"), GUARD_S, "watching in /healthz", server.proc)
            assert body["watch"]["problem"] is None and body["watch"]["failed_in_a_row"] == 0, body
            answer = client.post("/query", json={"queries": ["what was saved"], "k": 5})
        assert "saved.png" in {Path(hit["path"]).name for hit in answer.json()["queries"][0]["results"]}
    finally:
        code = server.stop()
        print("\n".join(server.lines))
    assert code == 0 and not any("Traceback" in line for line in server.lines)


def test_serve_watch_with_no_index_retries_its_first_build_on_a_failing_disk(fake_model, tmp_path, monkeypatch):
    """`serve --watch` on a folder with no index builds before it serves: an I/O error there is retried
    after the backoff (it ended serve), and the server then opens the index that build made."""
    from localgpt_index.cli import serve
    from localgpt_index.index.open import open_store
    from localgpt_index.indexing.options import BuildSettings
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.testing.powerloss import Fault, RecordingDisk, recording

    docs, lines = tmp_path / "docs", []
    make_pdf(docs / "report.pdf", ["quarterly report"])
    monkeypatch.setenv("LGPT_WATCH_RETRY_S", "0.01,0.02")

    class Log:
        def message(self, text, level="info"):
            lines.append(text)

    store = open_store(None, tmp_path / "idx", None)
    with recording(RecordingDisk(tmp_path, fault=Fault(1, "eio"))):  # the index's first folder cannot be made, once
        # serve --watch takes the index's model, or the default (none here): the fake one named instead
        watcher = serve._watcher(docs, store, Log(), ModelSpec(str(fake_model), device="cpu"), BuildSettings())
    watcher.stop()
    assert store.exists() and watcher.builds == 2 and watcher.error is None, lines
    assert any("Input/output error" in line and "trying again" in line for line in lines), lines


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_mcp_watch_retries_a_full_disk_and_index_status_says_so(fake_model, tmp_path):
    """Issue 39, 6, under `mcp --watch` (the SDK's client over stdio): the watcher does not end at a full
    disk; index_status's `watch` says `retrying` and why, then `watching`, and the later file is a hit."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    docs, index, errlog, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "stderr.txt", tmp_path / "space-freed"
    aged(make_pdf(docs / "report.pdf", ["quarterly report"]))  # the catch-up build commits nothing
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))

    def logged(pattern: str):
        return lambda: re.search(pattern, errlog.read_text(errors="replace"), re.M)

    async def scenario() -> tuple[dict, dict, list[str]]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "localgpt_index", "mcp", "--index-dir", str(index),
                                                                     "--watch", str(docs)], env={**os.environ, **full_disk(release)})

        async def watch_state(session, state: str) -> dict:
            async def poll() -> dict:
                while (status := (await session.call_tool("index_status", {})).structured_content)["watch"]["state"] != state:
                    await asyncio.sleep(0.05)
                return status
            return await asyncio.wait_for(poll(), GUARD_S)

        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=300) as session:
                    await session.initialize()
                    await asyncio.to_thread(wait_until, logged(r"watch: build 1: nothing to change"), GUARD_S, "the catch-up")
                    picture(docs / "saved.png", 9)
                    await asyncio.to_thread(wait_until, logged(r"watch: build 2: could not write.*No space left on device"),
                                            GUARD_S, "the failed commit")
                    retrying = await watch_state(session, "retrying")
                    release.touch()
                    await asyncio.to_thread(wait_until, logged(r"watch: build \d+: generation 2 committed: 1 indexed"),
                                            GUARD_S, "the commit once space is freed")
                    watching_again = await watch_state(session, "watching")
                    found = await session.call_tool("search", {"query": "what was saved", "k": 5})
                    assert not found.is_error, found.content[0].text
        return retrying, watching_again, [hit["document"] for hit in found.structured_content["hits"]]

    retrying, watching_again, hits = asyncio.run(scenario())
    watch = retrying["watch"]
    assert retrying["generation"] == 1 and watch["failed_in_a_row"] >= 1 and watch["exit_code"] is None, retrying
    assert "No space left on device" in watch["problem"] and str(tmp_path) not in watch["problem"], watch
    assert watching_again["generation"] == 2 and watching_again["watch"]["problem"] is None, watching_again
    assert "saved.png" in hits
    assert "Traceback" not in errlog.read_text()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_mcp_watch_a_saved_file_becomes_a_search_hit_after_its_commit(fake_model, tmp_path):
    """`mcp --watch DOCS` over stdio with the SDK's own client: the watcher's lines go to stderr (the
    protocol stream stays clean), and the tools answer from its commits."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    docs, index, errlog = tmp_path / "docs", tmp_path / "idx", tmp_path / "stderr.txt"
    make_pdf(docs / "report.pdf", ["quarterly report"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))

    def logged(pattern: str):
        return lambda: re.search(pattern, errlog.read_text(errors="replace"), re.M)

    async def scenario() -> list[str]:
        faults: list[Exception] = []

        async def on_message(message) -> None:
            if isinstance(message, Exception):
                faults.append(message)

        params = StdioServerParameters(command=sys.executable, args=["-m", "localgpt_index", "mcp", "--index-dir", str(index),
                                                                     "--watch", str(docs)], env=dict(os.environ))
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write, message_handler=on_message, read_timeout_seconds=300) as session:
                    await session.initialize()
                    await asyncio.to_thread(wait_until, logged(r"watch: build 1: (nothing to change|generation \d+ committed)"),
                                            GUARD_S, "the catch-up build")
                    picture(docs / "saved.png", 9)
                    await asyncio.to_thread(wait_until, logged(r"watch: build 2: generation \d+ committed: 1 indexed"), GUARD_S,
                                            "the saved file's commit")
                    found = await session.call_tool("search", {"query": "what was saved", "k": 5})
                    assert not found.is_error, found.content[0].text
        assert not faults, faults
        return [hit["document"] for hit in found.structured_content["hits"]]

    assert "saved.png" in asyncio.run(scenario())
    assert re.search(r"^watch: ended \(stopped\)", errlog.read_text(), re.M)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_touched_file_a_failing_document_and_the_folder_removed(fake_model, tmp_path):
    """One watcher in sequence: a file touched, not edited, is read again but not embedded; a file gone
    again before the build changes nothing (build-up-to-date, the same generation); a corrupt PDF is in
    the commit's failures, tried again by the next build, and the watcher goes on; fixed, the next commit
    indexes it; the watched folder moved away and deleted, the watcher stops with exit 2 and the index is unchanged."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    kept = picture(docs / "kept.png", 1)
    os.utime(kept, (kept.stat().st_mtime - 3600,) * 2)  # saved an hour ago: the index records its stat
    with watching(docs, index, fake_model) as (watcher, events):
        generation = events.next("build-committed").generation
        before = indexed(index)
        kept.touch()  # touched, not edited: read again, not embedded; only its recorded stat changes
        touched = events.ended(events.next("build-started", lambda e: str(kept) in e.paths))
        assert touched.kind == "build-committed" and touched.generation == generation + 1, touched
        assert (touched.report.hashed, touched.report.unchanged, touched.report.pages_embedded) == (1, 1, 0), touched
        came_and_went = picture(docs / "came-and-went.png", 3)
        came_and_went.unlink()  # before the build: nothing to change
        ended = events.ended(events.next("build-started", lambda e: str(came_and_went) in e.paths))
        assert (ended.kind, ended.generation) == ("build-up-to-date", touched.generation), ended
        assert indexed(index) == before

        broken = docs / "broken.pdf"
        broken.write_bytes(b"%PDF-1.4\n% a download cut short\n")
        failed = events.ended(events.next("build-started", lambda e: str(broken) in e.paths))
        assert [f.path for f in failed.report.failures] == [str(broken)], failed
        assert str(broken) not in indexed(index) and indexed(index)[str(kept)] == before[str(kept)]
        other = picture(docs / "other.png", 2)  # the next build, for another file, tries the failed one again
        again = events.ended(events.next("build-started", lambda e: str(other) in e.paths))
        assert again.report.indexed == 1 and [f.path for f in again.report.failures] == [str(broken)], again
        make_pdf(broken, ["the whole download"])
        fixed = events.ended(events.next("build-started", lambda e: str(broken) in e.paths))
        assert fixed.report.indexed == 1 and not fixed.report.failures, fixed
        assert indexed(index)[str(broken)] == sha256(broken)

        before = indexed(index)
        docs.rename(tmp_path / "moved")  # at once (a build between two files of an rmtree would see some gone)
        shutil.rmtree(tmp_path / "moved")
        stopped = events.next("stopped")
    failed = events.of("build-failed")[-1]
    assert failed.fatal and failed.exit_code == 2 and str(docs) in failed.message, failed
    assert stopped.exit_code == watcher.exit_code == 2, stopped
    verify_ok(index)
    assert indexed(index) == before


@pytest.mark.parametrize("given, expected", [("", (1.0, 60.0)), ("0.2,0.4", (0.2, 0.4)), ("2", (2.0, 60.0)),
                                             ("0,1", (1.0, 60.0)), ("-1,5", (1.0, 60.0)), ("5,1", (1.0, 60.0)),
                                             ("inf", (1.0, 60.0)), ("nan,1", (1.0, 60.0)), ("a,b", (1.0, 60.0))])
def test_a_watchers_backoff_always_waits(monkeypatch, given, expected):
    """LGPT_WATCH_RETRY_S=FIRST,MOST: a first wait of zero, a negative one, MOST under FIRST or not a number
    fall back to the default (a retry loop without a wait would spin)."""
    from localgpt_index.watch.watcher import retry_delays

    monkeypatch.setenv("LGPT_WATCH_RETRY_S", given)
    assert retry_delays() == expected


def test_a_watcher_stopped_before_its_background_thread_starts_never_starts_it(tmp_path, fake_model):
    """mcp --watch starts the watcher from a companion thread: stdin closing at once stops it first
    (it said "internal error: RuntimeError: cannot join thread before it is started", exit 1)."""
    from localgpt_index.indexing.options import BuildOptions
    from localgpt_index.index.open import open_store
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.watch.watcher import Watcher

    docs = tmp_path / "docs"
    docs.mkdir()
    seen: list = []
    watcher = Watcher(docs, open_store(index_dir=str(tmp_path / "idx")), BuildOptions(model=ModelSpec(str(fake_model))), seen.append)
    assert watcher.stop(wait_s=1)
    watcher.start_background()
    assert watcher.stop(wait_s=1) and not (tmp_path / "idx").exists() and seen == []
    assert not any(thread.name == "lgpt-watch" for thread in threading.enumerate())


def test_events_unavailable_for_a_reason_other_than_a_limit_give_no_limit_advice(tmp_path):
    """A name the events' decoder cannot read (a file name that is not UTF-8) is no inotify limit: polling takes
    over, and the reason does not tell the user to raise one."""
    from localgpt_index.core.failpoints import set_hook
    from localgpt_index.watch.source import EventSource

    def undecodable(name: str) -> None:
        if name == "watch.native":
            raise RuntimeError(f'Unable to decode path "{tmp_path}/caf\\xE9.txt" to string')

    armed: queue.Queue = queue.Queue()
    set_hook(undecodable)
    try:
        source = EventSource(tmp_path, lambda paths: None, lambda *state: armed.put(state), lambda *why: armed.put(why))
        source.start()
        polling, reason = armed.get(timeout=GUARD_S)
        source.stop()
    finally:
        set_hook(None)
    assert polling is True and "Unable to decode path" in reason and "max_user_watches" not in reason, reason


def test_ignored_changes_right_after_ignored_ones_are_not_said_again(tmp_path, fake_model):
    """`watch --json > docs/watch.log`: each event written changes an ignored file, whose event was written, and so
    on, about ten a second. An ignored batch after another is not said again; one after a kept batch is."""
    from localgpt_index.indexing.options import BuildOptions
    from localgpt_index.index.open import open_store
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.watch.watcher import Watcher

    docs = tmp_path / "docs"
    docs.mkdir()
    seen: list = []
    watcher = Watcher(docs, open_store(index_dir=str(tmp_path / "idx")), BuildOptions(model=ModelSpec(str(fake_model))), seen.append)
    (docs / "watch.log").write_text("{}")  # (a file of no kind the index reads: ignored)
    picture(docs / "a.png", 1)
    log, kept = str(docs / "watch.log"), str(docs / "a.png")
    for batch in ({log: False}, {log: False}, {log: False}, {kept: False}, {log: False}, {log: False}):
        watcher._changes(batch)
    assert [(event.paths, event.ignored) for event in seen] == [((), 1), ((kept,), 0), ((), 1)]
