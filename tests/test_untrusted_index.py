"""An index folder is input too: a tampered one (manifest edited, sha256 in HEAD recomputed) is refused
with a message, never trusted, never a traceback, never a hang."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli, unstable_soffice
from docgen import make_pdf, make_png


@pytest.fixture(scope="module")
def built(fake_model, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("untrusted")
    docs = work / "docs"
    make_pdf(docs / "a.pdf", ["one", "two"])
    make_png(docs / "b.png", "image")
    (docs / "c.txt").write_text("converted text")
    index = work / "idx"
    env = unstable_soffice(work / "bin")  # a converted document without LibreOffice
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), env=env)
    assert result.exit_code == 0, result.stderr
    return index


@pytest.fixture
def index(built, tmp_path) -> Path:
    copy = tmp_path / "idx"
    shutil.copytree(built, copy)
    return copy


def _tamper(index: Path, edit) -> None:
    """Edit the current manifest as JSON and recompute HEAD's sha256, as an attacker would."""
    root = index / "default"
    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    edit(data)
    raw = json.dumps(data).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "sha256": hashlib.sha256(raw).hexdigest()}))


def _write_head(index: Path, **fields) -> None:
    root = index / "default"
    head = json.loads((root / "HEAD").read_text())
    (root / "HEAD").write_text(json.dumps({**head, **fields}))


def _refused(index: Path, *expected: str) -> None:
    """Every command that reads the index refuses it cleanly; verify names the problem."""
    for args in (["verify"], ["query", "anything"], ["status"]):
        result = run_cli(*args, "--index-dir", str(index))
        assert result.exit_code == 1, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == "" or args == ["verify"]
        assert any(text in result.stderr for text in expected), (args, result.stderr)
        assert re.search(re.escape(str(index / "default")) + r"/\w", result.stderr), (args, result.stderr)  # names the file
        if args != ["verify"]:
            assert "--rebuild" in result.stderr or "unknown index format" in result.stderr, (args, result.stderr)


def _first_segment_edit(change):
    def edit(data):
        doc = data["documents"][0]
        change(data, doc)

    return edit


def test_a_segment_id_that_climbs_out_of_the_index(index):
    def edit(data, doc):
        evil = "../../../../elsewhere/evil"
        key = doc["spans"][0]["segment"]
        data["segments"][evil] = {**data["segments"].pop(key), "id": evil}
        for d in data["documents"]:
            for span in d["spans"]:
                span["segment"] = evil

    _tamper(index, _first_segment_edit(edit))
    _refused(index, "the manifest is malformed")


def test_a_stored_pdf_name_that_points_outside(index):
    def edit(data, doc):
        converted = next(d for d in data["documents"] if d["pdf"])
        converted["pdf"] = "../../outside.pdf"

    _tamper(index, _first_segment_edit(edit))
    _refused(index, "the manifest is malformed")


def test_a_stored_pdf_replaced_by_a_link_to_another_file(index, tmp_path):
    outside = make_pdf(tmp_path / "secret.pdf", ["secret"])
    [stored] = (index / "default" / "pdf").iterdir()
    stored.unlink()
    os.symlink(outside, stored)
    verified = run_cli("verify", "--index-dir", str(index))
    assert verified.exit_code == 1 and "outside the index" in verified.stderr
    converted = "c.txt"
    pages = run_cli("query", "converted", "-k", "10", "--export-pages", str(tmp_path / "pages"), "--index-dir", str(index))
    assert pages.exit_code == 1 and "outside the index" in pages.stderr and "Traceback" not in pages.stderr
    assert not any(p.name.endswith(".png") and converted in p.name for p in (tmp_path / "pages").glob("*"))


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "../../../../etc/passwd", "gen-1.json/.."])
def test_head_naming_something_that_is_not_a_manifest(index, target):
    _write_head(index, manifest=target)
    _refused(index, "the index pointer is malformed")


@pytest.mark.timeout(30)
def test_head_naming_a_fifo_does_not_hang(index):
    root = index / "default"
    os.mkfifo(root / "gen-00000099.json")
    _write_head(index, manifest="gen-00000099.json")
    _refused(index, "not a regular file")


def test_a_huge_head_is_not_read_into_memory(index):
    (index / "default" / "HEAD").write_bytes(b" " * (8 << 20))
    _refused(index, "more than the 4096 allowed")


def test_a_negative_first_page(index):
    _tamper(index, _first_segment_edit(lambda data, doc: doc["spans"][0].update(first=-3)))
    _refused(index, "the manifest is malformed")


def test_a_span_past_the_end_of_its_segment(index):
    _tamper(index, _first_segment_edit(lambda data, doc: doc["spans"][0].update(first=10_000)))
    _refused(index, "lie outside segment")


