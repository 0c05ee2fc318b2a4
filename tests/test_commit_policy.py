"""The commit policy (indexing/commit.py) with no encoder and no torch: synthetic engine events into a
real local store transaction, and what each commit holds."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from localgpt_index.indexing.commit import CommitCadence, CommitPolicy
from localgpt_index.indexing.options import BuildReport, StageTimer
from localgpt_index.indexing.plan import BuildPlan, Embed
from localgpt_index.core.errors import DocumentError
from localgpt_index.index.format.manifest import Manifest, ModelInfo, Settings
from localgpt_index.index.local.store import LocalStore
from localgpt_index.ingest.discover import discover
from localgpt_index.ingest.events import DocumentDone, DocumentFailed, DocumentOpened, OpenedDocument, PagesEncoded

DIM = 4


@dataclass
class Options:
    """The few build options the policy reads."""

    rebuild: bool = False
    strict: bool = False
    commit_every_pages: int | None = 2
    commit_every_s: float = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _plan(folder: Path, names: list[str]) -> BuildPlan:
    for name in names:
        (folder / name).write_bytes(f"%PDF-1.4 {name}".encode())
    found = {Path(f.path).name: f for f in discover(folder).files}
    return BuildPlan(embed=[Embed(found[name], f"{i + 1:064x}", {}) for i, name in enumerate(names)])


_seeds = itertools.count(1)


def _page(number: int) -> np.ndarray:
    """A page's vectors, unlike any other page's (segments are named by their content)."""
    return np.full((3, DIM), next(_seeds) / 64, dtype=np.float16)


class Run:
    """A policy on a real transaction; every commit's manifest is kept."""

    def __init__(self, tmp_path: Path, names: list[str], options: Options, clock: Clock | None = None) -> None:
        docs = tmp_path / "docs"
        docs.mkdir(exist_ok=True)
        self.plan = _plan(docs, names)
        self.store = LocalStore(tmp_path / "idx" / "default")
        self.report = BuildReport(index=self.store.location, source=str(docs), strict=options.strict)
        self.options, self.clock = options, clock or Clock()
        self.commits: list[Manifest] = []
        self.discarded: list[int] = []

    def __call__(self, *events, finish: bool = True) -> Run:
        with self.store.begin() as txn:
            commit = txn.commit
            txn.commit = lambda *args: self.commits.append(commit(*args)) or self.commits[-1]
            policy = CommitPolicy(txn, self.plan, self.options, self.report, StageTimer(self.report), None,
                                  lambda message: None, 0, clock=self.clock)
            policy.model_info = ModelInfo(id="m", family="f", fingerprint="x", dim=DIM)
            policy.settings = Settings(dim=DIM)
            policy.discard = self.discarded.append
            for event in events:
                if callable(event):
                    event()
                else:
                    policy.handle(event)
            if finish:
                policy.finish()
        return self

    def held(self, commit: int) -> tuple[dict, dict]:
        """(documents, in progress) of a commit, as path name -> pages."""
        manifest = self.commits[commit]
        return ({Path(d.path).name: d.pages for d in manifest.documents},
                {Path(d.path).name: d.pages for d in manifest.in_progress})


def _opened(number: int, pages: int) -> DocumentOpened:
    return DocumentOpened(number, OpenedDocument(pages=pages))


def _encoded(*numbers: int) -> PagesEncoded:
    return PagesEncoded(tuple((n, _page(n)) for n in numbers))


def test_each_commit_holds_the_complete_documents_and_the_long_one_in_progress(tmp_path):
    run = Run(tmp_path, ["long.pdf", "short.pdf"], Options(commit_every_pages=2))(
        _opened(0, 3), _encoded(0, 0),  # two pages: due, the long document commits inside itself
        _encoded(0), DocumentDone(0, 3), _opened(1, 1), _encoded(1), DocumentDone(1, 1),
    )
    assert [m.generation for m in run.commits] == [1, 2, 3]
    assert run.held(0) == ({}, {"long.pdf": 2})
    assert run.held(1) == ({"long.pdf": 3}, {"short.pdf": 1})  # its third page, then the short one's: due
    assert run.held(2) == ({"long.pdf": 3, "short.pdf": 1}, {})
    assert len(run.commits[1].documents[0].spans) == 2  # pages 1-2 in the first segment, 3 in the second
    assert run.report.indexed == 2 and run.report.pages_embedded == 4 and run.report.generation == 3


