"""Qdrant store integrity (issue 24): another tool's data is never touched, one writer commits,
file names that are not UTF-8 stay apart, damage is said at open, and the CLI's edges with Qdrant URLs.

Black-box where it can be: the CLI (run_cli), the Qdrant client on the same folder, and files on disk.
The two-writer tests run two writers in threads of this process on one in-process client (the
in-process mode admits one client per folder), interleaved by failpoint hooks and an injected clock.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from docgen import make_pdf, make_png
from helpers import build_ok, open_qdrant


def _collections(folder: Path) -> set[str]:
    client = open_qdrant(folder)
    try:
        return {c.name for c in client.get_collections().collections}
    finally:
        client.close()


def _small_docs(folder: Path) -> Path:
    make_pdf(folder / "a.pdf", ["alpha one", "alpha two"])
    make_png(folder / "b.png", "beta")
    return folder


def _foreign_collection(folder: Path, name: str, alias: str | None = None) -> None:
    """Another tool's collection (4 points), and optionally an alias of it."""
    from qdrant_client import models

    client = open_qdrant(folder)
    client.create_collection(name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    client.upsert(name, [models.PointStruct(id=i, vector=[1.0, i, 0.0, 1.0], payload={"theirs": i}) for i in range(4)])
    if alias:
        client.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=name, alias_name=alias))])
    client.close()


def _foreign_intact(folder: Path, name: str, alias: str | None = None) -> None:
    client = open_qdrant(folder)
    try:
        assert client.count(name, exact=True).count == 4
        assert sorted(p.payload["theirs"] for p in client.scroll(name, limit=10)[0]) == [0, 1, 2, 3]
        if alias:
            assert {a.alias_name: a.collection_name for a in client.get_aliases().aliases}[alias] == name
    finally:
        client.close()


# 1. another tool's Qdrant data


@pytest.mark.parametrize("command", ["build", "export"])
def test_an_alias_of_another_tools_collection_is_refused_and_kept(fake_model, tmp_path, command):
    qd = tmp_path / "qd"
    _foreign_collection(qd, "their_data", alias="docs")
    docs = _small_docs(tmp_path / "docs")
    url = f"qdrant+path://{qd}/docs"
    if command == "build":
        result = run_cli("build", str(docs), "--model", str(fake_model), "--store", url)
    else:
        local = ["--index-dir", str(tmp_path / "idx")]
        build_ok(str(docs), "--model", str(fake_model), *local)
        result = run_cli("export", url, "--format", "qdrant", *local)
    assert result.exit_code == 2, result.stderr
    assert "docs is an alias of their_data, which is not an lgpt-index index" in result.stderr
    assert "Traceback" not in result.stderr
    _foreign_intact(qd, "their_data", alias="docs")
    assert _collections(qd) == {"their_data"}  # no lease, no physical, no catalog of ours


def test_another_tools_plain_collection_is_refused_before_any_work(fake_model, tmp_path):
    qd = tmp_path / "qd"
    _foreign_collection(qd, "docs")
    docs = _small_docs(tmp_path / "docs")
    result = run_cli("build", str(docs), "--model", str(fake_model), "--store", f"qdrant+path://{qd}/docs")
    assert "pages embedded" not in result.stderr  # refused before the work, not after it
    assert result.exit_code == 2, result.stderr
    assert "docs is a collection, not an lgpt-index index" in result.stderr
    for command in ("status", "verify"):
        read = run_cli(command, "--store", f"qdrant+path://{qd}/docs")
        assert read.exit_code == 2 and "not an lgpt-index index" in read.stderr, (command, read.stderr)
    _foreign_intact(qd, "docs")
    assert _collections(qd) == {"docs"}  # no docs__lease


def test_a_stray_collection_named_like_ours_but_not_ours_is_kept(fake_model, tmp_path):
    """Recovery deletes a killed rebuild's collections, not another tool's that happens to match the pattern."""
    from qdrant_client import models

    qd = tmp_path / "qd"
    _foreign_collection(qd, "docs__0123456789")
    client = open_qdrant(qd)
    client.create_collection("docs__0123456789__catalog", vectors_config={})
    client.upsert("docs__0123456789__catalog", [models.PointStruct(id=1, vector={}, payload={"theirs": 1})])
    client.close()
    docs = _small_docs(tmp_path / "docs")
    build_ok(str(docs), "--model", str(fake_model), "--store", f"qdrant+path://{qd}/docs")
    _foreign_intact(qd, "docs__0123456789")
    assert "docs__0123456789__catalog" in _collections(qd)


