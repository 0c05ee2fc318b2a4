"""The docs hold together: the command reference (docs/cli.md) is the CLI's own --help, regenerated
by cog, so it cannot drift; every relative link in README.md and docs/ leads to a file (and heading)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CLI_REFERENCE = ROOT / "docs" / "cli.md"

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def test_command_reference_matches_help():
    from cogapp import Cog

    status = Cog().main(["cog", "--check", str(CLI_REFERENCE)])
    assert status == 0, "docs/cli.md is out of date: run `cog -r docs/cli.md`"


def test_every_command_is_in_the_reference():
    from localgpt_index.cli import main

    text = CLI_REFERENCE.read_text()
    assert main.commands
    for name in main.commands:
        assert f"### lgpt-index {name}\n" in text, name


def _prose(text: str) -> str:
    """The text outside code: links and headings in code blocks are not links or headings."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in a page (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def documentation_pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    pages = documentation_pages()
    assert CLI_REFERENCE in pages
    assert [b for page in pages for b in broken_links(page)] == []


def test_the_readme_links_every_docs_page():
    text = README.read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in text, page.name


def test_the_link_check_finds_broken_links(tmp_path):
    (tmp_path / "other.md").write_text("# A heading: `with code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-heading-with-code) [web](https://example.com/x.md)\n"
        "`[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n```\n"
        "[gone](missing.md) [no anchor](other.md#nothing) [here](#nor-here)\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nothing (no such heading)",
        "page.md: #nor-here (no such heading)",
    ]


def test_the_readme_is_a_front_door():
    assert len(README.read_text().splitlines()) < 400
