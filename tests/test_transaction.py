"""The index core as one transaction: every reproduction of the core issue, with the fake model.

Each test here failed on the main of before the transaction (folders dropped by --rebuild,
unlistable folders emptied, stored PDFs rewritten in place, memory growing with --rebuild,
every device error blamed on documents, ...)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import weakref
from pathlib import Path

import numpy as np
import pytest

from conftest import faulty_model, run_cli
from docgen import make_pdf, make_png
from helpers import build_json, flip_byte, verify_ok


def _docs(folder: Path, count: int, prefix: str = "doc", pages: int = 1) -> list[Path]:
    return [make_pdf(folder / f"{prefix}-{i:03d}.pdf", [f"{prefix} {i} page {p}" for p in range(pages)]) for i in range(count)]


def _manifest(index: Path):
    from localgpt_index.index.local.store import LocalStore

    return LocalStore(index / "default").read_manifest()


def _age(folder: Path, seconds: float = 3600) -> None:
    """Move every file's times into the past, as for files that were not just written."""
    for path in folder.rglob("*"):
        if path.is_file():
            past = path.stat().st_mtime - seconds
            os.utime(path, (past, past))


def test_rebuild_of_one_folder_keeps_the_documents_of_another(fake_model, tmp_path):
    a, b, index = tmp_path / "a", tmp_path / "b", tmp_path / "idx"
    _docs(a, 2, "a")
    _docs(b, 3, "b")
    assert build_json(a, index, "--model", str(fake_model))[0].exit_code == 0
    assert build_json(b, index)[0].exit_code == 0
    result, report = build_json(a, index, "--rebuild")
    assert result.exit_code == 0, result.stderr
    assert report["indexed"] == 2 and report["kept"] == 3 and report["removed"] == 0
    paths = {Path(d.path).parent.name for d in _manifest(index).documents}
    assert paths == {"a", "b"} and len(_manifest(index).documents) == 5
    verify_ok(index)


@pytest.mark.parametrize("change", ["model", "pool factor"])
def test_rebuild_with_another_model_will_not_silently_drop_another_folder(fake_model, tmp_path, change):
    """Another model, or another pool factor, given to --rebuild is refused while another folder's
    vectors (made the old way) are kept (docs/building.md)."""
    a, b, index = tmp_path / "a", tmp_path / "b", tmp_path / "idx"
    _docs(a, 1, "a")
    _docs(b, 1, "b")
    build_json(a, index, "--model", str(fake_model))
    build_json(b, index)
    before = _manifest(index).generation
    given = ["--model", str(faulty_model(tmp_path / "other-model", page_tokens=8))] if change == "model" else ["--pool-factor", "2"]
    result, _ = build_json(a, index, "--rebuild", *given)
    assert result.exit_code == 1 and str(b) in result.stderr, result.stderr
    assert "another model, pool factor or visual-token budget" in result.stderr
    assert "lgpt-index remove" in result.stderr
    assert len(_manifest(index).documents) == 2 and _manifest(index).generation == before  # nothing changed