# 3. file names that are not UTF-8


def _odd_names(folder: Path) -> tuple[str, str]:
    """A file named with the raw byte 0xE9 (2 pages) and one literally named with backslash, x, e, 9 (3 pages)."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = os.fsdecode(os.fsencode(str(folder)) + b"/caf\xe9.pdf")
    literal = str(folder / "caf\\xe9.pdf")
    make_pdf(Path(raw), ["raw byte name first page", "raw byte name second page"])
    make_pdf(Path(literal), ["literal backslash name one", "literal backslash name two", "literal backslash name three"])
    return raw, literal


def _hits(result) -> list[tuple[str, int]]:
    assert result.exit_code == 0, result.stderr
    return [(h["path"], h["page"]) for q in json.loads(result.stdout)["queries"] for h in q["results"]]


def test_paths_that_are_not_utf8_stay_apart(fake_model, tmp_path):
    docs = tmp_path / "docs"
    _odd_names(docs)
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    local = ["--index-dir", str(tmp_path / "idx")]
    for store in (["--store", url], local):
        build_ok(str(docs), "--model", str(fake_model), *store)
    verified = run_cli("verify", "--store", url)
    assert verified.exit_code == 0, verified.stderr
    queries = ["raw byte name", "literal backslash name three", "second page"]
    ours = _hits(run_cli("query", *queries, "-k", "5", "--json", "--store", url))
    theirs = _hits(run_cli("query", *queries, "-k", "5", "--json", *local))
    assert ours == theirs and len(ours) == 15
    pages = {}
    for path, page in ours:
        pages.setdefault(path, set()).add(page)
    assert sorted(len(p) for p in pages.values()) == [2, 3]  # no page 3 of the 2-page file
    status = json.loads(run_cli("status", "--json", "--store", url).stdout)
    assert status["documents"] == 2 and status["pages"] == 5


def _make_legacy(url: str) -> None:
    """Rewrite a collection as the code before path_raw left it: no path_raw or writer in points, no paths,
    writer or chunk_key in HEAD, catalog chunks under their old ids."""
    from qdrant_client import models

    from localgpt_index.index.qdrant.ids import HEAD_ID, chunk_id
    from localgpt_index.index.open import open_store

    store = open_store(url)
    physical = store.physical()
    catalog = store.catalog_of(physical)
    ids = [p.id for p in store.client.scroll(physical, limit=100)[0]]
    store.client.delete_payload(physical, keys=["path_raw", "writer"], points=ids)
    head = store.client.retrieve(catalog, [HEAD_ID])[0].payload
    for i in range(head["chunks"]):
        new = chunk_id(head["generation"], i, head["chunk_key"])
        [chunk] = store.client.retrieve(catalog, [new])
        store.client.upsert(catalog, [models.PointStruct(id=chunk_id(head["generation"], i), vector={}, payload=chunk.payload)])
        store.client.delete(catalog, points_selector=models.PointIdsList(points=[new]))
    store.client.delete_payload(catalog, keys=["paths", "writer", "chunk_key"], points=[HEAD_ID])
    store.close()


def test_an_index_from_before_path_raw_is_read_and_upgraded_by_the_next_build(fake_model, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    raw = os.fsdecode(os.fsencode(str(docs)) + b"/caf\xe9.pdf")
    make_pdf(Path(raw), ["raw byte name first page", "raw byte name second page"])
    make_png(docs / "plain.png", "a plain name")
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    before = _hits(run_cli("query", "raw byte name", "-k", "3", "--json", "--store", url))
    _make_legacy(url)
    assert run_cli("verify", "--store", url).exit_code == 0  # read the old way
    assert _hits(run_cli("query", "raw byte name", "-k", "3", "--json", "--store", url)) == before
    built = run_cli("build", str(docs), "--store", url, "--json")
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["pages_embedded"] == 0  # upgraded in place, nothing embedded again
    from localgpt_index.index.qdrant.ids import HEAD_ID
    from localgpt_index.index.open import open_store

    store = open_store(url)
    physical = store.physical()
    assert store.client.retrieve(store.catalog_of(physical), [HEAD_ID])[0].payload["paths"] == 2
    raw_points = [p for p in store.client.scroll(physical, limit=100)[0] if "path_raw" in p.payload]
    store.close()
    assert len(raw_points) == 2 and {p.payload["path_raw"] for p in raw_points} == {os.fsencode(raw).hex()}
    assert run_cli("verify", "--store", url).exit_code == 0
    assert _hits(run_cli("query", "raw byte name", "-k", "3", "--json", "--store", url)) == before


# 4. points deleted behind the index's back


def test_points_deleted_by_another_client_are_damage_at_open(fake_model, tmp_path):
    from qdrant_client import models

    from localgpt_index.index.open import open_store

    docs = _small_docs(tmp_path / "docs")
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    store = open_store(url)
    physical = store.physical()
    store.client.delete(physical, points_selector=models.FilterSelector(filter=models.Filter(must=[
        models.FieldCondition(key="path", match=models.MatchValue(value=str(docs / "a.pdf")))])))
    store.close()
    for command in (["status"], ["query", "alpha", "--model", str(fake_model)]):
        result = run_cli(*command, "--store", url)
        assert result.exit_code == 1, (command, result.stdout, result.stderr)
        assert "is damaged: the catalog names 3 pages" in result.stderr and "holds 1 of them" in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("deleted", ["all", "a.pdf"])
def test_points_deleted_while_an_index_is_open_are_damage_at_the_next_query(fake_model, tmp_path, deleted):
    """Issue 39: an index held open (the Python API; serve holds one for hours) whose points another client
    deletes says it is damaged at its next query, as a fresh open does, instead of answering short or empty.
    (The in-process mode admits one client per folder: the view's own client stands in for the other one.)"""
    from qdrant_client import models

    from localgpt_index import open_index
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.open import open_store

    docs = _small_docs(tmp_path / "docs")
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    index = open_index(store=open_store(url))
    try:
        store, counts = index.view.store, []
        count = store.client.count
        store.client.count = lambda *args, **kwargs: counts.append(args) or count(*args, **kwargs)
        assert len(index.search("alpha", k=2)[0]) == 2
        assert len(index.search("alpha", k=10, mode="visual")[0]) == 3  # short of k, as many as the catalog has
        assert len(index.search("alpha", k=2, filters={"team": "none"}, mode="visual")[0]) == 0  # nothing to find
        assert counts == []  # an answer as full as the catalog allows costs no count
        condition = [] if deleted == "all" else [models.FieldCondition(key="path", match=models.MatchValue(value=str(docs / deleted)))]
        store.client.delete(store.physical(), points_selector=models.FilterSelector(filter=models.Filter(must=condition)))
        for k in (1, 3):
            with pytest.raises(IndexProblem, match=r"is damaged: the catalog names 3 pages, the collection \S+ holds "
                                                   f"{0 if deleted == 'all' else 1} of them"):
                index.search("alpha", k=k)
    finally:
        index.view.store.close()


# 5. the CLI's edges with Qdrant URLs


@pytest.mark.parametrize("command", [["status"], ["query", "q"], ["verify"]])
def test_a_mistyped_qdrant_path_creates_nothing(tmp_path, command):
    missing = tmp_path / "no-such-folder"
    result = run_cli(*command, "--store", f"qdrant+path://{missing}/docs")
    assert not missing.exists()
    assert result.exit_code == 1, result.stderr
    assert f"{missing} does not exist (nothing was created)" in result.stderr


def test_a_local_build_skips_a_qdrant_store_and_its_pdf_store(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    make_png(docs / "scan.png", "a scan")
    store = ["--store", f"qdrant+path://{docs / 'qd'}/notes", "--pdf-store", str(docs / "pdfs")]
    build_ok(str(docs), "--model", str(fake_model), *store)
    assert list((docs / "pdfs" / "pdf").glob("*.pdf"))  # a stored PDF lies in the folder now
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(run_cli("status", "--json", "--index-dir", str(tmp_path / "idx")).stdout)
    assert status["documents"] == 2  # the note and the scan, not the stored PDF
    report = json.loads(result.stdout)
    assert {Path(s["path"]).name for s in report["skipped_files"] if s["reason"] == "the index folder"} == {"qd", "pdfs"}


def test_a_refused_qdrant_export_is_a_usage_error_like_byaldis(tmp_path):
    from conftest import faulty_model

    docs = _small_docs(tmp_path / "docs")
    local = ["--index-dir", str(tmp_path / "idx")]
    model = faulty_model(tmp_path / "colpali-fake")  # byaldi exports only a model named so
    build_ok(str(docs), "--model", str(model), *local)
    url = f"qdrant+path://{tmp_path / 'qd'}/copy"
    assert run_cli("export", url, "--format", "qdrant", *local).exit_code == 0
    again = run_cli("export", url, "--format", "qdrant", *local)
    assert again.exit_code == 2 and "already holds an index of 2 documents" in again.stderr
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    assert run_cli("export", str(tmp_path / "out"), *local).exit_code == again.exit_code  # byaldi's refusal


@pytest.mark.parametrize("url", ["qdrant://:1/x", "qdrant://localhost:99999/x", "qdrant://localhost:0/x",
                                 "qdrants://host:port/x"])
def test_a_bad_host_or_port_is_a_usage_error(url):
    result = run_cli("status", "--store", url)
    assert result.exit_code == 2, result.stderr
    assert "is not HOST:PORT" in result.stderr and "Traceback" not in result.stderr


# 2. two writers on one collection


class _Clock:
    """The wall clock both writers read lease expiries against; the test moves it."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class _Steps:
    """A failpoint hook: the threads named in `holds` stop at their failpoint until released;
    every (thread, failpoint) reached is recorded as an event."""

    def __init__(self, holds: set[tuple[str, str]]) -> None:
        self.holds = holds
        self.reached = {h: threading.Event() for h in holds}
        self.release = {h: threading.Event() for h in holds}
        self.seen: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, thread: str, name: str) -> threading.Event:
        with self._lock:
            return self.seen.setdefault((thread, name), threading.Event())

    def __call__(self, name: str) -> None:
        key = (threading.current_thread().name, name)
        self.event(*key).set()
        if key in self.reached and not self.reached[key].is_set():
            self.reached[key].set()
            assert self.release[key].wait(60), f"{key} was never released"

    def wait_reached(self, thread: str) -> None:
        for key, reached in self.reached.items():
            if key[0].startswith(thread):
                assert reached.wait(60), f"{key} never reached"

    def free(self, thread: str) -> None:
        for key, release in self.release.items():
            if key[0].startswith(thread):
                release.set()


def _writer(store, name: str, outcome: dict, rebuild: bool = False) -> None:
    """Add one 2-page document `name` in one transaction; record the manifest or the error."""
    from localgpt_index.core.errors import LgptError
    from localgpt_index.index.format.manifest import Document, Span
    from localgpt_index.interop.transfer import write_documents

    try:
        with store.begin(rebuild=rebuild) as txn:
            base = txn.base
            dim = base.model.dim or base.settings.dim
            rng = np.random.default_rng(len(name))
            pages = [rng.standard_normal((3, dim)).astype(np.float32) for _ in range(2)]
            doc = Document(path=f"/writers/{name}.pdf", sha256=f"{len(name):064x}", size=1, kind="pdf", pages=2,
                           spans=[Span(segment="seg-placeholder", first=0, pages=2)])
            [placed] = write_documents(txn, [(doc, pages)], dim)
            outcome["manifest"] = txn.commit([*base.documents, placed], base.model, base.settings)
    except LgptError as exc:
        outcome["error"] = exc


def _renewed_past(renewed: threading.Event, store, clock: _Clock) -> None:
    """Wait until the lease's timer has renewed it past the moved clock."""
    from localgpt_index.index.qdrant.ids import LEASE_MARGIN_S

    while store.lease.expires - LEASE_MARGIN_S <= clock():
        renewed.clear()
        if store.lease.expires - LEASE_MARGIN_S > clock():
            break
        assert renewed.wait(30), "the lease was not renewed"


STEPS = {"take": {("A", "lease-take")}, "renew": {("A", "upsert"), ("A-lease", "lease-renew")},
         "upsert": {("A", "upsert")}, "switch": {("A", "before-switch")}, "head": {("A", "before-head")},
         "alias": {("A", "after-head")}}  # A rebuilds: its new collection is complete, the alias not yet switched


@pytest.fixture(scope="module")
def base_collection(fake_model, tmp_path_factory):
    work = tmp_path_factory.mktemp("writers")
    docs = _small_docs(work / "docs")
    build_ok(str(docs), "--model", str(fake_model), "--store", f"qdrant+path://{work / 'qd'}/docs")
    return work / "qd"


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("stalled", [False, True], ids=["live", "stalled"])
@pytest.mark.parametrize("step", list(STEPS))
def test_two_writers_interleaved_exactly_one_commits(base_collection, tmp_path, step, stalled):
    """A stops at `step` (and, `stalled`, its lease timer stops too, as when the process is frozen);
    the clock moves past the lease's life; B runs up to just before its HEAD; then A goes on, then B.
    Live, A's timer keeps the lease and B is refused; stalled, B takes it over and A stops at its next
    step. Either way exactly one commits, the other says why, and nothing of the winner or of the
    earlier generations is lost."""
    import shutil

    from localgpt_index.core import failpoints
    from localgpt_index.index.qdrant.ids import LEASE_TTL_S, parse_store_url
    from localgpt_index.index.qdrant.store import QdrantStore

    shutil.copytree(base_collection, tmp_path / "qd")
    spec = parse_store_url(f"qdrant+path://{tmp_path / 'qd'}/docs")
    clock = _Clock()
    a = QdrantStore(spec, clock=clock, renew_every_s=0.02)
    b = QdrantStore(spec, client=a.client, clock=clock, renew_every_s=0.02)
    frozen = {("A-lease", "lease-renew")} if stalled and step != "take" else set()  # at "take" A has no timer yet
    holds = set(STEPS[step]) | frozen | {("B", "before-head")}
    steps = _Steps(holds)
    failpoints.set_hook(steps)
    outcomes: dict[str, dict] = {"A": {}, "B": {}}
    try:
        first = threading.Thread(target=_writer, args=(a, "A", outcomes["A"], step == "alias"), name="A")
        first.start()
        steps.wait_reached("A")
        if step != "renew" or stalled:
            clock.now += 2 * LEASE_TTL_S  # past the lease's life, unless renewed
        if not stalled and step not in ("take", "renew"):
            _renewed_past(steps.event("A-lease", "lease-renewed"), a, clock)  # though A has not written since
        second = threading.Thread(target=_writer, args=(b, "B", outcomes["B"]), name="B")
        second.start()
        while second.is_alive() and not steps.reached[("B", "before-head")].wait(0.05):
            pass
        steps.free("A")
        first.join(60)
        steps.free("B")
        second.join(60)
    finally:
        steps.free("A")
        steps.free("B")
        failpoints.set_hook(None)
    winner = "B" if step == "take" or stalled else "A"
    loser = "A" if winner == "B" else "B"
    assert "manifest" in outcomes[winner], outcomes[winner].get("error") and outcomes[winner]["error"].message
    assert "manifest" not in outcomes[loser]
    message = outcomes[loser]["error"].message
    assert "is being written by pid" in message or "this writer stopped" in message, message

    index = a.open_view()  # the point count against the catalog passes: nothing lost, nothing extra
    assert sorted(Path(d.path).name for d in index.manifest.documents) == sorted(["a.pdf", "b.png", f"{winner}.pdf"])
    assert a.verify() == []
    assert a.client.count(a.physical(), exact=True).count == index.manifest.page_count  # none of the loser's points left
    names = {c.name for c in a.client.get_collections().collections}
    assert sorted(n for n in names if n.startswith("docs__") and not n.endswith("__lease")) == \
        sorted([a.physical(), a.catalog_of(a.physical())])  # nor a collection of the loser's
    a.close()


@pytest.mark.parametrize("version, refused", [("1.15.5", True), ("1.9.0", True), ("", True), ("1.16.0", False),
                                              ("1.20.1-dev", False), ("2.0.0", False)])
def test_writers_need_a_server_with_conditional_updates(version, refused):
    from localgpt_index.core.errors import EnvironmentMissing
    from localgpt_index.index.qdrant.ids import check_server_version

    if refused:
        with pytest.raises(EnvironmentMissing, match="needs 1.16 or later"):
            check_server_version(version, "qdrant://host:6333/docs")
    else:
        check_server_version(version, "qdrant://host:6333/docs")
