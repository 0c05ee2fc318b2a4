"""Keep HTML inside the indexed folder before a converter sees it.

An HTML or Markdown file may name resources anywhere: `<img src="/etc/...">` would put
another file into the stored PDF and the embedding, `<img src="http://...">` would make
the build fetch it. Before conversion, every reference is resolved: a file inside the
indexed folder is rewritten to its absolute file: URI (the HTML is converted from a
staging folder); anything else (outside the folder, another scheme, a missing file, an
SVG, which can reference files of its own) is dropped and listed. Scripts, frames,
objects, `<base>` and refresh headers go; stylesheets inside the folder are inlined with
the same rules applied to their `url()`s and `@import`s.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

from pathlib import Path

# attributes whose value is a URL a renderer may fetch
URL_ATTRIBUTES = {"src", "href", "data", "background", "poster", "lowsrc", "dynsrc", "longdesc", "codebase", "archive",
                  "usemap", "action", "formaction", "cite", "xlink:href", "manifest", "icon", "profile"}
SRCSET_ATTRIBUTES = {"srcset", "imagesrcset"}
DROPPED_ELEMENTS = {"script", "iframe", "frame", "frameset", "object", "embed", "applet", "base", "noscript", "template", "svg", "math"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
SAFE_DATA = re.compile(r"^data:image/(png|jpeg|jpg|gif|webp|bmp);", re.I)
CSS_URL = re.compile(r"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)\s]*))\s*\)""", re.I)
CSS_IMPORT = re.compile(r"""@import\s+(?:url\([^)]*\)|"[^"]*"|'[^']*')[^;]*;?""", re.I)
MAX_STYLESHEET = 1 << 20


@dataclass
class Confined:
    html: str
    dropped: list[str] = field(default_factory=list)  # what was removed, and why


class _Rewriter(HTMLParser):
    def __init__(self, folder: str, root: str) -> None:
        super().__init__(convert_charrefs=False)
        self.folder, self.root = folder, os.path.realpath(root)
        self.out: list[str] = []
        self.dropped: list[str] = []
        self._skip_depth = 0  # inside a dropped element
        self._skip_tag: str | None = None
        self._in_style = False

    # references

    def resolve(self, url: str) -> str | None:
        """The file: URI for a reference to a file inside the folder, else None (and recorded)."""
        url = url.strip()
        if not url or url.startswith("#"):
            return url
        if SAFE_DATA.match(url):
            return url
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("", "file") or (parts.scheme and parts.netloc not in ("", "localhost")) or url.startswith("//"):
            self.dropped.append(f"{url[:200]} (not a file of the folder)")
            return None
        target = unquote(parts.path)
        path = os.path.normpath(os.path.join(self.folder, target)) if not os.path.isabs(target) else target
        real = os.path.realpath(path)
        if not real.startswith(self.root.rstrip(os.sep) + os.sep):
            self.dropped.append(f"{url[:200]} (outside the indexed folder)")
            return None
        if not os.path.isfile(real):
            self.dropped.append(f"{url[:200]} (no such file in the folder)")
            return None
        if real.lower().endswith((".svg", ".svgz")):
            self.dropped.append(f"{url[:200]} (SVG images may reference other files)")
            return None
        return Path(real).as_uri()

    def css(self, text: str) -> str:
        """CSS with its url()s confined and its @imports dropped."""
        for match in CSS_IMPORT.finditer(text):
            self.dropped.append(f"{match.group(0)[:200]} (stylesheet imports are not followed)")
        text = CSS_IMPORT.sub("", text)

        def replace(match: re.Match) -> str:
            url = next(g for g in match.groups() if g is not None)
            resolved = self.resolve(html.unescape(url))
            return f'url("{resolved}")' if resolved else "none"

        return CSS_URL.sub(replace, text)

    # parser events

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closed=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closed=True)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], closed: bool) -> None:
        if self._skip_depth:
            if tag == self._skip_tag and not closed and tag not in VOID:
                self._skip_depth += 1
            return
        if tag in DROPPED_ELEMENTS or (tag == "meta" and any(k == "http-equiv" and (v or "").lower() == "refresh" for k, v in attrs)):
            self.dropped.append(f"<{tag}> element")
            if not closed and tag not in VOID:
                self._skip_depth, self._skip_tag = 1, tag
            return
        if tag == "link":
            self._link(dict(attrs))
            return
        kept = self._attributes(tag, attrs)
        self.out.append(f"<{tag}{kept}{' /' if closed else ''}>")
        self._in_style = tag == "style" and not closed

    def _attributes(self, tag: str, attrs: list[tuple[str, str | None]]) -> str:
        kept = []
        for name, value in attrs:
            name = name.lower()
            if value is None:
                kept.append(f" {name}")
                continue
            if name.startswith("on"):
                continue  # event handlers: scripts
            if name == "style":
                value = self.css(value)
            elif name in SRCSET_ATTRIBUTES:
                value = self._srcset(value)
            elif name in URL_ATTRIBUTES and not (tag == "a" and name == "href"):
                value = self.resolve(value)
                if value is None:
                    continue
            kept.append(f' {name}="{html.escape(value, quote=True)}"')
        return "".join(kept)

    def _srcset(self, value: str) -> str:
        candidates = []
        for candidate in value.split(","):
            parts = candidate.split()
            if parts and (resolved := self.resolve(parts[0])):
                candidates.append(" ".join([resolved, *parts[1:]]))
        return ", ".join(candidates)

    def _link(self, attrs: dict[str, str | None]) -> None:
        """A stylesheet inside the folder is inlined (its own references confined); other links go."""
        rel = (attrs.get("rel") or "").lower()
        href = attrs.get("href") or ""
        if "stylesheet" not in rel:
            if href:
                self.dropped.append(f"<link rel={rel or '?'}> {href[:200]}")
            return
        uri = self.resolve(href)
        if uri is None:
            return
        path = unquote(urlsplit(uri).path)
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_STYLESHEET).decode("utf-8", "replace")
        except OSError as exc:
            self.dropped.append(f"{href[:200]} (cannot read: {exc.strerror or exc})")
            return
        self.out.append(f"<style>{self.css(text)}</style>")

    def handle_endtag(self, tag: str) -> None:
        if self._skip_depth:
            if tag == self._skip_tag:
                self._skip_depth -= 1
            return
        if tag == "style":
            self._in_style = False
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        self.out.append(self.css(data) if self._in_style else data)

    def handle_entityref(self, name: str) -> None:
        if not self._skip_depth:
            self.out.append(f"&{name};")

    def handle_charref(self, name: str) -> None:
        if not self._skip_depth:
            self.out.append(f"&#{name};")

    def handle_decl(self, decl: str) -> None:
        if decl.lower().startswith("doctype"):
            self.out.append(f"<!{decl}>")

    def handle_comment(self, data: str) -> None:
        pass  # conditional comments can carry markup and references

    def handle_pi(self, data: str) -> None:
        pass

    def unknown_decl(self, data: str) -> None:
        pass


def confine_html(text: str, folder: str | os.PathLike, root: str | os.PathLike) -> Confined:
    """`text` (HTML of a file in `folder`) with every reference confined to files inside `root`."""
    rewriter = _Rewriter(os.fspath(folder), os.fspath(root))
    rewriter.feed(text)
    rewriter.close()
    return Confined("".join(rewriter.out), list(dict.fromkeys(rewriter.dropped)))
