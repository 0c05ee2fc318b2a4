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


def test_ocr_lang_names_the_language_unless_language_is_given(fake_model, german):
    """--ocr-lang deu (no --language, none recorded): German stems for every document; --language wins over it,
    and once recorded, stays."""
    location = ["--index-dir", str(german / "idx")]
    _build(german, fake_model, "--ocr", "never", "--ocr-lang", "deu", *location)
    manifest = _manifest(location)
    assert manifest.settings.language == "de" and manifest.artifacts["lexical"].meta["languages"] == "de"
    assert _found(location, "Lieferung") == ["de.pdf"]
    _build(german, fake_model, "--ocr-lang", "deu", "--language", "en", *location)
    assert _manifest(location).settings.language == "en" and _found(location, "Lieferung") == []
    _build(german, fake_model, "--ocr-lang", "deu", *location)  # --language left out: the index's, not --ocr-lang's
    assert _manifest(location).settings.language == "en"


def test_the_config_file_sets_the_language_and_a_bad_one_is_a_usage_error(fake_model, german):
    (german / "lgpt-index.toml").write_text(f'model = "{fake_model}"\nlanguage = "german"\n')
    done = run_cli("build", "docs")
    assert done.exit_code == 0, done.stderr
    assert _manifest(["--index-dir", str(german / ".lgpt-index")]).settings.language == "de"
    bad = run_cli("build", "docs", "--language", "klingon")
    assert bad.exit_code == 2 and "klingon: not a language with a stemmer" in bad.stderr, bad.stderr


def test_an_index_without_a_language_writes_no_language_setting(fake_model, german):
    """Left at auto, the manifest's bytes are those an older lgpt-index reads (no new key)."""
    location = ["--index-dir", str(german / "idx")]
    _build(german, fake_model, *location)
    first = list((german / "idx" / "default").rglob("gen-*.json"))
    assert first and all(b'"language"' not in path.read_bytes() for path in first)
    _build(german, fake_model, "--language", "de", *location)
    assert any(b'"language":"de"' in path.read_bytes() for path in (german / "idx" / "default").rglob("gen-*.json"))


def test_upgrade_rebuilds_a_qdrant_stores_sparse_vectors_of_another_analysis(fake_model, german, monkeypatch):
    """A Qdrant store whose text index (and sparse vectors) another analysis made answers text queries
    visually; `upgrade` writes its text index and every page's sparse vector again, the pages' points kept."""
    from localgpt_index.index.qdrant import sparse
    from localgpt_index.index.text import artifact

    location = ["--store", f"qdrant+path://{german / 'qd'}/pages"]
    with monkeypatch.context() as patch:
        patch.setattr(artifact, "TOKENIZER_VERSION", artifact.TOKENIZER_VERSION - 1)  # as an older version recorded it
        patch.setattr(sparse, "tokenize", lambda text, language=None: text.split())  # and cut its words: no folding, no stems
        _build(german, fake_model, *location)
    before = _manifest(location)
    assert not artifact.current(before.artifacts["lexical"])
    upgraded = run_cli("upgrade", "--json", *location)
    assert upgraded.exit_code == 0, upgraded.stderr
    assert json.loads(upgraded.stdout)["text_reindexed"] is True, upgraded.stdout
    after = _manifest(location)
    assert artifact.current(after.artifacts["lexical"]) and after.segments == before.segments
    assert _found(location, "Lieferung Koln") == ["de.pdf"]  # a stem and a folded accent: the new analysis's vectors
    again = run_cli("upgrade", "--json", *location)
    assert again.exit_code == 0 and json.loads(again.stdout)["upgraded"] is False, again.stdout
