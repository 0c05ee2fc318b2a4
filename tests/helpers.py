"""Helpers shared by the test files: building an index through the CLI, document sets, waiting on
a condition with a deadline, and finding the processes one test started (never the machine's others)."""

from __future__ import annotations

import ast
import functools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import psutil

from docgen import make_pdf

MARK = "LGPT_TEST_RUN"  # an environment variable every process a test starts inherits (see `process_mark`)


def build_ok(*args: str, env: dict | None = None):
    """`lgpt-index build ARGS...` through the CLI (in this process); it must exit 0 (else its stderr is shown)."""
    from conftest import run_cli

    result = run_cli("build", *args, env=env)
    assert result.exit_code == 0, result.stderr
    return result


def build_json(docs: Path, index: Path, *args: str):
    """`lgpt-index build DOCS --index-dir INDEX --json ARGS...`: the result and its report (None if none)."""
    import json

    from conftest import run_cli

    result = run_cli("build", str(docs), "--index-dir", str(index), "--json", *args)
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def verify_ok(index: Path) -> None:
    """`lgpt-index verify --index-dir INDEX` exits 0 and reports the index sound."""
    import json

    from conftest import run_cli

    out = run_cli("verify", "--index-dir", str(index), "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["ok"] is True


def open_qdrant(folder: Path):
    """A Qdrant client on the local (embedded) store in `folder`."""
    from qdrant_client import QdrantClient

    return QdrantClient(path=str(folder))


def make_pdfs(folder: Path, count: int, pages: int, stem: str = "report") -> list[Path]:
    """`count` PDFs named STEM-N.pdf, each of `pages` pages saying "STEM N page P"."""
    return [make_pdf(folder / f"{stem}-{n}.pdf", [f"{stem} {n} page {p}" for p in range(pages)]) for n in range(count)]


def page_snippet(text: str, query: str, language: str | None = None) -> str:
    """The snippet a text query's hit on a page of `text` gets: a text index of that one page, the query's matches
    on it (index/text/lexicon.QueryAnalysis), their snippet."""
    from localgpt_index.index.text.engine import LexicalIndex, LexicalPage
    from localgpt_index.index.text.lexicon import QueryAnalysis
    from localgpt_index.index.text.snippet import snippet

    index = LexicalIndex.create(languages=[language] if language else ())
    index.update([], [LexicalPage("/page.pdf", 1, text)])
    matches = QueryAnalysis(index, query).page("/page.pdf", 1)
    assert matches is not None
    return snippet(matches)


def free_port() -> int:
    """A loopback port nothing listens on once this returns (the kernel's pick, released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "the condition",
               proc=None, interval: float = 0.05) -> object:
    """Poll `condition` until it is true (returned) or `timeout` passes (the test fails); if `proc`
    (a Popen) ends first, fail at once with what it printed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie left to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked_processes(token: str, cmdline_contains: str = "") -> list[psutil.Process]:
    """The live processes, other than this one, whose environment has MARK=token (the processes this
    test started and their descendants, even orphaned ones), optionally only those whose command line
    contains `cmdline_contains`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARK) != token:
                continue
            if cmdline_contains and cmdline_contains not in " ".join(proc.cmdline()):
                continue
            found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def descendants(pid: int, cmdline_contains: str = "") -> list[psutil.Process]:
    """The live descendants of process `pid` (optionally only those whose command line, as they set it,
    contains `cmdline_contains`)."""
    found = []
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE and cmdline_contains in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def held_build(args: list[str], release: Path, point: str, nth: int = 1, env: dict | None = None):
    """`lgpt-index ARGS...` in a process of its own (a Popen, output piped), held at the `nth` time it
    reaches the failpoint `point` until the file `release` exists; returned once it is held there."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "localgpt_index", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {}), "LGPT_FAILPOINT": f"{point}:{nth}:hold",
                                    "LGPT_FAILPOINT_HOLD": str(release)})
    try:
        wait_until(Path(f"{release}.reached").exists, 120, f"the failpoint {point}", process)
    except BaseException:
        process.kill()  # never left running behind a failed test
        process.communicate()
        raise
    return process


def signal_held(process, release: Path, sig: int) -> str:
    """`sig` to a build `held_build` holds, then the hold released: its stderr once it has ended (killed
    if it did not within a minute)."""
    try:
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        release.touch()
        if process.poll() is None:
            process.kill()
            process.communicate()
    return stderr


@functools.lru_cache(maxsize=None)
def parsed(source: str) -> ast.Module:
    """A module's syntax tree, parsed once a process for each source text: the layer, size and docstring checks
    each walk the whole package (about a second of CPU a walk), and a planted copy of it shares the trees of its
    unchanged modules. Callers only read it."""
    return ast.parse(source)