@pytest.mark.parametrize("change", ["missing", "extra", "wrong-type", "not-an-object", "deep"])
def test_manifests_with_missing_extra_or_mistyped_keys(index, change):
    def edit(data):
        if change == "missing":
            del data["documents"][0]["sha256"]
        elif change == "extra":
            data["documents"][0]["evil"] = True
        elif change == "wrong-type":
            data["documents"][0]["pages"] = "many"
        elif change == "not-an-object":
            data.clear()
            data["format"] = ["lgpt-index/2"]

    if change == "deep":
        root = index / "default"
        head = json.loads((root / "HEAD").read_text())
        raw = b"[" * 100_000 + b"]" * 100_000
        (root / head["manifest"]).write_bytes(raw)
        _write_head(index, sha256=hashlib.sha256(raw).hexdigest())
        _refused(index, "not valid JSON", "malformed")
        return
    _tamper(index, edit)
    _refused(index, "the manifest is malformed", "unknown index format")


def test_a_segments_folder_that_is_a_link_elsewhere(index, tmp_path):
    root = index / "default"
    shutil.move(root / "segments", tmp_path / "moved")
    os.symlink(tmp_path / "moved", root / "segments")
    _refused(index, "not a folder")


def test_build_and_remove_on_a_damaged_index_stop_and_point_to_rebuild(index, fake_model, tmp_path):
    vectors = next((index / "default" / "segments").glob("*.vectors.npy"))
    data = bytearray(vectors.read_bytes())
    data[-3] ^= 0xFF
    vectors.write_bytes(bytes(data))
    docs = tmp_path / "docs"
    make_pdf(docs / "new.pdf", ["new"])
    for args in (["build", str(docs)], ["remove", str(docs / "new.pdf")], ["query", "one", "-k", "50"]):
        result = run_cli(*args, "--index-dir", str(index))
        assert result.exit_code == 1 and "damaged" in result.stderr and "--rebuild" in result.stderr, result.stderr
        assert str(vectors) in result.stderr and "Traceback" not in result.stderr, result.stderr  # names the file
    assert not (index / "default" / "gen-00000002.json").exists()  # nothing committed on top of it
    rebuilt = run_cli("build", str(docs), "--rebuild", "--model", str(fake_model), "--index-dir", str(index))
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0


@pytest.mark.parametrize("store", ["local", "qdrant"])
def test_the_rebuild_a_damaged_index_points_to_keeps_its_model_and_recorded_settings(fake_model, tmp_path, store):
    """The hint says `build DOCS --rebuild`: as on a sound index, the model and the settings left out are the
    index's (its manifest still reads where its vectors are damaged, or a Qdrant store's points were deleted
    behind its back), not the defaults."""
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["one", "two"])
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    where = ("--index-dir", str(tmp_path / "idx")) if store == "local" else ("--store", url)
    built = run_cli("build", str(docs), "--model", str(fake_model), "--ocr", "never", "--language", "de", *where)
    assert built.exit_code == 0, built.stderr
    before = json.loads(run_cli("status", "--json", *where).stdout)
    _damage(store, tmp_path, url, docs / "a.pdf")
    for command in (("build", str(docs)), ("remove", str(docs / "a.pdf"))):  # damaged: refused, pointing to --rebuild
        refused = run_cli(*command, *where)
        assert refused.exit_code == 1 and "damaged" in refused.stderr and "--rebuild" in refused.stderr, refused.stderr
    rebuilt = run_cli("build", str(docs), "--rebuild", *where)
    assert rebuilt.exit_code == 0, rebuilt.stderr
    after = json.loads(run_cli("status", "--json", *where).stdout)
    assert after["model"] == before["model"] and after["settings"] == before["settings"]
    assert (after["settings"]["ocr"], after["settings"]["language"]) == ("never", "de")


def _damage(store: str, tmp_path: Path, url: str, document: Path) -> None:
    """A local index's vectors flipped, or a Qdrant store's points of `document` deleted by another client."""
    if store == "local":
        vectors = next((tmp_path / "idx" / "default" / "segments").glob("*.vectors.npy"))
        data = bytearray(vectors.read_bytes())
        data[-3] ^= 0xFF
        vectors.write_bytes(bytes(data))
        return
    from qdrant_client import models

    from localgpt_index.index.open import open_store

    opened = open_store(url)
    try:
        opened.client.delete(opened.physical(), points_selector=models.FilterSelector(filter=models.Filter(must=[
            models.FieldCondition(key="path", match=models.MatchValue(value=str(document)))])))
    finally:
        opened.close()


def test_an_unknown_newer_format_names_the_upgrade(index):
    _tamper(index, lambda data: data.update(format="lgpt-index/9"))
    result = run_cli("status", "--index-dir", str(index))
    assert result.exit_code == 1 and "unknown index format" in result.stderr and "upgrade lgpt-index" in result.stderr


def test_the_published_manifest_schema_is_current():
    from localgpt_index.index.format.manifest import json_schema

    published = Path(__file__).resolve().parent.parent / "localgpt_index" / "schemas" / "manifest.schema.json"
    assert json.loads(published.read_text()) == json_schema(), "regenerate: python -m localgpt_index.index.format.manifest"