def test_a_folder_that_cannot_be_listed_keeps_its_documents(fake_model, tmp_path, monkeypatch):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs / "shared", 2, "s")
    _docs(docs, 1, "top")
    build_json(docs, index, "--model", str(fake_model))
    real_scandir = os.scandir

    def failing(path):
        if os.fspath(path).endswith("shared"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", failing)
    result, report = build_json(docs, index)
    assert report["removed"] == 0 and report["kept"] == 2
    assert report["unreadable"][0]["path"].endswith("shared") and "Permission denied" in report["unreadable"][0]["reason"]
    assert "its documents stay in the index" in result.stderr
    assert len(_manifest(index).documents) == 3


@pytest.mark.parametrize("name", ["scans", "scans.pdf"])
def test_a_folder_deleted_renamed_or_replaced_by_a_file_leaves_no_ghosts(fake_model, tmp_path, name):
    """Issue 39, 10: a folder discovery did not list because it is gone (the folder above it listed
    without it) takes its documents with it; only a folder that exists and cannot be listed keeps them."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    top = _docs(docs, 1, "top")[0]
    _docs(docs / "deleted", 1, "d")
    _docs(docs / "renamed", 1, "r")
    _docs(docs / name / "deep", 1, "s")
    build_json(docs, index, "--model", str(fake_model))
    shutil.rmtree(docs / "deleted")
    (docs / "renamed").rename(docs / "moved")
    (docs / name).rename(tmp_path / "away")
    make_pdf(docs / name, ["a file where the folder was"])
    result, report = build_json(docs, index)
    assert result.exit_code == 0, result.stderr
    assert report["removed"] == 3 and report["kept"] == 0, report
    expected = {str(top), str(docs / "moved" / "r-000.pdf")} | ({str(docs / name)} if name.endswith(".pdf") else set())
    assert {d.path for d in _manifest(index).documents} == expected
    verify_ok(index)


def test_stored_pdfs_are_named_by_their_content_and_an_aborted_rebuild_leaves_them(fake_model, tmp_path, unstable_converter):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    _docs(docs, 1)
    assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    [stored] = [d for d in _manifest(index).documents if d.pdf]
    assert stored.pdf == f"pdf/{stored.pdf_sha256}.pdf"
    before = (index / "default" / stored.pdf).read_bytes()

    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    pages = _manifest(index).page_count
    result, report = build_json(docs, index, "--rebuild", "--strict")  # converts again (other bytes), then aborts
    assert result.exit_code == 1
    assert (report["committed"], report["generation"], report["pages_total"]) == (False, 1, pages)  # the index as it stands
    verify_ok(index)
    assert (index / "default" / stored.pdf).read_bytes() == before
    assert sorted(p.name for p in (index / "default" / "pdf").iterdir()) == [Path(stored.pdf).name]  # nothing staged is left

    (docs / "broken.pdf").unlink()
    assert build_json(docs, index, "--rebuild")[0].exit_code == 0
    [restored] = [d for d in _manifest(index).documents if d.pdf]
    assert restored.pdf != stored.pdf  # a new conversion, a new name: the old file was never touched
    verify_ok(index)


class _Tracking:
    """Wraps the fake encoder and counts the page vectors it returned that are still alive."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.alive: list[weakref.ref] = []
        self.peak = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode_pages(self, pages):
        gc.collect()
        self.peak = max(self.peak, sum(r() is not None for r in self.alive))
        vectors = self.inner.encode_pages(pages)
        self.alive += [weakref.ref(v) for v in vectors]
        return vectors


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("mode", [(), ("--rebuild",), ("--strict",)], ids=["plain", "rebuild", "strict"])
def test_pages_held_in_memory_do_not_grow_with_the_corpus(fake_model, tmp_path, mode):
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.models.loading import load_page_encoder
    from localgpt_index.index.local.store import LocalStore

    docs = tmp_path / "docs"
    for i in range(60):
        make_png(docs / f"page-{i:03d}.png", f"page {i}", size=(64, 64 + i))
    store = LocalStore(tmp_path / "idx" / "default")
    build_index(docs, store, BuildOptions(model=ModelSpec(str(fake_model)), batch_size=4))
    made: list[_Tracking] = []

    def factory(model, options):
        made.append(_Tracking(load_page_encoder(model, options)))
        return made[-1]

    options = BuildOptions(model=ModelSpec(str(fake_model)), batch_size=4, rebuild=True, strict="--strict" in mode, rehash=True)
    report = build_index(docs, store, options, encoder_factory=factory)
    assert report.pages_embedded == 60 and report.committed
    assert len(made[0].alive) == 60  # it watched every page
    assert made[0].peak <= 4  # one batch: vectors go to disk as they come, whatever the mode


def test_out_of_memory_halves_the_batch_and_goes_on(tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 6)
    model = faulty_model(tmp_path / "m", oom_above_batch=2)
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "8")
    assert result.exit_code == 0, result.stderr
    assert report["indexed"] == 6 and report["failed"] == 0
    assert "batch size lowered to 2" in result.stderr


def test_a_lost_device_stops_the_build_with_exit_4_and_keeps_what_was_committed(tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 10)
    model = faulty_model(tmp_path / "m", device_lost_after_pages=5)
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "1")
    assert result.exit_code == 4 and report["exit_code"] == 4
    assert "device" in report["stopped"] and report["failed"] == 0  # not 5 "failed documents"
    assert len(_manifest(index).documents) == 5  # what was embedded before is committed
    verify_ok(index)


def test_a_page_that_fails_alone_fails_only_its_document(tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    for i in range(5):
        make_png(docs / f"ok-{i}.png", f"fine {i}", size=(64, 64 + i))
    from PIL import Image

    Image.new("RGB", (64, 64), (255, 0, 255)).save(docs / "poison.png")
    model = faulty_model(tmp_path / "m", page_error_color=[255, 0, 255])
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "4")
    assert result.exit_code == 3
    assert [Path(f["path"]).name for f in report["failures"]] == ["poison.png"]
    assert report["failures"][0]["stage"] == "encode" and report["indexed"] == 5


