"""Shared fixtures: an isolated environment, a tiny self-made ColPali, a mixed corpus."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# pytest keeps the test modules it rewrote (tests/__pycache__) even where PYTHONDONTWRITEBYTECODE is set (CI sets it):
# otherwise each pytest process rewrites every test module's asserts again, about 5 s of a worker's collection.
# The processes the tests start keep the variable.
sys.dont_write_bytecode = False

from docgen import make_corpus  # noqa: E402

SCHEMAS = Path(__file__).resolve().parent.parent / "localgpt_index" / "schemas"
WITHOUT_TORCH = Path(__file__).resolve().parent / "without_torch"
SLOW_MODULE = re.compile(r"^pytestmark = \[?pytest\.mark\.slow\b", re.MULTILINE)  # (alone, or the first of a list)

# The fake model family registers through the family registry's plugin list, in this process
# and in every CLI, server or Ray worker process the tests start (they inherit the environment).
os.environ["LGPT_PLUGINS"] = ",".join(filter(None, [os.environ.get("LGPT_PLUGINS"), "localgpt_index.testing.fake"]))
# OCR costs about a second a page: builds read only the text layer unless a test asks (test_ocr.py).
# Set for the whole session, so that module- and session-scoped fixtures' builds (which run before
# isolated_env) do not OCR their pictures either.
os.environ["LGPT_OCR"] = "never"
# A launcher that ignores SIGINT (a background job of a non-interactive shell: `sh -c 'pytest ...' &`)
# passes SIG_IGN on to every process the tests start, and Python then keeps ignoring it: the tests that
# interrupt a build or a watch with SIGINT would wait for nothing. A handler (unlike SIG_IGN) is reset
# to the default on exec, so the processes started from here get SIGINT as a user's terminal sends it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config) -> None:
    """The fast tier (-m "not slow") runs without torch, in this process and in every CLI or server
    process it starts: whatever it would import torch for fails the test."""
    if not _fast_tier(config):
        return
    os.environ["PYTHONPATH"] = torchless_path()
    if "torch" in sys.modules:
        raise pytest.UsageError("torch was imported before the fast tier started")
    sys.path.insert(0, str(WITHOUT_TORCH))
    import sitecustomize  # noqa: F401  (this folder's: it installs the blocking finder)


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """The fast tier does not import a test module marked slow as a whole (SLOW_MODULE): each xdist worker collects
    every module, and such a module's imports (LangChain's test kit, Ray) are all it would cost there."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_") or not _fast_tier(config):
        return None
    return True if SLOW_MODULE.search(collection_path.read_text(encoding="utf-8")) else None


def _fast_tier(config) -> bool:
    return config.getoption("markexpr").replace(" ", "") == "notslow"


@pytest.fixture(scope="session", autouse=True)
def isolated_session(tmp_path_factory):
    """Module and session fixtures (an index built, a server started) run before any test's isolated_env: they get
    the same environment, with the session's caches."""
    caches = tmp_path_factory.mktemp("session-caches")
    with pytest.MonkeyPatch.context() as patch:
        isolate(patch, caches)
        yield caches


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """A test's own environment (isolate) and a scratch working folder."""
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("LGPT_OCR", "never")  # as set for the session above, should a test have changed it
    monkeypatch.chdir(tmp_path)


def isolate(patch: pytest.MonkeyPatch, folder: Path) -> None:
    """No hub, no user cache (lgpt-index's weight digests, visual priors and checked-record key: under `folder`), no
    inherited index settings."""
    patch.setenv("HF_HUB_OFFLINE", "1")
    patch.setenv("TRANSFORMERS_OFFLINE", "1")
    patch.setenv("HF_HOME", str(folder / "hf-home"))
    patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
    for name in ("LGPT_INDEX_DIR", "LGPT_INDEX_NAME", "LGPT_MODEL", "NO_COLOR"):
        patch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def torchless_processes():
    """The processes a module's tests start (servers, CLI runs) import no torch, as on a machine without it: for
    modules whose processes serve the fake model, where torch's import (about 3 s of CPU a process on CI's
    2 cores: most of such a process's cost) would be all they do with it. `pytestmark = torchless` in the module:
    module-scoped, so its servers started by module fixtures are torch-less too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", torchless_path())
        yield


torchless = pytest.mark.usefixtures("torchless_processes")


def torchless_path() -> str:
    """PYTHONPATH with tests/without_torch first: a process started with it cannot import torch."""
    return os.pathsep.join(filter(None, [str(WITHOUT_TORCH), os.environ.get("PYTHONPATH")]))


def with_torch() -> dict[str, str]:
    """The environment a process of a `torchless` module's slow test is given where it loads a real model or must
    score as a real model's process does (torch's path, the compiled kernel). Not for the fast tier: it would lift
    the tier's own block on torch."""
    return {"PYTHONPATH": os.pathsep.join(part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                          if part and part != str(WITHOUT_TORCH))}


