"""The planner as a pure function: every rule about what a build does to the catalog, in milliseconds."""

from __future__ import annotations

from localgpt_index.ingest.discover import Discovery, FoundFile
from localgpt_index.index.format.manifest import Document, FileStat, Manifest, ModelInfo, Settings, Span
from localgpt_index.indexing.plan import files_to_hash, plan_build, trusted_stat

ROOT = "/docs"
OLD_NS = 1_600_000_000 * 10**9
NOW_NS = 1_700_000_000 * 10**9
SEGMENT = "seg-" + "a" * 40


def stat(size=100, mtime_ns=OLD_NS, ino=1):
    return FileStat(size=size, mtime_ns=mtime_ns, ino=ino, ctime_ns=mtime_ns)


def found(*files: FoundFile, listed=None, unreadable=(), excluded=()) -> Discovery:
    folders = {f.path.rsplit("/", 1)[0] for f in files} | {ROOT}
    return Discovery(ROOT, list(files), [], frozenset(listed if listed is not None else folders), list(unreadable), tuple(excluded))


def file(name: str, **kw) -> FoundFile:
    return FoundFile(f"{ROOT}/{name}", "pdf", stat(**kw))


def doc(path: str, sha: str, pages=1, first=0, st=None, metadata=None) -> Document:
    return Document(path=path, sha256=sha * 64 if len(sha) == 1 else sha, size=100, stat=st if st is not None else stat(),
                    kind="pdf", pages=pages, spans=[Span(segment=SEGMENT, first=first, pages=pages)], metadata=metadata or {})


def manifest(*docs: Document, in_progress=()) -> Manifest:
    from localgpt_index.index.format.manifest import Checksum, Segment

    pages = 100
    segment = Segment(id=SEGMENT, pages=pages, rows=pages, dim=4, vectors_bytes=pages * 4 * 2 + 128, vectors_sha256="0" * 64,
                      offsets_sha256="0" * 64, checksum=Checksum(algorithm="xxh3_64", blocks=["0" * 16]))
    return Manifest(generation=1, model=ModelInfo(id="m", family="fake", fingerprint="f"), settings=Settings(),
                    segments={SEGMENT: segment}, documents=list(docs), in_progress=list(in_progress))


def test_unchanged_stat_is_not_hashed_and_changed_stat_is():
    base = manifest(doc(f"{ROOT}/a.pdf", "a"), doc(f"{ROOT}/b.pdf", "b"), doc(f"{ROOT}/c.pdf", "c"))
    base = base.model_copy(update={"documents": [*base.documents[:2], base.documents[2].model_copy(update={"stat": None})]})
    scan = found(file("a.pdf"), file("b.pdf", mtime_ns=OLD_NS + 5), file("c.pdf"), file("new.pdf"))
    assert [f.path for f in files_to_hash(scan, base)] == [f"{ROOT}/b.pdf", f"{ROOT}/c.pdf", f"{ROOT}/new.pdf"]
    assert len(files_to_hash(scan, base, rehash=True)) == 4


def test_touched_but_unchanged_is_kept_with_its_new_stat():
    base = manifest(doc(f"{ROOT}/a.pdf", "a"))
    touched = file("a.pdf", mtime_ns=OLD_NS + 7)
    plan = plan_build(found(touched), {touched.path: "a" * 64}, base, scan_started_ns=NOW_NS)
    assert plan.unchanged == 1 and plan.restatted == 1 and not plan.embed
    assert plan.keep[0].stat == touched.stat and plan.changes_catalog


def test_a_racily_recent_stat_is_not_trusted():
    assert trusted_stat(stat(mtime_ns=NOW_NS - 1), NOW_NS) is None
    assert trusted_stat(stat(mtime_ns=OLD_NS), NOW_NS) == stat(mtime_ns=OLD_NS)


def test_changed_file_is_embedded_and_replaces_its_old_entry():
    old = doc(f"{ROOT}/a.pdf", "a")
    changed = file("a.pdf", size=200)
    plan = plan_build(found(changed), {changed.path: "b" * 64}, manifest(old))
    assert [e.file.path for e in plan.embed] == [changed.path]
    assert plan.embed[0].replaces == old and not plan.removed


