"""The import-layer contract: no import cycle among the library's modules, and every import goes
down the layers, never up and never sideways between peers.

Every import counts: module-level ones, those inside functions, those under TYPE_CHECKING,
relative and absolute, `from . import x` resolved through package `__init__` files, and the
root package's lazy re-exports (its `_EXPORTS` table). The layers, top to bottom:

    top      the root package (the public API), __main__, cli/
    outer    mcp/ | integrations/                    (peers: the MCP server; framework retrievers)
    serve    serve/ (the HTTP server, the warm service, the client of `query --server`)
    loops    watch/ | evaluate/                      (peers: a folder kept indexed; `eval`)
    app      indexing/ | query/ | interop/ | doctor   (peers)
    domain   ingest/ | models/ | index/              (peers)
    core     core/, _version

`testing/` (test checkpoints, the fake family) may import anything; production code never
imports it. A new top-level module must be placed in LAYERS before the test passes.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import parsed

PACKAGE = Path(__file__).resolve().parent.parent / "localgpt_index"
ROOT = "localgpt_index"

# first component under the root -> (rank, group); higher ranks may import lower ones only
LAYERS: dict[str, tuple[int, str]] = {
    "": (8, "top"), "__main__": (8, "top"), "cli": (8, "top"),
    "mcp": (7, "mcp"), "integrations": (7, "integrations"),  # MCP server; LangChain/LlamaIndex retrievers
    "serve": (6, "serve"),  # above interop and watch: the server answers with interop's documents
    "watch": (5, "watch"), "evaluate": (5, "evaluate"),  # a folder kept indexed; `eval`
    "indexing": (4, "indexing"), "query": (4, "query"), "interop": (4, "interop"), "doctor": (4, "doctor"),
    "ingest": (3, "ingest"), "models": (3, "models"), "index": (3, "index"),
    "core": (1, "core"), "_version": (1, "core"),
    "testing": (0, "testing"),
}

# Known violations still to be cut, as (importer, imported) edges; an entry that no longer
# exists fails the test too, so that the list only shrinks, and nothing new can join it.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Violation:
    importer: str
    imported: str
    reason: str

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}: {self.reason}"


def module_names(package: Path, root: str = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its __init__)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([root, *parts])] = path
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` means, or the module that holds it (a name inside a module); None outside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path], root: str = ROOT) -> set[str]:
    """The library modules `module` imports, anywhere in its source."""
    tree = parsed(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from a import b`: b is a submodule where one exists, else a name inside a
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem for a in node.names]
        elif module == root and isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            targets = [v.value for v in getattr(node.value, "values", []) if isinstance(v, ast.Constant)]
        for target in targets:
            if target == root or target.startswith(root + "."):
                resolved = _resolve(target, modules)
                if resolved and resolved != module:
                    found.add(resolved)
    return found


def import_graph(package: Path = PACKAGE, root: str = ROOT) -> dict[str, set[str]]:
    modules = module_names(package, root)
    return {name: imports_of(name, path, modules, root) for name, path in modules.items()}


def layer_of(module: str, root: str = ROOT) -> tuple[int, str]:
    first = module[len(root) + 1 :].split(".")[0] if module != root else ""
    if first not in LAYERS:
        raise AssertionError(f"{module} is in no layer: place it in tests/test_layers.py LAYERS")
    return LAYERS[first]


def layer_violations(graph: dict[str, set[str]], root: str = ROOT) -> list[Violation]:
    """Imports against the direction, between peers, of the root package, or of `testing`."""
    found = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        (rank_a, group_a), (rank_b, group_b) = layer_of(importer, root), layer_of(imported, root)
        if group_a == "testing":
            continue
        if group_b == "testing":
            found.append(Violation(importer, imported, "production code imports the testing package"))
        elif imported == root:
            found.append(Violation(importer, imported, "the root package is the top layer: import from where a name is defined"))
        elif rank_a < rank_b:
            found.append(Violation(importer, imported, f"upwards ({group_a} below {group_b})"))
        elif rank_a == rank_b and group_a != group_b:
            found.append(Violation(importer, imported, f"between peers ({group_a}, {group_b})"))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def contract_problems(graph: dict[str, set[str]], known: frozenset = KNOWN_VIOLATIONS, root: str = ROOT) -> list[str]:
    """Everything that breaks the contract, beyond the known violations (and known ones now gone)."""
    edges = {(a, b) for a, targets in graph.items() for b in targets}
    problems = [str(v) for v in layer_violations(graph, root) if (v.importer, v.imported) not in known]
    problems += [f"{a} -> {b}: listed in KNOWN_VIOLATIONS but no longer imported: remove it" for a, b in sorted(known - edges)]
    pruned = {a: {b for b in targets if (a, b) not in known} for a, targets in graph.items()}
    problems += ["import cycle: " + " <-> ".join(component) for component in cycles(pruned)]
    return problems


def test_the_library_keeps_its_layers_and_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 40 and any(graph.values()), "the walk found the library's modules and their imports"
    assert contract_problems(graph) == []


def _planted(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    copy = tmp_path / ROOT
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "schemas"))
    for rel, text in files.items():
        (copy / rel).write_text(text)
    return import_graph(copy)


def test_a_planted_upward_import_inside_a_function_fails_the_contract(tmp_path):
    graph = _planted(tmp_path, {"core/bad.py": "def f():\n    from ..indexing.run import BuildOptions\n    return BuildOptions\n"})
    assert "localgpt_index.core.bad -> localgpt_index.indexing.run: upwards (core below indexing)" in contract_problems(graph)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_planted_peer_import_under_type_checking_fails_the_contract(tmp_path):
    graph = _planted(tmp_path, {"index/bad.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..models import loading\n"})
    assert "localgpt_index.index.bad -> localgpt_index.models.loading: between peers (index, models)" in contract_problems(graph)


def test_planted_cycles_and_imports_of_the_root_or_testing_fail_the_contract(tmp_path):
    graph = _planted(tmp_path, {
        "core/one.py": "from . import two\n",
        "core/two.py": "import localgpt_index.core.one\n",
        "core/version_user.py": "from .. import __version__\n",
        "ingest/uses_fake.py": "def f():\n    from localgpt_index.testing.fake import FakeEncoder\n",
    })
    problems = contract_problems(graph)
    assert "import cycle: localgpt_index.core.one <-> localgpt_index.core.two" in problems
    assert any(p.startswith("localgpt_index.core.version_user -> localgpt_index: the root package") for p in problems)
    assert any(p.startswith("localgpt_index.ingest.uses_fake -> localgpt_index.testing.fake: production") for p in problems)


def test_a_known_violation_that_is_gone_must_leave_the_list():
    graph = {"localgpt_index.core.a": set(), "localgpt_index.core.b": set()}
    assert contract_problems(graph, frozenset({("localgpt_index.core.a", "localgpt_index.indexing.run")})) == [
        "localgpt_index.core.a -> localgpt_index.indexing.run: listed in KNOWN_VIOLATIONS but no longer imported: remove it"]


def test_no_production_module_names_the_fake_family():
    """The fake family is a plugin of the testing package: production code has no case for it."""
    named = [path.relative_to(PACKAGE.parent) for path in PACKAGE.rglob("*.py")
             if "testing" not in path.relative_to(PACKAGE).parts
             and any(word in path.read_text() for word in ('"fake"', "'fake'", "testing.fake", "FakeEncoder"))]
    assert named == []


def test_the_library_keeps_the_size_limits():
    """Every module of the library (generated schemas are JSON, not modules): the size guides of issue 40."""
    from helpers import size_problems

    package = Path(__file__).resolve().parent.parent / "localgpt_index"
    assert size_problems(sorted(package.rglob("*.py")), package) == []