def test_first_pass_with_a_filter_that_matches_nothing(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 3)
    build_json(docs, index, "--model", str(fake_model))
    result = run_cli("query", "anything", "--first-pass", "5", "--filter", "team=nobody", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["queries"][0]["results"] == []


def test_a_full_disk_during_remove_is_one_clean_message(fake_model, tmp_path, monkeypatch):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    files = _docs(docs, 2)
    build_json(docs, index, "--model", str(fake_model))
    monkeypatch.setenv("LGPT_FAILPOINT", "before-head:1:enospc")
    result = run_cli("remove", str(files[0]), "--index-dir", str(index))
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr and "keeps generation 1" in result.stderr
    monkeypatch.delenv("LGPT_FAILPOINT")
    assert len(_manifest(index).documents) == 2
    verify_ok(index)


def test_a_no_op_build_reads_no_file(fake_model, tmp_path, monkeypatch):
    import localgpt_index.ingest.discover as discover

    docs, index = tmp_path / "docs", tmp_path / "idx"
    files = _docs(docs, 4)
    _age(docs)
    build_json(docs, index, "--model", str(fake_model))
    reads: list[str] = []
    real = discover.sha256_file
    monkeypatch.setattr(discover, "sha256_file", lambda path, *a: reads.append(str(path)) or real(path, *a))
    result, report = build_json(docs, index)
    assert report["hashed"] == 0 and reads == [] and report["unchanged"] == 4 and report["generation"] == 1

    os.utime(files[1])  # touched, bytes unchanged: hashed again, nothing embedded
    _, report = build_json(docs, index)
    assert reads == [str(files[1])] and report["hashed"] == 1 and report["pages_embedded"] == 0 and report["unchanged"] == 4

    _, report = build_json(docs, index, "--rehash")
    assert report["hashed"] == 4 and report["pages_embedded"] == 0


def test_a_change_that_keeps_size_and_mtime_is_still_found(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    [doc] = _docs(docs, 1)
    _age(docs)
    build_json(docs, index, "--model", str(fake_model))
    info = doc.stat()
    data = bytearray(doc.read_bytes())
    data[-20] ^= 1  # same size; the next line restores the times
    doc.write_bytes(bytes(data))
    os.utime(doc, ns=(info.st_atime_ns, info.st_mtime_ns))
    _, report = build_json(docs, index)
    assert report["hashed"] == 1 and report["indexed"] == 1  # the inode's ctime moved, as git's index would notice


def test_a_query_uses_the_model_revision_the_index_recorded(tmp_path, monkeypatch):
    from localgpt_index.testing.fake import write_fake_checkpoint

    hub = tmp_path / "hf-home" / "hub" / "models--acme--fake-retriever"
    first, second = "1" * 40, "2" * 40
    write_fake_checkpoint(hub / "snapshots" / first)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text(first)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))  # read at import
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 2)
    result, report = build_json(docs, index, "--model", "acme/fake-retriever")
    assert result.exit_code == 0, result.stderr
    assert report["model"]["revision"] == first

    write_fake_checkpoint(hub / "snapshots" / second)  # the cache moves on to a newer snapshot
    (hub / "refs" / "main").write_text(second)
    assert run_cli("query", "q", "--index-dir", str(index)).exit_code == 0
    assert build_json(docs, index)[0].exit_code == 0  # and builds keep the recorded revision too

    shutil.rmtree(hub / "snapshots" / first)
    gone = run_cli("query", "q", "--index-dir", str(index))
    assert gone.exit_code == 4
    assert f"hf download acme/fake-retriever --revision {first}" in gone.stderr


def test_a_format_1_index_opens_and_the_next_write_upgrades_it(fake_model, tmp_path):
    from localgpt_index.index.format.manifest import FORMAT
    from localgpt_index.index.format.checksums import block_checksums

    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 2, pages=2)
    build_json(docs, index, "--model", str(fake_model))
    root = index / "default"
    before = run_cli("query", "doc", "--index-dir", str(index), "--json").stdout
    _downgrade_to_format_1(root)
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0
    assert run_cli("query", "doc", "--index-dir", str(index), "--json").stdout == before
    damaged = shutil.copytree(index, tmp_path / "damaged")  # format 1's block sums are still checked
    vectors = next((damaged / "default" / "segments").glob("*.vectors.npy"))
    flip_byte(vectors, vectors.stat().st_size - 3)
    for args in (["verify"], ["query", "doc"]):
        result = run_cli(*args, "--index-dir", str(damaged))
        assert result.exit_code == 1 and "Traceback" not in result.stderr, (args, result.stdout, result.stderr)
        assert "vectors.npy" in result.stderr, (args, result.stderr)
    result, report = build_json(docs, index)
    assert result.exit_code == 0 and report["pages_embedded"] == 0
    manifest = _manifest(index)
    assert manifest.format == FORMAT
    [segment] = manifest.segments.values()
    assert segment.checksum.algorithm == "xxh3_64"
    assert segment.checksum.blocks == block_checksums(root / "segments" / f"{segment.id}.vectors.npy")


