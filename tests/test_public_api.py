"""The public Python API after the package layout (issue 25): the root package's names, the
removed 0.2 paths, and the family registry's plugins reaching the processes the CLI starts."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from conftest import run_process
from docgen import make_pdf

import localgpt_index


def test_every_root_name_resolves_to_the_module_that_defines_it():
    for name in localgpt_index.__all__:
        assert getattr(localgpt_index, name) is not None
    assert localgpt_index.LocalStore is importlib.import_module("localgpt_index.index.local.store").LocalStore
    assert localgpt_index.SearchHit is importlib.import_module("localgpt_index.core.types").SearchHit
    with pytest.raises(AttributeError, match="no_such_name"):
        localgpt_index.no_such_name  # noqa: B018


@pytest.mark.parametrize("old", ["localgpt_index.store", "localgpt_index.metadata", "localgpt_index.pages",
                                 "localgpt_index.index.store", "localgpt_index.index.qdrant_store", "localgpt_index.build"])
def test_the_removed_0_2_paths_are_gone(old):
    """0.4 removed the deprecated shims and facades (CHANGELOG.md): the root package is the API."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def _without_plugins() -> dict:
    return {k: v for k, v in os.environ.items() if k != "LGPT_PLUGINS"}


def test_a_family_named_in_lgpt_plugins_registers_in_a_fresh_process():
    probe = "from localgpt_index.models.families import find_family; print(find_family('fake') is not None)"
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_without_plugins())
    plugged = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env={**_without_plugins(), "LGPT_PLUGINS": "localgpt_index.testing.fake"})
    assert (plain.stdout.strip(), plugged.stdout.strip()) == ("False", "True"), plain.stderr + plugged.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_cli_builds_with_a_plugin_family_only_when_it_is_registered(fake_model, tmp_path):
    make_pdf(tmp_path / "docs" / "a.pdf", ["alpha"])
    args = ("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json")
    refused = run_process(*args, env={"LGPT_PLUGINS": ""})
    assert refused.returncode == 2 and "not a supported multi-vector family" in refused.stderr, refused.stderr
    built = run_process(*args)  # conftest names the fake family in LGPT_PLUGINS for the session
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["indexed"] == 1


def test_a_plugin_module_that_cannot_be_imported_is_named():
    probe = "from localgpt_index.models.families import family_named; family_named('colpali')"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**_without_plugins(), "LGPT_PLUGINS": "no_such_plugin_module"})
    assert result.returncode != 0 and "LGPT_PLUGINS: the plugin module no_such_plugin_module cannot be imported" in result.stderr


def test_a_plugin_s_url_scheme_opens_its_store_and_an_unknown_one_lists_the_forms(tmp_path):
    from localgpt_index.core.errors import UsageError
    from localgpt_index.core.plugins import hookimpl, plugin_manager
    from localgpt_index.index.open import StoreScheme

    class Mem:
        @hookimpl
        def lgpt_store_schemes(self) -> tuple[StoreScheme, ...]:
            return (StoreScheme("mem", lambda request: ("a store for", request.url, request.pdf_store), "mem://NAME"),)

    plugin = Mem()
    plugin_manager().register(plugin)
    try:
        assert localgpt_index.open_store("mem://x", pdf_store=tmp_path) == ("a store for", "mem://x", tmp_path)
        with pytest.raises(UsageError, match=r"expected local, .* qdrant\+path://DIR/COLLECTION or mem://NAME\.$"):
            localgpt_index.open_store("redis://host/docs")
    finally:
        plugin_manager().unregister(plugin)


def test_a_name_renamed_in_0_4_still_resolves_from_the_root_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="use localgpt_index.LocalStore"):
        old = localgpt_index.IndexStore
    assert old is localgpt_index.LocalStore
    with pytest.warns(DeprecationWarning, match="use localgpt_index.Searcher"):
        wrapper = localgpt_index.Index  # what open_index returns, named apart from the index's view
    assert wrapper is localgpt_index.Searcher
