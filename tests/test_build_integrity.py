"""Issue 24, the build pipeline: a file rewritten in place mid-build, page refusals and bugs in the
encoder, Ray's network exposure and connect, byaldi imports of converted documents, re-tags in the
report, a single file as DOCS, LibreOffice templates. Black-box: the CLI, files on disk."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import faulty_model, run_cli, run_process, validate
from docgen import make_pdf, make_png
from helpers import build_json, build_ok, free_port, held_build


def _bmp(path: Path, color: tuple[int, int, int]) -> Path:
    """A solid picture whose file size depends only on its dimensions (BMP: no compression)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 64), color).save(path, "BMP")
    return path


def _rewrite_in_place(path: Path, color: tuple[int, int, int]) -> None:
    """What `cp -p` or `rsync --inplace -t` do: same file, same size, new bytes, the old mtime put back."""
    import io

    from PIL import Image

    before = os.stat(path)
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(buffer, "BMP")
    assert len(buffer.getvalue()) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(buffer.getvalue())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def _listed(index: Path) -> dict[str, str]:
    """path -> sha256 of the documents the index holds."""
    result = run_cli("ls", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    documents = data["documents"] if isinstance(data, dict) else data
    return {d["path"]: d["sha256"] for d in documents}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


# 1. a file rewritten in place during a build, same size, mtime restored

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_file_rewritten_in_place_during_the_build_is_reported_changed(fake_model, tmp_path):
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    red, blue = _bmp(docs / "a.bmp", (255, 0, 0)), _bmp(docs / "b.bmp", (0, 0, 255))
    old_sha = _sha256(red)
    args = ["build", str(docs), "--index-dir", str(index), "--model", str(fake_model), "--json"]
    build = held_build(args, release, "hashed")  # hashed, nothing rendered yet
    try:
        _rewrite_in_place(red, (0, 255, 0))
    finally:
        release.touch()
    out, err = build.communicate(timeout=300)
    assert build.returncode == 3, err
    report = json.loads(out)
    assert [(Path(f["path"]).name, f["stage"]) for f in report["failures"]] == [("a.bmp", "discover")]
    assert "changed during the build" in report["failures"][0]["reason"]
    listed = _listed(index)
    assert old_sha not in listed.values()  # never the old sha256 with the new content's vectors
    assert listed == {str(blue): _sha256(blue)}
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0
    again, report = build_json(docs, index, "--model", str(fake_model))
    assert again.exit_code == 0, again.stderr
    assert _listed(index)[str(red)] == _sha256(red)


@pytest.mark.parametrize("how", [["--export-pages", "out"], ["--json", "--with-images"]], ids=["export-pages", "with-images"])
def test_pages_of_a_file_rewritten_in_place_since_the_build_are_refused(fake_model, tmp_path, how):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    picture = _bmp(docs / "a.bmp", (255, 0, 0))
    assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    query = ["query", "red", "--index-dir", str(index), *how]
    assert run_cli(*query).exit_code == 0
    os.chmod(picture, 0o640)  # its ctime moves, its content does not: still shown
    assert run_cli(*query).exit_code == 0
    _rewrite_in_place(picture, (0, 255, 0))
    refused = run_cli(*query)
    if "--export-pages" in how:  # the pages asked for cannot all be had: nothing is written
        assert refused.exit_code == 1
        assert "a.bmp changed since it was indexed" in refused.stderr
    else:  # the hit says why it has no image, as serve and mcp answer (the other hits keep theirs)
        assert refused.exit_code == 0, refused.stderr
        [hit] = json.loads(refused.stdout)["queries"][0]["results"]
        assert hit["image_base64"] is None and "a.bmp changed since it was indexed" in hit["image_error"]


# 2, 3. pages the processor refuses; errors of our own in the encoder

def _refusal_corpus(docs: Path) -> None:
    for i in range(3):
        make_png(docs / f"ok-{i}.png", f"fine {i}", size=(64, 64 + i))
    _bmp(docs / "refused.bmp", (0, 255, 0))


def test_a_page_the_processor_refuses_fails_its_document_only(tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _refusal_corpus(docs)
    model = faulty_model(tmp_path / "m", prepare_error_color=[0, 255, 0])
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "2")
    assert result.exit_code == 3, result.stderr
    assert [(Path(f["path"]).name, f["stage"]) for f in report["failures"]] == [("refused.bmp", "encode")]
    assert "rejects this page" in report["failures"][0]["reason"]
    assert report["indexed"] == 3 and report["committed"]
    assert sorted(Path(p).name for p in _listed(index)) == ["ok-0.png", "ok-1.png", "ok-2.png"]


def test_a_page_the_model_refuses_fails_its_document_only(tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _refusal_corpus(docs)
    model = faulty_model(tmp_path / "m", page_error_color=[0, 255, 0], page_error_type="ValueError")
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "2")
    assert result.exit_code == 3, result.stderr
    assert [(Path(f["path"]).name, f["stage"]) for f in report["failures"]] == [("refused.bmp", "encode")]


@pytest.mark.parametrize("fault", [{"page_error_type": "TypeError", "page_error_color": [0, 255, 0]},
                                   {"page_error_type": "AssertionError", "page_error_color": [0, 255, 0]},
                                   {"prepare_error_type": "AttributeError", "prepare_error_color": [0, 255, 0]}],
                         ids=["TypeError-in-encode", "AssertionError-in-encode", "AttributeError-in-prepare"])
def test_a_bug_in_the_encoder_is_an_internal_error_not_a_bad_page(tmp_path, fault):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _refusal_corpus(docs)
    model = faulty_model(tmp_path / "m", **fault)
    result, report = build_json(docs, index, "--model", str(model), "--batch-size", "2")
    assert result.exit_code == 1, result.stderr
    error = next(iter(fault.values()))
    assert f"internal error: {error}" in result.stderr and "please report" in result.stderr
    assert "Traceback" not in result.stderr
    assert report is not None and report["error"]["kind"] == "internal" and report["error"]["exit_code"] == 1
    if "page_error_type" in fault and fault["page_error_type"] == "TypeError":  # -v adds the traceback (once is enough)
        verbose = run_cli("build", str(docs), "--index-dir", str(index), "--model", str(model), "--batch-size", "2", "-v")
        assert verbose.exit_code == 1 and "Traceback" in verbose.stderr and f"internal error: {error}" in verbose.stderr


# 8. a single file as DOCS

def test_build_of_a_single_file_indexes_it_and_leaves_the_others(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    a = make_pdf(docs / "a.pdf", ["alpha"])
    b = make_pdf(docs / "sub" / "b.pdf", ["beta"])
    first, report = build_json(a, index, "--model", str(fake_model))  # a fresh index from one file
    assert first.exit_code == 0, first.stderr
    assert report["indexed"] == 1 and _listed(index) == {str(a): _sha256(a)}
    assert build_json(docs, index, "--model", str(fake_model))[1]["indexed"] == 1  # b joins
    make_pdf(a, ["alpha, second edition"])
    b.unlink()  # not looked at by a build of a.pdf: it stays
    c = make_pdf(docs / "c.pdf", ["gamma"])  # not looked at either: not added
    result, report = build_json(a, index, "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert (report["indexed"], report["removed"], report["documents_seen"]) == (1, 0, 1)
    assert set(_listed(index)) == {str(a), str(b)} and _listed(index)[str(a)] == _sha256(a)
    validate(report, "build")
    assert build_json(c, index, "--model", str(fake_model))[1]["indexed"] == 1
    assert set(_listed(index)) == {str(a), str(b), str(c)}


def test_build_of_a_single_file_of_an_unsupported_type_is_a_usage_error(fake_model, tmp_path):
    notes = tmp_path / "notes.xyz"
    notes.write_text("hello")
    result = run_cli("build", str(notes), "--index-dir", str(tmp_path / "idx"), "--model", str(fake_model))
    assert result.exit_code == 2
    assert "notes.xyz: unsupported type .xyz" in result.stderr


# 7. a re-tag is reported

def test_a_metadata_retag_is_reported(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    for i in range(3):
        make_pdf(docs / f"doc-{i}.pdf", [f"doc {i}"])
    assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"doc-1.pdf": {"team": "blue"}, "doc-2.pdf": {"team": "red"}}))
    result, report = build_json(docs, index, "--metadata", str(rules))
    assert result.exit_code == 0, result.stderr
    validate(report, "build")
    assert (report["indexed"], report["unchanged"], report["retagged"]) == (0, 3, 2)
    assert "3 unchanged (2 re-tagged)" in result.stderr
    human = run_cli("build", str(docs), "--index-dir", str(index), "--metadata", str(rules))
    assert "3 unchanged," in human.stderr and "re-tagged" not in human.stderr  # nothing changed this time


# 9. office templates

TEMPLATES = [".ott", ".otp", ".ots", ".dotx", ".potx", ".xltx", ".dot", ".pot", ".xlt"]


def test_office_templates_are_recognised(fake_model, tmp_path):
    """Recognised as office files: not skipped as unsupported, and checked as their kind (these bytes
    are not, which fails them before any converter runs)."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    docs.mkdir()
    for suffix in TEMPLATES:
        (docs / f"t{suffix}").write_bytes(f"not an office file ({suffix})".encode())
    result, report = build_json(docs, index, "--model", str(fake_model))
    assert report["skipped_files"] == [], report["skipped_files"]
    reasons = {Path(f["path"]).suffix: f["reason"] for f in report["failures"]}
    assert sorted(reasons) == sorted(TEMPLATES)
    assert all(f"not a valid {suffix} file" in reason for suffix, reason in reasons.items())


@pytest.mark.slow
@pytest.mark.parametrize("make, suffix", [("docx", ".ott"), ("pptx", ".otp"), ("xlsx", ".ots")])
def test_a_libreoffice_template_is_converted_and_indexed(fake_model, tmp_path, make, suffix):
    import docgen

    made = {"docx": lambda p: docgen.make_docx(p, ["Quarterly template"]),
            "pptx": lambda p: docgen.make_pptx(p, ["Quarterly template"]),
            "xlsx": lambda p: docgen.make_xlsx(p, [("quarter", "revenue"), ("Q1", 10)])}[make](tmp_path / f"source.{make}")
    docs, index = tmp_path / "docs", tmp_path / "idx"
    docs.mkdir()
    subprocess.run(["soffice", "--headless", f"-env:UserInstallation=file://{tmp_path}/lo-profile", "--convert-to",
                    suffix[1:], "--outdir", str(docs), str(made)], check=True, capture_output=True, timeout=180)
    template = docs / f"source{suffix}"
    assert template.is_file()  # made by LibreOffice itself
    result, report = build_json(docs, index, "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert report["indexed"] == 1 and report["pages_embedded"] >= 1
    listed = json.loads(run_cli("ls", "--index-dir", str(index), "--json").stdout)["documents"]
    assert [(Path(d["path"]).name, d["converter"]) for d in listed] == [(template.name, "libreoffice")]


# 4, 5. Ray: a local cluster on loopback only; an address where nothing listens

LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


@pytest.mark.slow
def test_a_local_ray_cluster_listens_on_loopback_only(fake_model, tmp_path):
    import psutil

    docs, release = tmp_path / "docs", tmp_path / "release"
    make_pdf(docs / "a.pdf", [f"page {p}" for p in range(3)])
    args = ["build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--ray", "local"]
    build = held_build(args, release, "encode")  # the cluster is up and encoding
    try:
        listening = []
        for process in [psutil.Process(build.pid), *psutil.Process(build.pid).children(recursive=True)]:
            try:
                sockets = process.net_connections(kind="inet")
            except psutil.Error:
                continue
            listening += [(process.name(), s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN]
    finally:
        release.touch()
    out, err = build.communicate(timeout=300)
    assert build.returncode == 0, err[-3000:]
    names = {name for name, _, _ in listening}
    assert {"gcs_server", "raylet"} <= names, listening
    assert [entry for entry in listening if entry[1] not in LOOPBACK] == []


@pytest.mark.slow
def test_a_ray_address_where_nothing_listens_fails_at_once(fake_model, tmp_path):
    port = free_port()
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "a.pdf", ["a"])
    # a process of its own, ended after 60 s: the old code waited for ever
    result = run_process("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ray",
                         f"127.0.0.1:{port}", timeout=60)
    assert result.returncode == 4, result.stderr
    assert f"--ray 127.0.0.1:{port}: nothing accepts a connection" in result.stderr
    assert "Traceback" not in result.stderr
    again = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert again.exit_code == 0, again.stderr


# 6. converted documents through a byaldi export and import

@pytest.mark.slow
def test_converted_documents_imported_from_byaldi_are_converted_by_the_next_build(tiny_model, tmp_path, unstable_converter):
    docs, first, second = tmp_path / "docs", tmp_path / "first", tmp_path / "second"
    report_pdf = make_pdf(docs / "report.pdf", ["Quarterly revenue"])
    (docs / "notes.txt").write_text("Meeting notes: the budget")
    build_ok(str(docs), "--model", str(tiny_model), "--index-dir", str(first))
    exported = tmp_path / "export" / "colpali"
    assert run_cli("export", str(exported), "--format", "byaldi", "--index-dir", str(first)).exit_code == 0
    assert run_cli("import", str(exported), "--format", "byaldi", "--index-dir", str(second)).exit_code == 0
    query = ["query", "notes", "-k", "5", "--index-dir", str(second), "--export-pages"]

    refused = run_cli(*query, str(tmp_path / "pages-1"))  # no PDF of notes.txt yet, and poppler is not run on it
    assert refused.exit_code == 1
    assert "notes.txt: its pages cannot be shown" in refused.stderr and "Run build" in refused.stderr

    result = run_cli("build", str(docs), "--index-dir", str(second), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["indexed"], report["unchanged"]) == (1, 1)  # notes.txt converted, report.pdf kept as imported
    listed = json.loads(run_cli("ls", "--index-dir", str(second), "--json").stdout)["documents"]
    assert {Path(d["path"]).name: d["converter"] for d in listed} == {"notes.txt": "libreoffice", "report.pdf": None}
    shown = run_cli(*query, str(tmp_path / "pages-2"))
    assert shown.exit_code == 0, shown.stderr
    manifest = json.loads((tmp_path / "pages-2" / "manifest.json").read_text())
    assert {Path(h["path"]).name for h in manifest["queries"][0]["results"]} == {"notes.txt", report_pdf.name}


@pytest.mark.slow
@pytest.mark.parametrize("fault, code", [({"prepare_error_color": [0, 255, 0]}, 3),
                                         ({"page_error_color": [0, 255, 0], "page_error_type": "TypeError"}, 1)],
                         ids=["refused-page", "bug"])
def test_page_refusals_and_bugs_through_ray(tmp_path, fault, code):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _refusal_corpus(docs)
    model = faulty_model(tmp_path / "m", **fault)
    result, report = build_json(docs, index, "--model", str(model), "--ray", "local")
    assert result.exit_code == code, result.stderr
    if code == 3:
        assert [(Path(f["path"]).name, f["stage"]) for f in report["failures"]] == [("refused.bmp", "encode")]
        assert report["indexed"] == 3
    else:
        assert "internal error: TypeError" in result.stderr and "Traceback" not in result.stderr
