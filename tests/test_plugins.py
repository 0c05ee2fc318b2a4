"""One plugin manager (core/plugins.py): a third-party plugin (tests/plugin/lgpt_test_plugin, with a real
entry point in the `lgpt_index` group) adds a model family, an artifact and a store scheme, and
`lgpt-index build/query --store mem://...` work through them; the built-ins come through the same hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from docgen import make_pdf

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"  # lgpt_test_plugin/ and its dist-info


@pytest.fixture
def plugin(monkeypatch):
    """The plugin, registered in this process as its entry point registers it in a fresh one."""
    from localgpt_index.core.plugins import plugin_manager

    manager = plugin_manager()  # this process's plugins loaded before its dist-info is on the path
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    import lgpt_test_plugin

    manager.register(lgpt_test_plugin)
    yield lgpt_test_plugin
    manager.unregister(lgpt_test_plugin)


def _docs(folder: Path) -> Path:
    make_pdf(folder / "alpha.pdf", ["alpha apples", "alpha again"])
    make_pdf(folder / "beta.pdf", ["beta bananas"])
    return folder


def test_a_plugin_s_family_artifact_and_store_scheme_build_and_query_an_index(plugin, tmp_path):
    from localgpt_index import open_store

    model = plugin.write_checkpoint(tmp_path / "model")
    built = run_cli("build", str(_docs(tmp_path / "docs")), "--store", "mem://x", "--model", str(model), "--json")
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["indexed"] == 2
    query = run_cli("query", "alpha apples", "--store", "mem://x", "-k", "3", "--json")
    assert query.exit_code == 0, query.stderr
    hits = json.loads(query.stdout)["queries"][0]["results"]
    assert [(Path(hit["path"]).name, hit["page"]) for hit in hits][0] == ("alpha.pdf", 1) and len(hits) == 3
    manifest = open_store("mem://x").read_manifest()
    assert manifest is not None and manifest.model.family == "lgpt_plugin"
    assert manifest.artifacts["plugin_pages"].meta == {"pages": 3}
    assert "lexical" in manifest.artifacts  # the built-ins beside it
    assert all({"text", "codes"} <= set(segment.parts) for segment in manifest.segments.values())
    assert run_cli("verify", "--store", "mem://x").exit_code == 0


def test_without_the_plugin_mem_is_refused():
    from localgpt_index.core.plugins import plugin_manager

    refused = run_cli("query", "anything", "--store", "mem://x")
    assert refused.exit_code == 2 and "qdrant+path://DIR/COLLECTION." in refused.stderr, refused.stderr
    assert "mem://NAME" not in refused.stderr
    assert not plugin_manager().has_plugin("lgpt_test_plugin")


def test_the_built_ins_come_first_and_a_plugin_s_entry_replaces_a_built_in_of_its_name():
    from localgpt_index.core.plugins import hookimpl, plugin_manager
    from localgpt_index.models.families import FAMILIES, family_named, registered_families

    colpali = next(family for family in FAMILIES if family.name == "colpali")
    mine = type(colpali)(**{**colpali.__dict__, "display": "ColPali, a plugin's"})

    class Replacing:
        @hookimpl
        def lgpt_families(self):
            return (mine,)

    plugin = Replacing()
    plugin_manager().register(plugin)
    try:
        assert family_named("colpali") is mine
        assert [family.name for family in registered_families()][: len(FAMILIES)] == [f.name for f in FAMILIES]
    finally:
        plugin_manager().unregister(plugin)
    assert family_named("colpali") is colpali


@pytest.mark.slow  # processes of its own: the entry point is read in a fresh process
def test_the_plugin_s_entry_point_registers_it_in_a_fresh_process(tmp_path):
    """No LGPT_PLUGINS names it: importlib.metadata finds its dist-info on the path, and the build and
    the query (one process: the mem store lives as long as it) go through its family, artifact and scheme."""
    model = tmp_path / "model"
    docs = _docs(tmp_path / "docs")
    script = (
        "import json, sys; from click.testing import CliRunner; from localgpt_index.cli import main\n"
        "from pathlib import Path; from lgpt_test_plugin import write_checkpoint; write_checkpoint(Path(sys.argv[2]))\n"
        "built = CliRunner().invoke(main, ['build', sys.argv[1], '--store', 'mem://y', '--model', sys.argv[2], '--json'])\n"
        "asked = CliRunner().invoke(main, ['query', 'beta', '--store', 'mem://y', '-k', '1', '--json'])\n"
        "print(json.dumps([built.exit_code, built.stdout, asked.exit_code, asked.stdout]))\n"
    )
    path = os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "LGPT_PLUGINS": "", "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", script, str(docs), str(model)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    built_code, built, asked_code, asked = json.loads(out.stdout.strip().splitlines()[-1])
    assert (built_code, asked_code) == (0, 0), (built, asked)
    assert json.loads(built)["indexed"] == 2
    assert [hit["path"] for hit in json.loads(asked)["queries"][0]["results"]][0].endswith("beta.pdf")