def test_rename_reuses_vectors_and_removes_the_old_path():
    old = doc(f"{ROOT}/a.pdf", "a", pages=3)
    renamed = file("renamed.pdf")
    plan = plan_build(found(renamed), {renamed.path: "a" * 64}, manifest(old))
    assert not plan.embed and plan.removed == [old]
    assert plan.reused[0].path == renamed.path and plan.reused[0].spans == old.spans


def test_identical_new_files_are_embedded_once():
    one, two, three = file("one.pdf"), file("two.pdf", ino=2), file("three.pdf", ino=3)
    plan = plan_build(found(one, three, two), {one.path: "c" * 64, two.path: "c" * 64, three.path: "d" * 64}, None)
    assert len(plan.embed) == 2
    twins = {e.file.path: [t.path for t, _, _ in e.twins] for e in plan.embed}
    assert twins[one.path] == [two.path] and twins[three.path] == []


def test_a_folder_that_could_not_be_listed_keeps_its_documents():
    kept = doc(f"{ROOT}/locked/a.pdf", "a")
    gone = doc(f"{ROOT}/open/b.pdf", "b")
    scan = found(listed={ROOT, f"{ROOT}/open"}, unreadable=[(f"{ROOT}/locked", "cannot list folder: Permission denied")])
    plan = plan_build(scan, {}, manifest(kept, gone))
    assert plan.keep == [kept] and plan.kept_unlisted == 1
    assert plan.removed == [gone]


def test_a_file_that_could_not_be_read_keeps_its_document():
    old = doc(f"{ROOT}/a.pdf", "a")
    unreadable = file("a.pdf", size=300)
    plan = plan_build(found(unreadable, unreadable=[(unreadable.path, "cannot read: Permission denied")]), {}, manifest(old))
    assert plan.keep == [old] and not plan.removed and not plan.embed


def test_documents_of_other_folders_and_outside_the_globs_are_kept():
    elsewhere = doc("/other/x.pdf", "e")
    filtered = doc(f"{ROOT}/notes.docx", "f")
    deleted = doc(f"{ROOT}/deleted.pdf", "d")
    plan = plan_build(found(listed={ROOT}), {}, manifest(elsewhere, filtered, deleted), include=("*.pdf",))
    assert plan.kept_elsewhere == 1 and plan.kept_filtered == 1
    assert plan.removed == [deleted]


def test_rebuild_embeds_everything_of_this_folder_and_keeps_other_folders():
    here = doc(f"{ROOT}/a.pdf", "a")
    elsewhere = doc("/other/x.pdf", "e")
    scan = found(file("a.pdf"))
    plan = plan_build(scan, {f"{ROOT}/a.pdf": "a" * 64}, manifest(here, elsewhere), rebuild=True)
    assert [e.file.path for e in plan.embed] == [here.path] and plan.embed[0].replaces == here
    assert plan.keep == [elsewhere] and not plan.removed


def test_documents_inside_the_index_folder_are_removed():
    stored = doc(f"{ROOT}/idx/default/pdf/{'f' * 64}.pdf", "f")
    plan = plan_build(found(listed={ROOT}, excluded=(f"{ROOT}/idx",)), {}, manifest(stored))
    assert plan.removed == [stored]


def test_a_long_document_in_progress_resumes_only_with_the_same_bytes():
    partial = doc(f"{ROOT}/long.pdf", "a", pages=40)
    same, other = file("long.pdf"), file("long.pdf", size=999)
    resumed = plan_build(found(same), {same.path: "a" * 64}, manifest(in_progress=[partial]))
    assert resumed.embed[0].resume == partial
    restarted = plan_build(found(other), {other.path: "b" * 64}, manifest(in_progress=[partial]))
    assert restarted.embed[0].resume is None


def test_metadata_rules_retag_without_embedding():
    old = doc(f"{ROOT}/reports/q3.pdf", "a", metadata={"team": "sales"})
    scan = found(file("reports/q3.pdf"))
    plan = plan_build(scan, {}, manifest(old), rules=[("reports/*", {"team": "finance"})])
    assert plan.retagged == 1 and not plan.embed and plan.keep[0].metadata == {"team": "finance"}
    same = plan_build(scan, {}, manifest(old))  # no rules given: metadata stays
    assert same.retagged == 0 and not same.changes_catalog
