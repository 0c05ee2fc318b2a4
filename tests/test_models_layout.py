"""The models package after its split (issue 25): the published schemas' family enums come from the
registry, no production module switches on a family's name, loading a model leaves the process's
transformers logging as it found it, and the package's modules keep the size limits."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from conftest import load_schema

from localgpt_index.models import families, schemas
from localgpt_index.models.families import FAMILIES, Family, find_family
from localgpt_index.models.loaders import Loader

PACKAGE = Path(__file__).resolve().parent.parent / "localgpt_index"


def test_the_published_family_enums_are_the_registry_s_built_ins():
    assert schemas.stale() == [], "regenerate: python -m localgpt_index.models.schemas"
    for name, path, node in schemas.TARGETS:
        assert schemas.node_at(load_schema(name.removesuffix(".schema.json")), path) == node(), (name, path)
    build_family = schemas.node_at(load_schema("build"), ("properties", "model", "properties", "family"))
    assert build_family["anyOf"][0]["enum"] == [family.name for family in FAMILIES]
    doctor_loader = schemas.node_at(load_schema("doctor"), ("properties", "model", "properties", "loader"))
    assert doctor_loader["anyOf"][0]["enum"] == ["byaldi", "colpali-engine"]


def test_no_published_schema_names_the_fake_family():
    for path in (PACKAGE / "schemas").glob("*.schema.json"):
        assert "fake" not in path.read_text().lower(), path.name


def test_a_plugin_family_validates_through_the_pattern_and_a_malformed_name_does_not():
    import jsonschema

    node = schemas.node_at(load_schema("build"), ("properties", "model", "properties", "family"))
    for name in ("colqwen2_5", "fake", "someone_elses"):
        jsonschema.validate(name, node)
    for name in ("ColPali", "", "a family", 7):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(name, node)


def test_the_check_fails_when_the_registry_gains_a_built_in(monkeypatch, capsys):
    extra = Family("colnew", "ColNew", ("new",), "ColNew", "ColNewProcessor", Loader("newloader"), False)
    monkeypatch.setattr(families, "FAMILIES", (*FAMILIES, extra))
    assert sorted(schemas.stale()) == ["build.schema.json", "doctor.schema.json"]
    assert schemas.main(["--check"]) == 1 and "python -m localgpt_index.models.schemas" in capsys.readouterr().err
    texts = schemas.generated()
    assert "colnew" in texts["build.schema.json"] and "newloader" in texts["doctor.schema.json"]
    assert json.loads(texts["doctor.schema.json"])["properties"]["ok"] == load_schema("doctor")["properties"]["ok"]


def test_the_generator_rewrites_only_the_node_and_keeps_the_rest_of_the_text():
    text = '{\n  "a": {"family": {"type": "string"}, "x": [1,  2]},\n  "b": {\n    "family": {\n      "enum": [1]\n    }\n  }\n}\n'
    one = schemas.replaced(text, ("a", "family"), {"enum": ["p"]})
    assert one == text.replace('{"type": "string"}', '{"enum": ["p"]}')
    two = schemas.replaced(text, ("b", "family"), {"enum": ["q"]})
    assert two == text.replace('{\n      "enum": [1]\n    }', '{\n      "enum": [\n        "q"\n      ]\n    }')


@pytest.mark.parametrize("name, loader", [("Bad Name", "x"), ("ok", "Bad Loader"), ("", "x")])
def test_a_family_refuses_a_name_the_schemas_would_not_accept(name, loader):
    with pytest.raises(ValueError, match="lowercase words"):
        Family(name, "Bad", ("bad",), "", "", Loader(loader), False)
    assert find_family(name) is None


# A comparison of a family's name with a literal, or membership in a literal tuple of names:
# the registry's attributes answer such questions (families.Family).
_FAMILY_SWITCH = re.compile(r"""family(\.name)?\s*(==|!=)\s*["']|family(\.name)?\s+(not\s+)?in\s+\(\s*["']""")


def test_no_production_module_switches_on_a_family_s_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _FAMILY_SWITCH.search(line) or re.search(r"""["']fake["']""", line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_the_pattern_catches_the_switches_it_is_meant_to():
    for line in ('if self.model.family == "colpali":', "if family.name in ('colqwen2', 'x'):", 'model.family != "colpali"'):
        assert _FAMILY_SWITCH.search(line), line


def test_the_models_modules_keep_the_size_limits():
    """No module over 800 lines, no function over 60."""
    from helpers import size_problems

    assert size_problems(sorted((PACKAGE / "models").glob("*.py")), PACKAGE / "models") == []


@pytest.mark.slow
def test_loading_and_running_a_model_leaves_transformers_logging_as_it_found_it(tiny_model):
    """transformers is quiet while a model loads and runs, and its verbosity and progress bars are
    the caller's again afterwards (they were changed for the whole process before)."""
    from PIL import Image
    from transformers.utils import logging as hf_logging

    from localgpt_index.models.device import Capabilities, choose_precision
    from localgpt_index.models.loading import open_encoder
    from localgpt_index.models.resolve import resolve_model

    hf_logging.set_verbosity_info()
    hf_logging.enable_progress_bar()
    try:
        encoder = open_encoder(resolve_model(str(tiny_model)), choose_precision(Capabilities(), "cpu", "float32"), 2)
        assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == (hf_logging.INFO, True)
        inside = []
        encoder.net.register_forward_pre_hook(lambda module, args: inside.append(hf_logging.get_verbosity()))
        encoder.encode_pages([Image.new("RGB", (56, 56), "white")])
        encoder.encode_queries(["a query"])
        assert inside == [hf_logging.ERROR, hf_logging.ERROR]
        assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == (hf_logging.INFO, True)
    finally:
        hf_logging.set_verbosity_warning()


@pytest.mark.slow
def test_overlapping_quiet_blocks_on_two_threads_restore_the_outer_settings():
    """The render thread's block (prepare_page) and the model thread's (encode_pages) overlap in
    any order; the settings come back when the last one ends, not when the first one does."""
    from transformers.utils import logging as hf_logging

    from localgpt_index.models.loaders import quiet_transformers

    hf_logging.set_verbosity_info()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with quiet_transformers():
            entered.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    try:
        with quiet_transformers():
            thread.start()
            assert entered.wait(30)
        assert hf_logging.get_verbosity() == hf_logging.ERROR  # the other thread's block is still open
        release.set()
        thread.join(30)
        assert hf_logging.get_verbosity() == hf_logging.INFO
    finally:
        release.set()
        hf_logging.set_verbosity_warning()


@pytest.mark.slow
def test_quiet_blocks_touch_nothing_where_transformers_is_quiet_already_and_quieten_the_command_once(monkeypatch):
    """Setting transformers' verbosity walks every logger (about 0.5 ms with a model loaded): a block
    where it is quiet already sets nothing, and the command's own process quietens it once, for good."""
    from transformers.utils import logging as hf_logging

    import localgpt_index.core.collector as collector
    from localgpt_index.models.loaders import quiet_transformers

    calls = []
    real = hf_logging.set_verbosity
    monkeypatch.setattr(hf_logging, "set_verbosity", lambda level: (calls.append(level), real(level))[1])
    try:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
        calls.clear()
        with quiet_transformers():
            pass
        assert hf_logging.get_verbosity() == hf_logging.WARNING and calls  # a library's settings come back
        monkeypatch.setattr(collector._policy, "owned", True)
        calls.clear()
        for _ in range(3):
            with quiet_transformers():
                assert hf_logging.get_verbosity() == hf_logging.ERROR
        assert hf_logging.get_verbosity() == hf_logging.ERROR and len(calls) == 1  # once, then left quiet
    finally:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