def size_problems(files: list[Path], root: Path) -> list[str]:
    """Modules over 800 lines and functions over 60 (issue 40's guides; no limit on a class)."""
    too_long = []
    for path in files:
        text = path.read_text()
        name = path.relative_to(root)
        if len(text.splitlines()) > 800:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(parsed(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                too_long.append(f"{name}: {node.name}: {node.end_lineno - node.lineno + 1} lines")
    return too_long


def report_index(work: Path, model: Path, reports: int, pages: int) -> dict:
    """`reports` PDFs of `pages` pages and a scan, report-0 tagged team=finance, built into work/idx."""
    import json

    from conftest import run_cli
    from docgen import make_png

    docs = work / "docs"
    for i in range(reports):
        make_pdf(docs / f"report-{i}.pdf", [f"report {i} page {p}" for p in range(pages)])
    make_png(docs / "scan.png", "a scan")
    rules = work / "meta.json"
    rules.write_text(json.dumps({"report-0.pdf": {"team": "finance"}}))
    index = work / "idx"
    assert run_cli("build", str(docs), "--model", str(model), "--index-dir", str(index), "--metadata", str(rules)).exit_code == 0
    return {"docs": docs, "index": index, "work": work}


def flip_byte(path: Path, offset: int) -> None:
    """Damage a file in place: invert the byte at `offset` (same size; the modification time moves)."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


@contextmanager
def counted_failpoint(point: str) -> Iterator[list[str]]:
    """Every pass through the failpoint `point`, from any thread, in the list yielded (core.failpoints' hook)."""
    from localgpt_index.core import failpoints

    counted: list[str] = []
    lock = threading.Lock()

    def hook(name: str) -> None:
        if name == point:
            with lock:
                counted.append(name)

    failpoints.set_hook(hook)
    try:
        yield counted
    finally:
        failpoints.set_hook(None)


def pass_by_products(net) -> dict[str, list]:
    """What the forward passes of `net` that follow compute beside its vectors: the key-value caches its
    sub-modules return ("caches": module names) and the logits of its LM heads ("logits": element counts)."""
    seen: dict[str, list] = {"caches": [], "logits": []}

    def watch(name: str):
        def hook(module, args, output) -> None:
            if any(getattr(output, field, None) is not None for field in ("cache", "past_key_values")):
                seen["caches"].append(name)
            if name.endswith("lm_head"):
                seen["logits"].append(output.numel())
        return hook

    for name, module in net.named_modules():
        module.register_forward_hook(watch(name))
    return seen


def first_part_held_until_a_second_starts(monkeypatch) -> list:
    """LocalView.score_unit patched so that the first part scored waits (30 s at most, then fails) until
    a second part starts: it passes only where two parts are in flight. The parts started, in order."""
    import threading

    from localgpt_index.index.view import LocalView

    real, started, second = LocalView.score_unit, [], threading.Event()

    def score_unit(self, vectors, unit, device="cpu"):
        started.append(unit)
        if len(started) == 1:
            assert second.wait(30), "the second part did not start while the first was scored"
        elif len(started) == 2:
            second.set()
        return real(self, vectors, unit, device)

    monkeypatch.setattr(LocalView, "score_unit", score_unit)
    return started



@contextmanager
def artifacts_plugged(*artifacts: object, unplugged: tuple[object, ...] = ()) -> Iterator[None]:
    """Inside the block (in this process): `artifacts` added by a plugin of their own, each replacing
    the registered one of its name, and the plugins `unplugged` (a built-in artifact's module, say) out."""
    from localgpt_index.core.plugins import hookimpl, plugin_manager
    from localgpt_index.index.artifact_registry import registered_artifacts

    class Plugin:
        @hookimpl
        def lgpt_artifacts(self) -> tuple[object, ...]:
            return artifacts

    registered_artifacts()  # the built-ins registered first: unplugging one holds for the block
    manager, plugin = plugin_manager(), Plugin()
    for module in unplugged:
        manager.unregister(module)
    manager.register(plugin)
    try:
        yield
    finally:
        manager.unregister(plugin)
        for module in unplugged:
            manager.register(module)


def committed_texts(index: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """The page texts the current generation of `--index-dir INDEX` holds: (file name, page) -> (text, source)."""
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.index.text.artifact import page_texts

    store = LocalStore(index / "default")
    manifest = store.open()
    found: dict[tuple[str, int], tuple[str, str]] = {}
    for doc in manifest.documents:
        for page, text in enumerate(page_texts(manifest.segments, doc, store.blob_source()), 1):
            if text is not None:
                found[Path(doc.path).name, page] = text
    return found
