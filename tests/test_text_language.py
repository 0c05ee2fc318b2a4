"""The text index's language (issue 43): `--language` (or --ocr-lang's languages) recorded in the index, a
change building the text index again and not the vectors, in a local index and a Qdrant store; and
`upgrade` of a Qdrant store whose sparse vectors another analysis cut."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from multilingual import write_pdf

GERMAN = "Die Lieferungen nach Köln verzögerten sich wegen der Straßensperrung im Winter."


@pytest.fixture
def german(tmp_path):
    write_pdf(tmp_path / "docs" / "de.pdf", [GERMAN])
    write_pdf(tmp_path / "docs" / "en.pdf", ["The engineers replaced the turbine blades at the plant in spring."])
    return tmp_path


def _build(root, model, *args: str):
    done = run_cli("build", str(root / "docs"), "--model", str(model), "--json", *args)
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)


def _found(location: list[str], question: str) -> list[str]:
    done = run_cli("query", question, "--mode", "text", "--format", "paths", *location)
    assert done.exit_code == 0, done.stderr
    return [line.rsplit("/", 1)[-1] for line in done.stdout.split()]


def _manifest(location: list[str]):
    from localgpt_index.index.open import open_store
    from localgpt_index.query.search import open_index

    store = open_store(location[1]) if location[0] == "--store" else open_store(index_dir=location[1])
    try:
        return open_index(store=store).view.manifest
    finally:
        store.close()


@pytest.mark.parametrize("store", ["local", "qdrant"])
def test_language_is_recorded_and_a_change_rebuilds_the_text_index_only(fake_model, german, store):
    """Told English, a German inflection is not matched by its stem; told German (no file changed), it is,
    with the same segments (no page encoded again); left out, the index's language stays."""
    location = ["--index-dir", str(german / "idx")] if store == "local" else ["--store", f"qdrant+path://{german / 'qd'}/pages"]
    _build(german, fake_model, "--language", "en", *location)
    assert _found(location, "Lieferung") == []
    before = _manifest(location)
    assert before.settings.language == "en" and before.artifacts["lexical"].meta["languages"] == "en"

    changed = _build(german, fake_model, "--language", "DE", *location)  # no --rebuild: the vectors stay
    assert changed["committed"] and changed["pages_embedded"] == 0, changed
    assert _found(location, "Lieferung") == ["de.pdf"]
    after = _manifest(location)
    assert after.settings.language == "de" and after.artifacts["lexical"].meta["languages"] == "de"
    assert after.segments == before.segments

    _build(german, fake_model, *location)  # left out: the index's
    assert _manifest(location).settings.language == "de" and _found(location, "Lieferung") == ["de.pdf"]
    auto = _build(german, fake_model, "--language", "auto", *location)
    assert auto["committed"] and _found(location, "Lieferung") == ["de.pdf"] and _found(location, "engineer") == ["en.pdf"]
