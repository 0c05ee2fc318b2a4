"""Start-up cost, offline behaviour, missing converters: the CLI's contract."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_tree, run_cli
from helpers import build_ok


def test_help_does_not_import_torch_or_byaldi():
    code = (
        "import sys; from click.testing import CliRunner; from localgpt_index.cli import main;"
        "r = CliRunner().invoke(main, ['build', '--help']); assert r.exit_code == 0, r.output;"
        "r = CliRunner().invoke(main, ['query', '--help']); assert r.exit_code == 0, r.output;"
        "heavy = [m for m in ('torch', 'byaldi', 'transformers', 'numpy') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("entry", ["console script", "python -m"])
def test_the_command_exits_without_the_collectors_last_passes(entry):
    """Both ways in go through cli.run, which freezes the garbage collector before the exit
    (1.2-1.4 s saved after a model was loaded; README, Performance)."""
    from importlib.metadata import entry_points

    if entry == "console script":
        (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "lgpt-index"]
        assert script.value == "localgpt_index.cli:run"
        start = "from localgpt_index.cli import run; run()"
    else:
        start = "import runpy; runpy.run_module('localgpt_index', run_name='__main__')"
    code = ("import atexit, gc, sys; atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0));"
            f"sys.argv = ['lgpt-index', '--version']; {start}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "lgpt-index" in out.stdout and out.stdout.strip().endswith("frozen True"), out


@pytest.fixture
def collector_state():
    """The collector as the test found it, whatever the test did to it."""
    from localgpt_index.core import collector

    yield collector
    collector._policy.owned = False
    gc.unfreeze()
    gc.enable()


def test_a_model_load_pauses_and_freezes_the_collector_only_in_the_commands_process(collector_state):
    frozen_before = gc.get_freeze_count()
    with collector_state.frozen_after():  # a program that imports the library: nothing changes
        assert gc.isenabled()
    assert gc.get_freeze_count() == frozen_before
    collector_state.own_process()
    with collector_state.frozen_after():
        assert not gc.isenabled()
        with collector_state.frozen_after():  # a load inside a load leaves it to the outer one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() > frozen_before


def test_a_failed_load_still_turns_the_collector_back_on(collector_state):
    collector_state.own_process()
    with pytest.raises(RuntimeError):
        with collector_state.frozen_after():
            raise RuntimeError("the model could not be loaded")
    assert gc.isenabled()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["build", "query"])
def test_the_command_loads_its_model_with_the_collector_paused(command, tiny_model, tmp_path):
    """cli.run owns its process: the collector is off while torch, byaldi and the model load (1.0-1.5 s
    of full passes saved), on again once the model is ready (README, Performance)."""
    from docgen import make_pdf

    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["one page"])
    index = tmp_path / "idx"
    if command == "query":
        build_ok(str(docs), "--model", str(tiny_model), "--index-dir", str(index))
    args = ["build", str(docs), "--model", str(tiny_model)] if command == "build" else ["query", "one page"]
    code = (
        "import gc, sys; import localgpt_index.models.encode as e; seen = []; load = e.ByaldiEncoder.__init__; forward = e.ByaldiEncoder._forward\n"
        "def loading(self, *a, **k): seen.append(('load', gc.isenabled(), 'torch' in sys.modules)); load(self, *a, **k)\n"
        "def running(self, *a, **k): seen.append(('run', gc.isenabled(), gc.get_freeze_count() > 0)); return forward(self, *a, **k)\n"
        "e.ByaldiEncoder.__init__ = loading; e.ByaldiEncoder._forward = running\n"
        "import atexit; atexit.register(lambda: print(sorted(set(seen))))\n"
        f"from localgpt_index.cli import run; sys.argv = ['lgpt-index', *{args + ['--index-dir', str(index)]!r}]; run()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[('load', False, True), ('run', True, True)]", out.stdout


def test_help_lists_exit_codes():
    for args in (["--help"], ["build", "--help"], ["query", "--help"]):
        result = run_cli(*args)
        assert "Exit codes" in result.stdout and "4  a missing piece" in result.stdout, args


def test_offline_model_missing_is_exit_4_with_instructions(corpus, tmp_path):
    root, _ = corpus
    result = run_cli("build", str(root), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 4
    assert "vidore/colpali-v1.3" in result.stderr and "hf download vidore/colpali-v1.3" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "idx" / "default" / "HEAD").exists()


def test_query_without_index_fails_clearly(tmp_path):
    result = run_cli("query", "anything", "--index-dir", str(tmp_path / "none"))
    assert result.exit_code == 1 and "no index at" in result.stderr


@pytest.mark.slow
def test_impossible_device_is_refused(corpus, tiny_model, tmp_path):
    root, _ = corpus
    result = run_cli("build", str(root), "--model", str(tiny_model), "--device", "cuda:3", "--index-dir", str(tmp_path / "i"))
    assert result.exit_code == 4 and "cuda:3" in result.stderr


@pytest.mark.slow
def test_no_libreoffice_names_what_to_install_and_indexes_the_rest(corpus, tiny_model, tmp_path):
    """PATH holds poppler but no LibreOffice: office files fail with exit 4, PDFs and images are indexed."""
    root, _ = corpus
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("pdftoppm", "pdfinfo"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    docs = copy_tree(root, tmp_path / "docs")
    result = run_cli(
        "build", str(docs), "--model", str(tiny_model), "--index-dir", str(tmp_path / "idx"), "--json",
        env={"PATH": str(bin_dir)},
    )
    assert result.exit_code == 4, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 2  # the PDF and the PNG
    failed = {Path(f["path"]).name: f for f in report["failures"]}
    assert set(failed) == {"memo.docx", "deck.pptx", "revenue.xlsx", "readme.md"}
    assert all(f["stage"] == "convert" and "LibreOffice" in f["reason"] and f["environment"] for f in failed.values())
    assert "memo.docx" in result.stderr and "apt-get install libreoffice" in result.stderr