def test_a_format_3_index_opens_and_the_next_write_records_format_4(fake_model, tmp_path):
    from localgpt_index.index.format.manifest import FORMAT

    docs, index = tmp_path / "docs", tmp_path / "idx"
    _docs(docs, 2, pages=2)
    _age(docs)  # stats to trust: the second build has nothing to do but the upgrade
    build_json(docs, index, "--model", str(fake_model), "--text", "never")
    root = index / "default"
    before = run_cli("query", "doc", "--index-dir", str(index), "--json")
    assert before.exit_code == 0 and json.loads(before.stdout)
    _downgrade_to_format_3(root)
    assert json.loads((root / "HEAD").read_text())["format"] == "lgpt-index/3"
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0
    assert run_cli("query", "doc", "--index-dir", str(index), "--json").stdout == before.stdout
    assert json.loads((root / "HEAD").read_text())["format"] == "lgpt-index/3"  # readers never write
    result, report = build_json(docs, index, "--text", "never")
    assert result.exit_code == 0 and report["pages_embedded"] == 0
    head = json.loads((root / "HEAD").read_text())
    assert head["format"] == json.loads((root / head["manifest"]).read_text())["format"] == FORMAT != "lgpt-index/3"
    assert _manifest(index).format == FORMAT
    assert run_cli("query", "doc", "--index-dir", str(index), "--json").stdout == before.stdout


def _downgrade_to_format_3(root: Path) -> None:
    """Rewrite the current generation as format 3 wrote it: no artifacts, no segment parts."""
    import hashlib

    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    data.pop("artifacts", None)
    for seg in data["segments"].values():
        seg.pop("parts", None)
    raw = json.dumps({**data, "format": "lgpt-index/3"}, indent=1).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "format": "lgpt-index/3", "sha256": hashlib.sha256(raw).hexdigest()}))


def _downgrade_to_format_1(root: Path) -> None:
    """Rewrite the current generation in format 1, as lgpt-index 0.1 wrote it."""
    import hashlib

    from localgpt_index.index.format.checksums import block_checksums

    from localgpt_index.models.resolve import fingerprint_in, resolve_model

    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    data["model"].pop("fingerprint_scheme")  # format 1 fingerprinted a model the first way
    data["model"]["fingerprint"] = fingerprint_in(resolve_model(data["model"]["path"]), 1)
    documents = []
    for doc in data["documents"]:
        [span] = doc.pop("spans")
        doc.pop("stat")
        documents.append({**doc, "mtime": 0.0, "segment": span["segment"], "first_page": span["first"]})
    segments = {}
    for key, seg in data["segments"].items():
        seg.pop("checksum")
        path = root / "segments" / f"{key}.vectors.npy"
        segments[key] = {**seg, "vectors_sum64": [int(h, 16) for h in block_checksums(path, "sum64")]}
    data.pop("in_progress")
    old = {**data, "format": "lgpt-index/1", "documents": documents, "segments": segments}
    raw = json.dumps(old, indent=1).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "format": "lgpt-index/1", "sha256": hashlib.sha256(raw).hexdigest()}))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_long_document_commits_inside_itself_and_a_resumed_build_carries_on(fake_model, tmp_path):
    from conftest import run_process

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "long.pdf", [f"page {p}" for p in range(60)])
    killed = run_process("build", str(docs), "--model", str(fake_model), "--batch-size", "5", "--commit-every", "10",
                         "--index-dir", str(index), env={"LGPT_FAILPOINT": "encode:7"})
    assert killed.returncode == -9
    manifest = _manifest(index)
    assert not manifest.documents and [d.pages for d in manifest.in_progress] == [30]
    verify_ok(index)
    result, report = build_json(docs, index, "--batch-size", "5")
    assert result.exit_code == 0, result.stderr
    assert report["pages_embedded"] == 30 and report["pages_total"] == 60  # carried on from page 31
    [doc] = _manifest(index).documents
    assert doc.pages == 60 and len(doc.spans) > 1 and not _manifest(index).in_progress
    fresh = tmp_path / "fresh"
    build_json(docs, fresh, "--model", str(fake_model))
    assert _vectors(index, doc) == _vectors(fresh, _manifest(fresh).documents[0])  # same as one uninterrupted build


