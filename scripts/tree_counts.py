"""Counts of the code's shape (issue 40): names defined twice, aliases, small modules, view sniffing.

    python scripts/tree_counts.py [--json]

Each count is what a newcomer trips over reading the tree; the closing note of a restructure
prints them before and after.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "localgpt_index"
SNIFF = re.compile(r"\b(hasattr|getattr)\(\s*[\w.]*view\b")


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted(PACKAGE.rglob("*.py"))}


def _public_defs(tree: ast.Module) -> list[str]:
    """Public top-level functions and classes, less a plugin's hook implementations (`@hookimpl`:
    named after their hook, as pluggy requires)."""
    return [n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not n.name.startswith("_")
            and not any("hookimpl" in ast.unparse(d) for d in n.decorator_list)]


def _aliases(tree: ast.Module) -> list[str]:
    """Module-level `Name = OtherName` / `Name = module.Name` where the name is a class's (CamelCase)."""
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if isinstance(value, (ast.Name, ast.Attribute)) and targets and isinstance(targets[0], ast.Name):
            name = targets[0].id
            if name[:1].isupper() and not name.isupper():
                found.append(f"{name} = {ast.unparse(value)}")
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("localgpt_index")):
            found += [f"{a.name} as {a.asname}" for a in node.names
                      if a.asname and a.asname[:1].isupper() and a.asname != a.name and not a.asname.startswith("_")]
    return found


def counts() -> dict[str, object]:
    defined: dict[str, list[str]] = defaultdict(list)
    aliases: dict[str, list[str]] = {}
    small, facades, sniffs = [], [], []
    for name, path in modules().items():
        text = path.read_text()
        tree = ast.parse(text)
        if not name.startswith("localgpt_index.cli."):  # the command functions share their command's name
            for public in _public_defs(tree):
                defined[public].append(name)
        if found := _aliases(tree):
            aliases[name] = found
        lines = len(text.splitlines())
        if lines < 50 and path.name != "__init__.py":
            small.append(f"{name} ({lines})")
        doc = ast.get_docstring(tree) or ""
        if re.search(r"deprecated|re-export", doc, re.I):
            facades.append(name)
        sniffs += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if SNIFF.search(line)]
    twice = {k: v for k, v in sorted(defined.items()) if len(v) > 1}
    mypy_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    packages = sorted({p.parent.name for p in PACKAGE.glob("*/__init__.py")})
    return {
        "modules": len(modules()),
        "lines": sum(len(p.read_text().splitlines()) for p in modules().values()),
        "public names defined in 2+ modules": twice,
        "aliases": aliases,
        "facades (deprecated or re-exporting modules)": facades,
        "modules under 50 lines (not __init__)": small,
        "hasattr/getattr on a view": sniffs,
        "mypy": f"{len(mypy_files)} paths of {len(packages)} packages: {', '.join(mypy_files)}",
    }


def main() -> None:
    found = counts()
    if "--json" in sys.argv:
        print(json.dumps(found, indent=2))
        return
    for key, value in found.items():
        size = len(value) if isinstance(value, (dict, list)) else value
        print(f"{key}: {size}")
        if isinstance(value, dict):
            for k, v in value.items():
                print(f"    {k}: {', '.join(v)}")
        elif isinstance(value, list):
            for v in value:
                print(f"    {v}")


if __name__ == "__main__":
    main()
