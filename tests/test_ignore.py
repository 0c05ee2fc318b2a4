""".lgptignore files and `remove --ignore`, through the CLI as a user types them (issue 42: what sticks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from helpers import build_json, build_ok
from test_watch import WatchProcess, picture


def indexed(index: Path, docs: Path) -> set[str]:
    """The documents of the index, relative to `docs`."""
    from localgpt_index import open_index

    return {os.path.relpath(d.path, docs).replace(os.sep, "/") for d in open_index(index).manifest.documents}


def tree(docs: Path, names: list[str]) -> None:
    for n, name in enumerate(names):
        picture(docs / name, n)


def test_nested_and_negated_patterns_apply_below_their_folder_as_in_git(fake_model, tmp_path):
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "x.jpg", "keep.jpg", "drafts/d.png", "sub/y.jpg", "sub/secret.png", "sub/deep/z.jpg",
                "[draft] #1 !.png"])
    (docs / ".lgptignore").write_text("# comments and blank lines are fine\n\ndrafts/\n*.jpg\n!keep.jpg\n/\\[draft\\]*\n")
    (docs / "sub" / ".lgptignore").write_text("!*.jpg\nsecret.png\n")
    (docs / "drafts" / ".lgptignore").write_text("!d.png\n")  # a file inside an ignored folder cannot come back
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", "idx")
    assert indexed(Path("idx"), docs) == {"a.png", "keep.jpg", "sub/y.jpg", "sub/deep/z.jpg"}


def test_a_file_that_becomes_ignored_is_removed_by_the_next_build_and_comes_back_when_unignored(fake_model, tmp_path):
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "old/b.png", "old/c.png", "d.png"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", "idx")
    (docs / ".lgptignore").write_text("old/\nd.png\n")
    _, report = build_json(docs, Path("idx"))
    assert report["removed"] == 3 and indexed(Path("idx"), docs) == {"a.png"}
    (docs / ".lgptignore").write_text("old/\n")
    _, report = build_json(docs, Path("idx"))
    assert report["removed"] == 0 and indexed(Path("idx"), docs) == {"a.png", "d.png"}


def test_a_single_file_given_as_docs_that_its_folder_ignores_is_skipped(fake_model, tmp_path):
    docs = tmp_path / "docs"
    tree(docs, ["a.png"])
    (docs / ".lgptignore").write_text("a.png\n")
    _, report = build_json(docs / "a.png", Path("idx"), "--model", str(fake_model))
    assert report["skipped_files"] == [{"path": str(docs / "a.png"), "reason": f"ignored by {docs / '.lgptignore'}"}]


def test_remove_ignore_sticks_across_builds_and_escapes_the_name(fake_model, tmp_path):
    docs = tmp_path / "docs"
    odd = "[draft] #1 *.png"
    tree(docs, ["a.png", f"team/{odd}", "team/[draft] #1 x.png", "old/b.png", "old/c.png"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", "idx")
    os.chdir(docs / "team")
    result = run_cli("remove", "--ignore", odd, "../old", "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 0, result.stderr
    assert "3 documents" in result.stderr and "added to" in result.stderr and "comes back" not in result.stderr
    assert (docs / ".lgptignore").read_text() == "/team/\\[draft\\] \\#1 \\*.png\n/old/\n"
    os.chdir(tmp_path)
    _, report = build_json(docs, Path("idx"))
    assert report["indexed"] == 0 and report["removed"] == 0
    assert indexed(Path("idx"), docs) == {"a.png", "team/[draft] #1 x.png"}


def test_remove_ignore_that_no_ignore_file_can_hold_changes_nothing_and_the_indexed_folder_itself_is_said(fake_model, tmp_path,
                                                                                                         monkeypatch):
    """A name with a line break, the file system's root, an ignore file that cannot be written: refused before
    anything is removed (the index and the ignore files as they were). The indexed folder itself goes into the
    ignore file above it, which its own builds do not read: said so, each ignore file written on its own line."""
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "b.png", "new\nline.png"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", "idx")
    before = indexed(Path("idx"), docs)
    for paths, code in (([str(docs / "a.png"), str(docs / "new\nline.png")], 2), (["/"], 2), ([str(docs)], 1)):
        with monkeypatch.context() as patch:
            if code == 1:  # the folder above the indexed one not writable (as root, no mode bits say so: told here)
                access = os.access
                patch.setattr(os, "access", lambda path, mode, **kw: os.fspath(path) != str(tmp_path) and access(path, mode, **kw))
            result = run_cli("remove", "--ignore", *paths, "--index-dir", str(tmp_path / "idx"))
        assert result.exit_code == code and "Nothing was removed." in result.stderr, result.stderr
        assert indexed(Path("idx"), docs) == before and not (docs / ".lgptignore").exists()
    result = run_cli("remove", "--ignore", str(docs), str(docs / "a.png"), "--index-dir", "idx")
    assert result.exit_code == 0 and (tmp_path / ".lgptignore").read_text() == "/docs/\n"
    assert (docs / ".lgptignore").read_text() == "/a.png\n"
    assert f"added to {tmp_path / '.lgptignore'}: docs/\n" in result.stderr and f"added to {docs / '.lgptignore'}: a.png\n" in result.stderr
    said = f"a build of the indexed folder does not read {tmp_path / '.lgptignore'}"
    assert said in result.stderr and result.stderr.count("does not read") == 1, result.stderr


def test_remove_without_ignore_says_the_file_comes_back_with_the_next_build(fake_model, tmp_path):
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "b.png"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", "idx")
    result = run_cli("remove", str(docs / "b.png"), "--index-dir", "idx")
    assert result.exit_code == 0
    assert "the next build or watch indexes them again" in result.stderr and "--ignore" in result.stderr
    assert not (docs / ".lgptignore").exists()
    _, report = build_json(docs, Path("idx"))
    assert report["indexed"] + report["reused"] == 1 and indexed(Path("idx"), docs) == {"a.png", "b.png"}
    (docs / "b.png").unlink()  # a file gone from its folder: nothing to warn about
    result = run_cli("remove", str(docs / "b.png"), "--index-dir", "idx")
    assert result.exit_code == 0 and "again" not in result.stderr


def test_the_watch_filter_drops_ignored_and_excluded_paths_and_passes_ignore_files(tmp_path):
    from localgpt_index.watch.changes import ChangeFilter

    docs = tmp_path / "docs"
    tree(docs, ["a.png", "b.jpg", "drafts/c.png", "sub/keep.jpg"])
    (docs / ".lgptignore").write_text("*.jpg\ndrafts/\n")
    (docs / "sub" / ".lgptignore").write_text("!keep.jpg\n")
    relevant = ChangeFilter(docs, [], exclude=("*-draft.png",))
    picture(docs / "x-draft.png", 9)
    for path in ["b.jpg", "drafts", "drafts/c.png", "drafts/new/d.pdf", "x-draft.png", ".hidden/.lgptignore"]:
        assert not relevant(str(docs / path)), path
    for path in ["a.png", "sub/keep.jpg", ".lgptignore", "sub/.lgptignore", "gone"]:
        assert relevant(str(docs / path)), path
    (docs / ".lgptignore").write_text("drafts/\n")  # read again once changed
    assert relevant(str(docs / "b.jpg"))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_lgptignore_holds_across_watch(fake_model, tmp_path):
    """An ignored file's change triggers no build; a pattern added to .lgptignore removes what it ignores."""
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "b.png"])
    (docs / ".lgptignore").write_text("*.jpg\n")
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    watch = WatchProcess(".", "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--settle", "0.3", cwd=docs)
    try:
        events = watch.events
        events.next("build-ended")  # the catch-up build (it records the stat of files written just before)
        picture(docs / "ignored.jpg", 7)
        picture(docs / "sentinel.png", 8)
        started = events.next("build-started")
        assert started["paths"] == [str(docs / "sentinel.png")], started
        events.next("build-committed", lambda e: e["number"] == started["number"])
        (docs / ".lgptignore").write_text("*.jpg\nb.png\n")
        started = events.next("build-started")
        assert started["paths"] == [str(docs / ".lgptignore")], started
        committed = events.next("build-committed", lambda e: e["number"] == started["number"])
        assert committed["report"]["removed"] == 1, committed
        assert watch.stop() == 0
    finally:
        if watch.process.poll() is None:
            watch.process.kill()
    assert indexed(tmp_path / "idx", docs) == {"a.png", "sentinel.png"}


def test_a_line_that_is_no_pattern_is_listed_and_the_others_still_apply(fake_model, tmp_path):
    docs = tmp_path / "docs"
    tree(docs, ["a.png", "b.png"])
    (docs / ".lgptignore").write_text("b.png\n\\\n")
    _, report = build_json(docs, Path("idx"), "--model", str(fake_model))
    assert report["indexed"] == 1 and indexed(Path("idx"), docs) == {"a.png"}
    assert {"path": str(docs / ".lgptignore"), "reason": "line 2: not a valid pattern: '\\\\'"} in report["skipped_files"]