@pytest.fixture(scope="session")
def fake_model(tmp_path_factory) -> Path:
    """A fake checkpoint: deterministic vectors from page bytes, no torch (the fast tier)."""
    from localgpt_index.testing.fake import write_fake_checkpoint

    return write_fake_checkpoint(tmp_path_factory.mktemp("models") / "fake")


def faulty_model(folder: Path, **faults) -> Path:
    """A fake checkpoint whose device fails as configured (see localgpt_index.testing.fake)."""
    from localgpt_index.testing.fake import write_fake_checkpoint

    return write_fake_checkpoint(folder, **faults)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from localgpt_index.testing.checkpoints import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("models") / "tiny-colpali", "tiny")


@pytest.fixture
def process_mark(monkeypatch) -> str:
    """A token in the environment of every process this test starts from here on (helpers.MARK), so
    that `helpers.marked_processes(token)` finds them and their descendants, and nobody else's."""
    import uuid

    from helpers import MARK

    token = uuid.uuid4().hex
    monkeypatch.setenv(MARK, token)
    return token


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("corpus") / "docs"
    return root, make_corpus(root)


def copy_tree(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def load_schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validate(document: dict, schema_name: str) -> None:
    import jsonschema

    jsonschema.validate(document, load_schema(schema_name))


def poppler_page_count(pdf: Path) -> int:
    out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split()[-1] for line in out.splitlines() if line.startswith("Pages:")))


def run_cli(*args: str, env: dict | None = None):
    """Run the real CLI in-process; stdout and stderr kept apart."""
    from click.testing import CliRunner

    from localgpt_index.cli import main

    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result


def run_process(*args: str, env: dict | None = None, timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    """Run the CLI in a process of its own (for kills, signals and start-up checks)."""
    import os

    return subprocess.run([sys.executable, "-m", "localgpt_index", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, **popen)


UNSTABLE_SOFFICE = """#!{python}
# stands in for LibreOffice: its PDFs differ in bytes every run, as LibreOffice's do (time stamps, ids)
import sys
from pathlib import Path

sys.path.insert(0, {tests!r})
from docgen import make_pdf

args = sys.argv[1:]
if "--convert-to" not in args:
    sys.exit(0)
runs = Path(__file__).with_name("runs")
run = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(run))
outdir = Path(args[args.index("--outdir") + 1])
for name in args[args.index("--outdir") + 2:]:
    make_pdf(outdir / (Path(name).stem + ".pdf"), [Path(name).read_text(), f"run {{run}}"])
"""


def unstable_soffice(folder: Path) -> dict[str, str]:
    """An environment whose `soffice` (first on PATH) is UNSTABLE_SOFFICE, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "soffice"
    script.write_text(UNSTABLE_SOFFICE.format(python=sys.executable, tests=str(Path(__file__).parent)))
    script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def unstable_converter(tmp_path, monkeypatch):
    """Converted documents without LibreOffice: a stand-in `soffice` on PATH (see UNSTABLE_SOFFICE)."""
    monkeypatch.setenv("PATH", unstable_soffice(tmp_path / "unstable-bin")["PATH"])


@pytest.fixture
def appended(monkeypatch) -> list[tuple[str, int, dict]]:
    """What the build hands the store writer, page by page: (file name, page, extra), recorded
    in this process (the CLI runs in-process) on the way to the real writer."""
    from localgpt_index.index.transaction import SegmentWriter

    seen: list[tuple[str, int, dict]] = []
    original = SegmentWriter.append

    def recording(self, vectors, page=None, extra=None):
        seen.append((Path(page.path).name, page.page, dict(extra or {})))
        return original(self, vectors, page, extra)

    monkeypatch.setattr(SegmentWriter, "append", recording)
    return seen
