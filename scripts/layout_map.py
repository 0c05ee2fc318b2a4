"""The package map of docs/development.md: every package and module with its docstring's first line.

    python scripts/layout_map.py

docs/development.md prints it in a cog block (`cog -r docs/development.md`); tests/test_readme.py fails
when the page is out of date. Top-level packages go in the order of the import layers (LAYERS in
tests/test_layers.py, the one place they are written): imports go down the list.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "localgpt_index"
NAME_WIDTH = 28  # the column a summary starts at


def layer_ranks() -> dict[str, int]:
    """Each top-level name's rank in LAYERS (higher: imports the lower ones)."""
    tree = ast.parse((ROOT / "tests" / "test_layers.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "LAYERS":
            assert node.value is not None
            return {name: rank for name, (rank, _) in ast.literal_eval(node.value).items()}
    raise LookupError("tests/test_layers.py has no LAYERS")


def summary(path: Path) -> str:
    """The first line of a module's docstring."""
    return (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n", 1)[0]


def _line(depth: int, name: str, text: str) -> str:
    return f"{'  ' * depth}{name}".ljust(NAME_WIDTH - 1) + f" {text}".rstrip()


def _entries(folder: Path, depth: int, order=lambda path: path.name) -> list[str]:
    """A package's modules, then its subpackages, each followed by its own entries."""
    children = sorted((p for p in folder.iterdir() if p.suffix == ".py" and p.name != "__init__.py"
                       or (p / "__init__.py").exists()), key=order)
    lines = []
    for child in children:
        if child.suffix == ".py":
            lines.append(_line(depth, child.stem, summary(child)))
        else:
            lines += [_line(depth, f"{child.name}/", summary(child / "__init__.py")), *_entries(child, depth + 1)]
    return lines


def layout_map() -> str:
    ranks = layer_ranks()
    top = _entries(PACKAGE, 1, order=lambda path: (-ranks[path.name.removesuffix(".py")], path.suffix != ".py", path.name))
    return "\n".join([_line(0, f"{PACKAGE.name}/", summary(PACKAGE / "__init__.py")), *top]) + "\n"


if __name__ == "__main__":
    print(layout_map(), end="")
