"""The writers the power-loss harness (localgpt_index/testing/powerloss.py) runs, and its checks.

Each `Scenario` prepares a state with the real disk (documents, and usually an index), then runs one
writer in this process through a `RecordingDisk`: `build` (first, incremental, --rebuild), `remove`,
`upgrade`, `import` and the watcher's commit. `explore` runs it once to count its disk operations,
then again with the power lost at each one (and once after it returned), and for each loss pattern
boots the image the disk would hold and checks it:

- every write went through the disk layer (the model holds what the real folder holds);
- HEAD is the previous generation or one this run wrote, and never older than the last commit the
  run claimed (the "after-head" failpoint, or the command's return): a claimed commit is never lost;
- `verify` finds nothing (every file the generation names, every checksum: vectors, offsets, text,
  codes, PDFs), so the index is exactly that generation;
- the next run of the writer completes it: the index then holds, page for page, what an
  uninterrupted run left (vectors, page text, documents), and `verify` passes again.

`faults` runs the same writers with ENOSPC, EIO or a short write at each operation instead: the
command ends with the documented message and exit code (no traceback, no "internal error"), the
index is a generation as above, and the next run completes it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from docgen import make_pdf, make_png

from localgpt_index.index.transaction import kept
from localgpt_index.testing.powerloss import FAULT_KINDS, LOSS_PATTERNS, Fault, PowerLost, RecordingDisk, capture, materialize, recording

INDEX = "idx/default"  # the index, relative to the recording's root (the folder its --index-dir is made in)
STUB_SOFFICE = """#!/bin/sh
# stands in for LibreOffice: copies the PDF prepared for each file's bytes (the same bytes every run)
while [ $# -gt 0 ]; do case "$1" in --outdir) out="$2"; shift 2; break;; *) shift;; esac; done
for f in "$@"; do name=$(basename "$f"); sum=$(sha256sum "$f" | cut -c1-64); cp "{pdfs}/$sum.pdf" "$out/${{name%.*}}.pdf"; done
"""


@dataclass
class Result:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    retrying: bool = False  # a watcher's build that could not write, to be tried again (its message in stderr)


@dataclass
class Workspace:
    """work/docs: the documents; work/store: the recorded folder, holding the index folder idx/."""

    work: Path
    model: Path

    @property
    def docs(self) -> Path:
        return self.work / "docs"

    @property
    def store(self) -> Path:
        return self.work / "store"

    @property
    def index_dir(self) -> Path:
        return self.store / "idx"

    @property
    def index(self) -> Path:
        return self.store / INDEX

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.work / 'bin'}{os.pathsep}{os.environ['PATH']}", "LGPT_OCR": "never"}

    def cli(self, *args: str) -> Result:
        from click.testing import CliRunner

        from localgpt_index.cli import main

        with poppler_reused():
            result = CliRunner().invoke(main, list(args), env=self.env, catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    def build(self, *args: str) -> Result:
        return self.cli("build", str(self.docs), "--index-dir", str(self.index_dir), "--model", str(self.model), *args)


# poppler_reused's answers, filled from the writer's threads (setting an item is atomic; two threads asking the same
# at once both run poppler); the functions are swapped by the harness's thread, one writer at a time
_POPPLER: dict[tuple[str, ...], tuple[tuple[bytes, str], dict[str, bytes]]] = {}


@contextmanager
def poppler_reused() -> Iterator[None]:
    """For the block, each poppler call the ingest layer makes (render._run_poppler) answered as it was the first
    time for the same arguments and PDF content: its output, and pdftoppm's page files written again."""
    from localgpt_index.ingest import render, text

    real = render._run_poppler

    def reused(args: list[str], timeout_s: float, what: str, check: bool = True) -> tuple[bytes, str]:
        pages_root = args[-1] if args[0] == "pdftoppm" else None  # pdftoppm's last argument: its files' root
        key = (str(check), *(_content_key(arg) for arg in (args[:-1] if pages_root else args)))
        if key not in _POPPLER:
            answer = real(args, timeout_s, what, check)
            files = {path[len(pages_root):]: Path(path).read_bytes() for path in glob.glob(glob.escape(pages_root) + "-*")} \
                if pages_root else {}
            _POPPLER[key] = answer, files
        answer, files = _POPPLER[key]
        for suffix, data in files.items():
            Path(pages_root + suffix).write_bytes(data)  # (pages_root is set where files is not empty)
        return answer

    render._run_poppler = text._run_poppler = reused
    try:
        yield
    finally:
        render._run_poppler = text._run_poppler = real


def _content_key(arg: str) -> str:
    """A file's path as its content's hash (the same path holds other bytes after an edit); other arguments as given."""
    if os.path.isfile(arg):
        return "sha256:" + hashlib.sha256(Path(arg).read_bytes()).hexdigest()
    return arg


def documents_v1(ws: Workspace) -> None:
    """Four documents: two PDFs, a picture and a text file the stand-in LibreOffice converts."""
    make_pdf(ws.docs / "a.pdf", ["alpha report page one", "alpha report page two", "alpha report page three"])
    make_pdf(ws.docs / "sub" / "b.pdf", ["beta memo"])
    make_png(ws.docs / "c.png", "gamma receipt 42")
    text = b"delta notes\n"
    (ws.docs / "d.txt").write_bytes(text)
    make_pdf(ws.work / "converted" / f"{hashlib.sha256(text).hexdigest()}.pdf", ["delta notes"])


def documents_v2(ws: Workspace) -> None:
    """v1 edited: a.pdf rewritten, sub/b.pdf deleted, e.pdf added."""
    make_pdf(ws.docs / "a.pdf", ["alpha report, second edition", "alpha appendix"])
    (ws.docs / "sub" / "b.pdf").unlink()
    make_pdf(ws.docs / "e.pdf", ["epsilon plan page one", "epsilon plan page two"])


def new_workspace(work: Path, model: Path) -> Workspace:
    ws = Workspace(work, model)
    for folder in (ws.docs, ws.store, work / "bin", work / "converted"):
        folder.mkdir(parents=True, exist_ok=True)
    soffice = work / "bin" / "soffice"
    soffice.write_text(STUB_SOFFICE.format(pdfs=work / "converted"))
    soffice.chmod(soffice.stat().st_mode | stat.S_IXUSR)
    documents_v1(ws)
    return ws


def ok(result: Result, *codes: int) -> Result:
    assert result.exit_code in (codes or (0,)), f"exit {result.exit_code}: {result.stderr[-2000:]}"
    return result


@dataclass
class Scenario:
    name: str
    prepare: Callable[[Workspace], None]  # the state before, with the real disk
    run: Callable[[Workspace], Result]  # the writer under test
    finish: Callable[[Workspace], Result]  # after a reboot: what completes it
    finish_codes: tuple[int, ...] = (0,)


def _built(ws: Workspace, *args: str) -> None:
    ok(ws.build(*args))


def _built_then_edited(ws: Workspace) -> None:
    _built(ws)
    documents_v2(ws)


def _built_without_codes(ws: Workspace) -> None:
    from helpers import artifacts_plugged

    from localgpt_index.index.scoring.codes import artifact as codes

    with artifacts_plugged(unplugged=(codes,)):
        _built(ws)


def _exported(ws: Workspace) -> None:
    ok(ws.cli("build", str(ws.docs), "--index-dir", str(ws.work / "other"), "--model", str(ws.model)))
    ok(ws.cli("export", "--format", "byaldi", "--index-dir", str(ws.work / "other"), str(ws.work / "byaldi")))


def _watcher_commit(ws: Workspace) -> Result:
    from localgpt_index.indexing.options import BuildOptions, BuildSettings
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.open import open_store
    from localgpt_index.watch.watcher import Watcher

    store = open_store(None, ws.index_dir, None)
    options = BuildOptions(model=ModelSpec(str(ws.model)), commit_every_pages=2, settings=BuildSettings(ocr="never"))
    watcher = Watcher(ws.docs, store, options)
    with poppler_reused():
        watcher.build(("a.pdf", "e.pdf", "sub/b.pdf"))
    said = watcher.failure or (watcher.retrying.message if watcher.retrying is not None else "")
    return Result(watcher.exit_code, "", said, retrying=watcher.retrying is not None)


def scenarios() -> list[Scenario]:
    build = lambda ws: ws.build("--commit-every", "2")  # noqa: E731  (several commits in one build)
    remove = lambda ws: ws.cli("remove", str(ws.docs / "a.pdf"), "--index-dir", str(ws.index_dir))  # noqa: E731
    upgrade = lambda ws: ws.cli("upgrade", "--index-dir", str(ws.index_dir))  # noqa: E731
    import_ = lambda ws: ws.cli("import", "--format", "byaldi", str(ws.work / "byaldi"), "--model", str(ws.model),  # noqa: E731
                                "--index-dir", str(ws.index_dir))
    return [
        Scenario("build (first)", lambda ws: None, build, build),
        Scenario("build (incremental)", _built_then_edited, build, build),
        Scenario("build --rebuild", _built, lambda ws: ws.build("--rebuild", "--commit-every", "2"), build),
        Scenario("remove", _built, remove, remove, (0, 1)),  # again: 1 when it was already removed
        Scenario("upgrade", _built_without_codes, upgrade, upgrade),
        Scenario("import", _exported, import_, import_, (0, 1)),  # again: 1 when the index already holds it
        Scenario("watcher's commit", _built_then_edited, _watcher_commit, _watcher_commit),
    ]


# what an index holds, page for page


def contents(index: Path) -> dict:
    """Documents (path, sha256, pages, metadata), each page's vectors (sha256) and text: what a reader
    gets, whatever the generation's number, segments or files."""
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.index.text.artifact import page_texts

    store = LocalStore(index)
    view = store.open_view()
    out = {}
    for doc in view.documents:
        texts = page_texts(view.manifest.segments, doc, view.blobs())
        vectors = [hashlib.sha256(page.tobytes()).hexdigest()[:16] for page in view.page_vectors(doc)]
        out[doc.path] = {"sha256": doc.sha256, "pages": doc.pages, "metadata": doc.metadata, "vectors": vectors,
                         "text": texts}
    return out


def verify(index: Path) -> list[str]:
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    try:
        return LocalStore(index).verify()
    except IndexProblem as exc:
        return [exc.message]


# the exploration


@dataclass
class Case:
    scenario: str
    crash_at: int | None  # None: the power was lost after the command returned
    op: str
    pattern: str
    problems: list[str]


@dataclass
class Exploration:
    scenario: str
    operations: int = 0
    cases: list[Case] = field(default_factory=list)
    seconds: float = 0.0
    boots: int = 0  # distinct images booted (the others were met before)
    unreached: int = 0  # faults at an operation the run did not reach

    @property
    def failed(self) -> list[Case]:
        return [case for case in self.cases if case.problems]


class Harness:
    """One scenario's workspace, its state before, and what an uninterrupted run leaves."""

    def __init__(self, scenario: Scenario, work: Path, model: Path) -> None:
        self.scenario = scenario
        self.ws = new_workspace(work, model)
        scenario.prepare(self.ws)
        self.before = capture(self.ws.store)
        self.before_head = self.before.get(f"{INDEX}/HEAD")
        disk = self.recorded(None)
        self.operations = len(disk.ops)
        self.labels = [f"{op.kind} {_generic(op.path)}" for op in disk.ops]
        self.reference = contents(self.ws.index)
        self.booted: dict[tuple[str, bool], list[str]] = {}
        self.boots = 0
        self.result: Result | None = None

    def restore(self) -> None:
        materialize(self.ws.store, self.before)

    def recorded(self, crash_at: int | None, fault: Fault | None = None) -> RecordingDisk:
        """The writer run from the state before, through a recording disk; what it returned in `self.result`
        (None: the power was lost)."""
        self.restore()
        disk = RecordingDisk(self.ws.store, crash_at=crash_at, fault=fault, head=f"{INDEX}/HEAD")
        self.result = None
        with recording(disk):
            try:
                self.result = self.scenario.run(self.ws)
            except PowerLost:
                pass
        if not disk.dead:
            disk.claim()  # it returned: what it committed must survive
        untracked = disk.untracked()
        assert not untracked, f"{self.scenario.name}: writes outside the disk layer: {untracked}"
        return disk

    def killed_then_lost(self, crash_at: int) -> list[Case]:
        return _killed_then_lost(self, crash_at)

    @staticmethod
    def allowed_heads(disk: RecordingDisk, before: bytes | None) -> list[bytes | None]:
        """The HEADs the index may have after the power loss: the last one claimed (or `before`, the HEAD the
        run started from), and any written after that claim."""
        last = max(disk.claims, default=None)
        if last is None:
            return [before, *[head for _, head in disk.heads]]
        durable = [head for number, head in disk.heads if number <= last]
        base = durable[-1] if durable else before
        return [base, *[head for number, head in disk.heads if number > last]]

    def check(self, disk: RecordingDisk, pattern: str, rng: random.Random, finish: bool,
              before: bytes | None | str = "prepared") -> list[str]:
        """Boot the image `pattern` leaves: the problems found (none when everything held). An image met
        before (temporary files' names aside) is not booted again: what follows depends on the image only.
        `before`: the HEAD the run started from (default: the prepared state's)."""
        image = disk.image(pattern, rng)
        head = image.get(f"{INDEX}/HEAD")
        allowed = self.allowed_heads(disk, self.before_head if before == "prepared" else before)
        if head not in allowed:
            return [f"HEAD is {_head(head)}; after this power loss it may only be one of {[_head(h) for h in allowed]}"]
        key = (_digest(image), finish)
        if key not in self.booted:
            self.booted[key] = self._boot(image, head is not None, finish)
            self.boots += 1
        return self.booted[key]

    def _boot(self, image: dict[str, bytes | None], has_head: bool, finish: bool) -> list[str]:
        materialize(self.ws.store, image)
        problems = verify(self.ws.index) if has_head else []
        if problems or not finish:
            return problems
        result = self.scenario.finish(self.ws)
        if result.exit_code not in self.scenario.finish_codes:
            return [f"the next run exited {result.exit_code}: {result.stderr.strip()[-500:]}"]
        problems = verify(self.ws.index)
        if not problems and contents(self.ws.index) != self.reference:
            problems.append("after the next run the index differs from what an uninterrupted run leaves")
        return problems


def _killed_then_lost(harness: Harness, crash_at: int) -> list[Case]:
    """The writer killed before operation `crash_at`, run again (its recording going on from the first's
    model: the folder holding the "kill" image), then the power lost after it returned: three patterns."""
    scenario = harness.scenario
    first = harness.recorded(crash_at)
    killed = first.image("kill", random.Random(0))
    materialize(harness.ws.store, killed)
    second = RecordingDisk(harness.ws.store, head=f"{INDEX}/HEAD", model=first.model)
    with recording(second):
        harness.result = scenario.finish(harness.ws)
    second.claim()
    exit_code = harness.result.exit_code
    problems = [] if exit_code in scenario.finish_codes else [f"the next run exited {exit_code}"]
    cases = []
    for pattern in ("lost", "metadata", "torn"):
        found = problems or harness.check(second, pattern, random.Random(f"{crash_at}:{pattern}"), finish=False,
                                          before=killed.get(f"{INDEX}/HEAD"))
        cases.append(Case(scenario.name, crash_at, harness.labels[crash_at - 1], f"killed, then {pattern}", found))
    return cases


def _head(raw: bytes | None) -> str:
    if raw is None:
        return "missing"
    try:
        return f"generation {json.loads(raw)['generation']}"
    except (ValueError, KeyError, TypeError):
        return f"unreadable ({raw[:40]!r})"


def _digest(image: dict[str, bytes | None]) -> str:
    import re

    digest = hashlib.sha256()
    for rel, data in sorted((re.sub(r"\.tmp-[0-9a-f]{12}", ".tmp-*", rel), data) for rel, data in image.items()):
        digest.update(f"{rel}\0{'-' if data is None else len(data)}\0".encode())
        digest.update(hashlib.sha256(data or b"").digest())
    return digest.hexdigest()


def _generic(path: str) -> str:
    """A path with its content names and temporary tags generalised: the same step in every run."""
    import re

    path = re.sub(r"\.tmp-[0-9a-f]{12}", ".tmp-*", path)
    path = re.sub(r"seg-[0-9a-f]{40}", "seg-*", path)
    path = re.sub(r"[0-9a-f]{64}", "*", path)
    return re.sub(r"gen-\d{8}", "gen-N", path)


def explore(scenario: Scenario, work: Path, model: Path, *, every: int = 1, seeds: int = 2, finish: bool = True,
            patterns: tuple[str, ...] = LOSS_PATTERNS, before: tuple[str, ...] | None = None) -> Exploration:
    """Power lost at every `every`-th disk operation of the scenario's writer (or only before those whose
    label starts with one of `before`: () for none) and after it returned; each loss pattern booted (the
    random ones with `seeds` seeds) and checked."""
    started = time.monotonic()
    harness = Harness(scenario, work, model)
    found = Exploration(scenario.name, harness.operations)
    numbers = range(1, harness.operations + 1, every)
    points: list[int | None] = [n for n in numbers if before is None or harness.labels[n - 1].startswith(before)]
    points.append(None)
    for crash_at in points:
        disk = harness.recorded(crash_at)
        op = harness.labels[crash_at - 1] if crash_at else "after it returned"
        for pattern in patterns:
            for seed in range(seeds if pattern in ("ordered", "torn") else 1):
                rng = random.Random(f"{scenario.name}:{crash_at}:{pattern}:{seed}")
                problems = harness.check(disk, pattern, rng, finish)
                found.cases.append(Case(scenario.name, crash_at, op, pattern, problems))
    found.seconds, found.boots = time.monotonic() - started, harness.boots
    return found


def explore_twice(scenario: Scenario, work: Path, model: Path, *, every: int = 1) -> Exploration:
    """A writer killed at every `every`-th operation, the next run of it completing the work, then the power
    lost: what the killed writer left undurable must not cost the next run's claimed commit (it may build
    on it or reuse it). See `Harness.killed_then_lost`."""
    started = time.monotonic()
    harness = Harness(scenario, work, model)
    found = Exploration(scenario.name, harness.operations)
    for crash_at in range(1, harness.operations + 1, every):
        found.cases += harness.killed_then_lost(crash_at)
    found.seconds, found.boots = time.monotonic() - started, harness.boots
    return found


def faults(scenario: Scenario, work: Path, model: Path, *, every: int = 1,
           kinds: tuple[str, ...] = FAULT_KINDS, rotate: bool = False) -> Exploration:
    """A full disk, an I/O error or a short write at every `every`-th operation (short writes: at writes only):
    the command's message and exit code, the index it leaves, and the next run. A fault the run did not
    reach (the order of its operations can vary) is counted in `unreached`, not as a case. `rotate`: one fault
    an operation, its kind taken in turn among those that apply there (every operation faulted, a third of the runs)."""
    started = time.monotonic()
    harness = Harness(scenario, work, model)
    found = Exploration(scenario.name, harness.operations)
    for kind in kinds:
        for at in range(1, harness.operations + 1, every):
            applies = [k for k in kinds if k != "short" or harness.labels[at - 1].startswith("write ")]
            if kind not in applies or (rotate and kind != applies[at % len(applies)]):
                continue
            disk = harness.recorded(None, Fault(at, kind))
            if disk.faulted is None:
                found.unreached += 1
                continue
            problems = _fault_problems(harness, disk)
            if not problems:
                problems = harness.check(disk, "kill", random.Random(0), finish=True)
            found.cases.append(Case(scenario.name, at, harness.labels[at - 1], kind, problems))
    found.seconds, found.boots = time.monotonic() - started, harness.boots
    return found


def _fault_problems(harness: Harness, disk: RecordingDisk) -> list[str]:
    """What the command said about the fault: one message that says why and what the index keeps, exit 1
    (a watcher: a build to try again); exit 0 only after a step a writer may pass over."""
    result, faulted = harness.result, disk.faulted
    assert faulted is not None
    if result is None:
        return ["the command raised instead of returning"]
    said = result.stderr + result.stdout
    if "Traceback" in said or "internal error" in said:
        return [f"a traceback or an internal error: {said.strip()[-600:]}"]
    if result.exit_code == 0 and not result.retrying:
        return [] if _best_effort(disk.ops, faulted) else [f"exit 0 after a fault at {faulted.kind} {faulted.path}"]
    if result.exit_code not in (0, 1):
        return [f"exit {result.exit_code}, not 1 (a write failed: the index keeps its last commit)"]
    if not any(word in said for word in ("No space left", "Input/output error")):
        return [f"the message does not say why: {said.strip()[-600:]}"]
    head = (harness.ws.index / "HEAD").read_bytes() if (harness.ws.index / "HEAD").exists() else None
    generation = json.loads(head)["generation"] if head else 0
    if _head_made_durable(disk.ops, faulted):  # HEAD is in place: the new generation answers, maybe not durable
        wanted = f"could not make generation {generation} "
    elif faulted.path.endswith("lock") or "writers' lock" in said:
        wanted = "cannot take the writers' lock"
    else:
        wanted = f"the index keeps {kept(generation)}."
    return [] if wanted in said else [f"the message does not say {wanted!r}: {said.strip()[-600:]}"]


def _head_made_durable(ops, op) -> bool:
    """`op` is the fsync of the folder right after HEAD's rename."""
    return op.kind == "fsync-dir" and op.number > 1 and ops[op.number - 2].kind == "rename" and \
        ops[op.number - 2].path == f"{INDEX}/HEAD"


def _best_effort(ops, op) -> bool:
    """Steps whose failure a writer may pass over: deleting what no generation names, and writing the
    records that only save time (checked.json) or inform (lock.owner), their folder's fsync included."""
    records = ("checked.json", "lock.owner")
    if op.kind == "fsync-dir" and op.number > 1:
        op = ops[op.number - 2]  # the rename it makes durable
    return op.kind == "unlink" or op.path.endswith(records)


def summary(found: list[Exploration]) -> str:
    lines = []
    for exploration in found:
        lines.append(f"{exploration.scenario}: {exploration.operations} operations, {len(exploration.cases)} cases "
                     f"({exploration.boots} distinct images booted), {len(exploration.failed)} failed, {exploration.seconds:.1f} s")
        for case in exploration.failed[:5]:
            where = f"operation {case.crash_at} ({case.op})" if case.crash_at else case.op
            lines.append(f"  {where}, {case.pattern}: {'; '.join(case.problems)[:400]}")
    return "\n".join(lines)


def workspace_cleanup(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
