"""Finding the index as git finds .git, the config file (lgpt-index.toml), the index location on the group,
and --help's everyday options apart from the tuning ones (issue 42), through the CLI as a user types it.
Fast tier: the fake model, in-process."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import run_cli, validate
from docgen import make_pdf
from helpers import build_ok


@pytest.fixture
def project(fake_model, tmp_path, monkeypatch) -> Path:
    """project/docs/{finance,ops}/*.pdf, indexed from project/ (its index: project/.lgpt-index)."""
    monkeypatch.delenv("LGPT_MODEL", raising=False)
    root = tmp_path / "project"
    make_pdf(root / "docs" / "finance" / "budget.pdf", ["budget revenue plan"])
    make_pdf(root / "docs" / "finance" / "q3.pdf", ["quarter three revenue"])
    make_pdf(root / "docs" / "ops" / "runbook.pdf", ["runbook restart"])
    monkeypatch.chdir(root)
    build_ok("docs", "--model", str(fake_model))
    return root


def _paths(result) -> list[str]:
    assert result.exit_code == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    if "documents" in document:
        return sorted(Path(d["path"]).name for d in document["documents"])
    return sorted(Path(hit["path"]).name for answer in document["queries"] for hit in answer["results"])


def test_query_from_a_subfolder_finds_the_index_above(project, monkeypatch):
    monkeypatch.chdir(project / "docs" / "finance")
    assert "runbook.pdf" in _paths(run_cli("query", "runbook", "--mode", "text", "--json"))


def test_query_from_a_sibling_folder_with_a_config_file_finds_the_index(project, tmp_path, monkeypatch):
    sibling = tmp_path / "notes" / "deep"
    sibling.mkdir(parents=True)
    (tmp_path / "notes" / "lgpt-index.toml").write_text('index-dir = "../project/.lgpt-index"\n')
    monkeypatch.chdir(sibling)
    assert "runbook.pdf" in _paths(run_cli("query", "runbook", "--mode", "text", "--json"))


def test_the_discovery_stops_below_home(project, monkeypatch):
    """$HOME is a ceiling, as git's: a folder under it never reaches an index above it."""
    home = project / "docs"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "finance")
    result = run_cli("status")
    assert result.exit_code == 1
    assert "no index at .lgpt-index/default" in result.stderr
    assert "LGPT_INDEX_DIR" in result.stderr and "parents" in result.stderr


def test_ls_and_remove_take_paths_from_the_tree_and_from_the_current_folder(project, monkeypatch):
    assert _paths(run_cli("ls", "finance/", "--json")) == ["budget.pdf", "q3.pdf"]  # from the root, a folder of the tree
    monkeypatch.chdir(project / "docs" / "finance")
    assert _paths(run_cli("ls", ".", "--json")) == ["budget.pdf", "q3.pdf"]  # from inside it
    monkeypatch.chdir(project)
    removed = run_cli("remove", "finance/q3.pdf", "--json")
    assert removed.exit_code == 0, removed.stderr
    assert [Path(p).name for p in json.loads(removed.stdout)["removed"]] == ["q3.pdf"]
    assert _paths(run_cli("ls", "--json")) == ["budget.pdf", "runbook.pdf"]


def _config(result) -> dict:
    assert result.exit_code == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    validate(document, "config")
    return document["settings"]


def test_the_config_files_model_store_and_excludes_apply_and_config_shows_where_they_came_from(fake_model, tmp_path,
                                                                                              monkeypatch):
    monkeypatch.delenv("LGPT_MODEL", raising=False)
    monkeypatch.delenv("LGPT_STORE", raising=False)
    make_pdf(tmp_path / "docs" / "kept.pdf", ["kept"])
    make_pdf(tmp_path / "docs" / "drafts" / "draft.pdf", ["draft"])
    config = tmp_path / "lgpt-index.toml"
    config.write_text(f'model = "{fake_model}"\nstore = "qdrant+path://{tmp_path / "qd"}/docs"\n'
                      'exclude = ["drafts/**"]\n\n[query]\nk = 1\n')
    build_ok("docs")  # no --model, no --store, no --exclude
    assert (tmp_path / "qd").is_dir() and not (tmp_path / ".lgpt-index").exists()
    assert _paths(run_cli("ls", "--json")) == ["kept.pdf"]
    status = json.loads(run_cli("status", "--json").stdout)
    assert status["model"]["id"] == str(fake_model)
    shown = _config(run_cli("config", "--json"))
    for key in ("model", "store", "exclude"):
        assert shown[key]["source"] == "file" and shown[key]["from"] == str(config), shown[key]
    assert shown["exclude"]["value"] == ["drafts/**"]
    assert _config(run_cli("config", "query", "--json"))["k"] == {"value": 1, "source": "file", "from": str(config)}
    text = run_cli("config").stdout
    assert f"model           {fake_model}  (file {config})" in text


def test_pyproject_tool_table_is_a_config_file_too(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.lgpt-index]\nname = "work"\n')
    shown = _config(run_cli("config", "--json"))
    assert shown["name"] == {"value": "work", "source": "file", "from": str(tmp_path / "pyproject.toml")}


def test_env_overrides_the_file_and_an_option_overrides_env(tmp_path, monkeypatch):
    (tmp_path / "lgpt-index.toml").write_text('name = "fromfile"\nmodel = "file/model"\n')
    assert _config(run_cli("config", "--json"))["name"]["value"] == "fromfile"
    monkeypatch.setenv("LGPT_INDEX_NAME", "fromenv")
    monkeypatch.setenv("LGPT_MODEL", "env/model")
    shown = _config(run_cli("config", "--json"))
    assert shown["name"] == {"value": "fromenv", "source": "env", "from": "LGPT_INDEX_NAME"}
    assert shown["model"] == {"value": "env/model", "source": "env", "from": "LGPT_MODEL"}
    assert _config(run_cli("--name", "fromgroup", "config", "--json"))["name"]["source"] == "option"
    build = _config(run_cli("config", "build", "--json"))
    assert build["model"]["value"] == "env/model"
    # the command's own option wins over the group's
    status = run_cli("--name", "fromgroup", "status", "--name", "fromcommand")
    assert "fromcommand" in status.stderr and "fromgroup" not in status.stderr


@pytest.mark.parametrize("text, message", [
    ('exlude = ["x"]\n', "exlude: no option of that name; did you mean 'exclude'?"),
    ('[query]\ncommit-every = 5\n', "query.commit-every: no option --commit-every of `query`"),
    ('[qurey]\nk = 5\n', "[qurey]: no such command; did you mean 'query'?"),
    ('[query]\nk = "many"\n', "query.k = 'many'"),
    ('model = \n', "not valid TOML"),
])
def test_a_bad_config_file_is_a_usage_error_naming_the_file_and_the_key(text, message, tmp_path):
    (tmp_path / "lgpt-index.toml").write_text(text)
    result = run_cli("status")
    assert result.exit_code == 2
    assert f"{tmp_path / 'lgpt-index.toml'}: " in result.stderr and message in result.stderr, result.stderr


@pytest.fixture(scope="module")
def named_folder(fake_model, tmp_path_factory) -> Path:
    """A folder with an index named `work` (and no other) in it, built with --name given to the group."""
    folder = tmp_path_factory.mktemp("named")
    make_pdf(folder / "docs" / "alpha.pdf", ["alpha one"])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        result = run_cli("--name", "work", "build", "docs", "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert (folder / ".lgpt-index" / "work").is_dir() and not (folder / ".lgpt-index" / "default").exists()
    return folder


@pytest.fixture
def named(named_folder, monkeypatch) -> Path:
    """The working folder: `named_folder` (its tests read the index or are refused before they reach it)."""
    monkeypatch.chdir(named_folder)
    return named_folder


# every command, with what else it needs to reach the index (a bad name is refused there)
EVERY_COMMAND = {
    "build": ["docs"], "query": ["alpha"], "serve": [], "mcp": [], "status": [], "ls": [], "remove": ["docs/alpha.pdf"],
    "verify": [], "upgrade": [], "export": ["out"], "import": ["docs"], "eval": ["queries.jsonl"], "watch": ["docs"],
}


@pytest.mark.parametrize("command", sorted(EVERY_COMMAND))
def test_name_on_the_group_reaches_every_command(command, named):
    (named / "queries.jsonl").write_text(json.dumps({"query": "alpha", "relevant": [{"path": "docs/alpha.pdf", "page": 1}]}) + "\n")
    result = run_cli("--name", "no good!", command, *EVERY_COMMAND[command])
    assert result.exit_code == 2 and "index name 'no good!'" in result.stderr, result.stderr


def test_an_empty_name_is_refused_and_an_empty_environment_variable_is_unset(named):
    result = run_cli("--name", "", "status")
    assert result.exit_code == 2 and "index name ''" in result.stderr, result.stderr
    assert run_cli("status", env={"LGPT_INDEX_NAME": ""}).stderr == run_cli("status").stderr


@pytest.mark.parametrize("command", [["status"], ["ls"], ["verify"], ["query", "alpha", "--mode", "text"], ["upgrade"],
                                     ["doctor"], ["config"]])
def test_name_on_the_group_opens_that_index(command, named):
    result = run_cli("--name", "work", *command, "--json")
    assert result.exit_code in ((0, 4) if command == ["doctor"] else (0,)), result.stdout + result.stderr  # 4: no torch here
    assert str(named / ".lgpt-index" / "work") in result.stdout or '"work"' in result.stdout


def _everyday(command: str) -> list[str]:
    """The options --help lists under Options (not under Tuning, not the index location line), --help aside."""
    text = run_cli(command, "--help").stdout
    section = text.split("Options:\n", 1)[1].split("\n\n", 1)[0]
    return [m.group(1) for m in re.finditer(r"^  (-[\w-]+(?:, --[\w-]+)?)", section, re.MULTILINE) if "--help" not in m.group(1)]


def test_build_and_query_help_show_few_everyday_options_and_the_rest_under_tuning():
    assert len(_everyday("build")) <= 15, _everyday("build")
    assert len(_everyday("query")) <= 12, _everyday("query")
    build = run_cli("build", "--help").stdout
    assert re.search(r"Tuning.*--commit-every.*--ray-gpus-per-actor", build, re.DOTALL)
    assert "--index-dir, --name" in build.split("Index location:", 1)[1]
    assert re.search(r"Tuning.*--rrf-k.*--scorer.*--max-resident", run_cli("query", "--help").stdout, re.DOTALL)


def test_serve_takes_a_model_for_a_folder_without_an_index(tmp_path, monkeypatch):
    monkeypatch.setenv("LGPT_MODEL", "env/model")
    shown = _config(run_cli("config", "serve", "--json"))
    assert shown["model"] == {"value": "env/model", "source": "env", "from": "LGPT_MODEL"}
    assert "--model" in run_cli("mcp", "--help").stdout


def test_relative_paths_in_the_config_file_are_relative_to_it(tmp_path, monkeypatch):
    (tmp_path / "lgpt-index.toml").write_text('index-dir = "indexes"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert _config(run_cli("config", "--json"))["index-dir"]["value"] == os.path.join(tmp_path, "indexes")


@pytest.mark.slow  # the HTTP server's stack (FastAPI, uvicorn) imported: about 4 s the first time
@pytest.mark.parametrize("model_from", ["option", "env"])
def test_serve_watch_builds_a_folder_without_an_index_with_the_model_given(model_from, fake_model, tmp_path, monkeypatch):
    """serve --watch on a new folder builds it first, with --model (or $LGPT_MODEL); the port taken here
    then stops it (exit 4) once that build is committed."""
    import socket

    make_pdf(tmp_path / "docs" / "alpha.pdf", ["alpha one"])
    given = ["--model", str(fake_model)] if model_from == "option" else []
    if model_from == "env":
        monkeypatch.setenv("LGPT_MODEL", str(fake_model))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_cli("serve", "--watch", "docs", "--port", str(taken.getsockname()[1]), *given)
    assert result.exit_code == 4, result.stderr
    status = json.loads(run_cli("status", "--json").stdout)
    assert status["model"]["id"] == str(fake_model) and status["documents"] == 1