def _vectors(index: Path, doc) -> list[bytes]:
    from localgpt_index.query.search import open_index

    opened = open_index(index)
    out = []
    for span in doc.spans:
        vectors, offsets = opened.store.segment_arrays(opened.manifest.segments[span.segment])
        out += [np.asarray(vectors[offsets[r] : offsets[r + 1]]).tobytes() for r in range(span.first, span.first + span.pages)]
    return out


def test_identical_files_are_embedded_once(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    [original] = _docs(docs, 1, pages=3)
    shutil.copy(original, docs / "copy-1.pdf")
    shutil.copy(original, docs / "copy-2.pdf")
    _, report = build_json(docs, index, "--model", str(fake_model))
    assert report["pages_embedded"] == 3 and report["indexed"] == 1 and report["reused"] == 2
    spans = {tuple(d.spans) for d in _manifest(index).documents}
    assert len(spans) == 1 and len(_manifest(index).documents) == 3


def test_a_first_build_that_finds_no_document_says_no_index_was_created(fake_model, tmp_path):
    """Not "up to date": there is no index to be up to date (status and query then say so), and no model work."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.xyz").write_text("a kind no converter reads")
    result = run_cli("build", str(tmp_path / "empty"), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 0 and "up to date" not in result.stderr, result.stderr
    assert f"No document to index in {tmp_path / 'empty'} (1 file skipped): no index was created." in result.stderr
    status = run_cli("status", "--index-dir", str(tmp_path / "idx"))
    assert status.exit_code == 1 and "no index at" in status.stderr


def test_identical_files_that_fail_each_fail_by_their_own_path(fake_model, tmp_path):
    """docs/building.md: each bad document is reported with its path; a copy of one (the same bytes, read once) too."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    docs.mkdir()
    (docs / "c1.pdf").write_bytes(b"%PDF-1.4\ngarbage\n")
    shutil.copy(docs / "c1.pdf", docs / "c2.pdf")
    (docs / "z1.pdf").write_bytes(b"")
    (docs / "z2.txt").write_bytes(b"")
    (docs / "a.txt").write_text("fine")
    _, report = build_json(docs, index, "--model", str(fake_model))
    assert report["documents_seen"] == 5 and report["indexed"] == 1 and report["failed"] == 4
    failed = {Path(f["path"]).name: f["stage"] for f in report["failures"]}
    assert failed == {"c1.pdf": "render", "c2.pdf": "render", "z1.pdf": "discover", "z2.txt": "discover"}
    assert {Path(f.path).name for f in _manifest(index).failures} == set(failed)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_ctrl_c_during_a_build_over_a_committed_generation_leaves_that_generation(fake_model, tmp_path):
    """docs/building.md: Ctrl-C ends a build with exit 1 and the index at its last commit (here the previous
    build's: the interrupted one is held at its first encoded batch by a failpoint, before any commit)."""
    import signal

    from helpers import held_build, signal_held

    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    kept, gone = _docs(docs, 2, "kept")
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    before = _manifest(index)

    def answers() -> list[tuple[str, int, float]]:
        result = run_cli("query", "kept 1", "-k", "5", "--mode", "visual", "--index-dir", str(index), "--json")
        assert result.exit_code == 0, result.stderr
        return [(hit["path"], hit["page"], hit["score"]) for hit in json.loads(result.stdout)["queries"][0]["results"]]

    answered = answers()
    _docs(docs, 2, "added")
    make_pdf(kept, ["kept 0 rewritten"])
    gone.unlink()
    build = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(index)], release, "encode")
    stderr = signal_held(build, release, signal.SIGINT)
    assert build.returncode == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    after = _manifest(index)
    assert after.generation == before.generation
    assert [(d.path, d.sha256) for d in after.documents] == [(d.path, d.sha256) for d in before.documents]
    verify_ok(index)
    assert answers() == answered
    again, report = build_json(docs, index, "--model", str(fake_model))  # the lock is free, the next build carries on
    assert again.exit_code == 0, again.stderr
    assert sorted(Path(d.path).name for d in _manifest(index).documents) == ["added-000.pdf", "added-001.pdf", "kept-000.pdf"]