def test_a_document_is_committed_only_once_its_every_page_has_come(tmp_path):
    """Its end can come before its last pages' vectors (the local engine batches)."""
    run = Run(tmp_path, ["a.pdf"], Options(commit_every_pages=100))(
        _opened(0, 2), DocumentDone(0, 2), _encoded(0), finish=False)
    assert run.commits == [] and run.report.indexed == 0
    run = Run(tmp_path, ["a.pdf"], Options(commit_every_pages=100))(_opened(0, 2), DocumentDone(0, 2), _encoded(0, 0))
    assert run.held(0) == ({"a.pdf": 2}, {}) and run.report.indexed == 1


def test_a_failed_document_is_recorded_and_its_pages_dropped_by_the_engine(tmp_path):
    run = Run(tmp_path, ["bad.pdf", "good.pdf"], Options(commit_every_pages=100))(
        _opened(0, 2), _opened(1, 1),
        PagesEncoded(((0, _page(0)), (0, DocumentError("encode", "refused")), (1, _page(1)))),
        _encoded(0),  # a page of the failed document still in flight: ignored
        DocumentDone(1, 1),
    )
    assert run.discarded == [0]
    assert run.held(0) == ({"good.pdf": 1}, {})
    assert [(f.path.rsplit("/", 1)[-1], f.stage, f.reason) for f in run.commits[0].failures] == [("bad.pdf", "encode", "refused")]
    assert run.report.failed == 1 and run.report.exit_code == 3


def test_a_strict_build_with_a_failure_commits_nothing(tmp_path):
    run = Run(tmp_path, ["bad.pdf", "good.pdf"], Options(strict=True, commit_every_pages=1))(
        DocumentFailed(0, DocumentError("render", "poppler failed")),
        _opened(1, 2), _encoded(1), _encoded(1), DocumentDone(1, 2),
    )
    assert run.commits == [] and run.report.exit_code == 1 and not run.report.committed


def test_a_rebuild_seals_segments_on_the_cadence_and_commits_once(tmp_path):
    run = Run(tmp_path, ["a.pdf", "b.pdf"], Options(rebuild=True, commit_every_pages=1))(
        _opened(0, 2), _encoded(0), _encoded(0), DocumentDone(0, 2), _opened(1, 1), _encoded(1), DocumentDone(1, 1),
    )
    assert len(run.commits) == 1
    assert run.held(0) == ({"a.pdf": 2, "b.pdf": 1}, {})
    assert len(run.commits[0].segments) == 3  # sealed every page: segments of bounded size


def test_without_a_page_cadence_commits_wait_for_the_seconds(tmp_path):
    clock = Clock()
    options = Options(commit_every_pages=None, commit_every_s=10.0)

    def later() -> None:
        clock.now += 11

    run = Run(tmp_path, ["a.pdf", "b.pdf"], options, clock)(
        _opened(0, 1), _encoded(0), DocumentDone(0, 1), later, _opened(1, 1),  # due on the next event
        _encoded(1), DocumentDone(1, 1),
    )
    assert [run.held(i) for i in range(len(run.commits))] == [({"a.pdf": 1}, {}), ({"a.pdf": 1, "b.pdf": 1}, {})]


def test_the_cadence_spaces_commits_out_while_they_are_slow():
    clock = Clock()
    cadence = CommitCadence(None, 600.0, once=False, clock=clock)
    assert cadence.due(999) is None and cadence.due(1000) == "commit"
    cadence.committed(seconds=100.0)  # a huge catalog: commits wait 20 times as long
    assert cadence.due(5000) is None
    clock.now += 2000
    assert cadence.due(1000) == "commit"
    assert CommitCadence(5, 600.0, once=False, clock=clock).due(5) == "commit"  # --commit-every: as given
    assert CommitCadence(5, 600.0, once=True, clock=clock).due(5) == "seal"


def test_a_file_changed_during_the_build_is_not_committed_with_the_old_vectors(tmp_path):
    run = Run(tmp_path, ["a.pdf"], Options())

    def rewrite() -> None:
        path = Path(run.plan.embed[0].file.path)
        path.write_bytes(b"%PDF-1.4 other content, longer")

    run(_opened(0, 1), _encoded(0), rewrite, DocumentDone(0, 1))
    assert run.held(0) == ({}, {})
    assert [f.stage for f in run.commits[0].failures] == ["discover"]
    assert "changed during the build" in run.commits[0].failures[0].reason


def test_an_event_that_is_not_an_engine_event_is_refused(tmp_path):
    with pytest.raises(TypeError, match="not an engine event"):
        Run(tmp_path, ["a.pdf"], Options())(object(), finish=False)


def test_the_commit_policy_needs_no_model_layer():
    """Imported alone, it brings in neither the models package nor torch."""
    code = ("import sys, localgpt_index.indexing.commit; "
            "bad = [m for m in sys.modules if m.startswith(('localgpt_index.models', 'torch', 'transformers'))]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
