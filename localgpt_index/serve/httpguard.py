"""The HTTP layer's policies, shared by `serve` and any later HTTP front (the MCP server).

What a request may carry, how long a connection may take, who may ask, and what an answer or an
error may reveal.

Everything here is plain functions and small classes with no FastAPI in them, so that
another server can apply the same rules.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import os
import re
from dataclasses import dataclass

from ..core.errors import UsageError


# connections: header and body deadlines, a cap that still lets a loopback /healthz through

@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send a request, and how many connections are served at once."""

    header_timeout: float = 10.0  # from the connection (or its first byte after a response) to the end of the headers
    body_timeout: float = 30.0  # from the end of the headers to the end of the body
    max_connections: int = 256

    def __post_init__(self) -> None:
        if not (self.header_timeout > 0 and self.body_timeout > 0 and self.max_connections >= 1):
            raise UsageError("--header-timeout and --body-timeout must be above 0, --max-connections at least 1.")


def default_max_connections(wanted: int = 256) -> int:
    """`wanted`, kept well under this process's file-descriptor limit: the connections served, as
    many again accepted at once and refused, a few past the cap for a loopback /healthz, and the
    descriptors of the index and the model must all fit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (soft - 96) // 2))


MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers: h11's bound (uvicorn's httptools protocol has none)


def error_body(status: int, message: str) -> bytes:
    """The one error document, {"error": {"status", "message"}}: the message never with a secret in it,
    in ASCII escapes (a lone surrogate too)."""
    return json.dumps({"error": {"status": status, "message": redact(message)}}, ensure_ascii=True).encode()


def raw_error_response(status: int, message: str, extra: bytes = b"") -> bytes:
    """A whole answer with the error document, written by the connection layer before any application
    runs (`extra`: more header lines); the connection closes after it."""
    from http import HTTPStatus

    body = error_body(status, message)
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n%scontent-length: %d\r\n\r\n%s"
            % (status, HTTPStatus(status).phrase.encode(), extra, len(body), body))


def over_capacity_response() -> bytes:
    return raw_error_response(503, "too many connections; try again", b"retry-after: 1\r\n")


def headers_too_large_response() -> bytes:
    return raw_error_response(431, f"request line and headers over {MAX_HEADER_BYTES // 1024} KiB; send less")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


# who may ask: loopback names without a token (DNS rebinding), no foreign browser origin, the token as bytes

LOOPBACK_NAMES = ("localhost", "localhost.")


@functools.lru_cache(maxsize=64)  # a client sends the same Host with every request; parsing it was most of the guard's time
def loopback_host(host: str) -> bool:
    """Whether a Host header (a name or an address, with or without its port) names this machine's loopback."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else ""
    else:
        name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
        if port and not port.isdigit():
            return False
    return name in LOOPBACK_NAMES or is_loopback(name)


def host_refusal(host: str | None, origin: str | None, token: str | None) -> str | None:
    """Why a request is refused for where it claims to come from, or None. Without a token only a
    loopback Host is answered (a web page that rebinds its own name to 127.0.0.1 sends its name);
    an Origin header that is not loopback is refused always (no page elsewhere is meant to call this)."""
    from urllib.parse import urlsplit

    if origin is not None:
        try:
            origin_host = urlsplit(origin).hostname or ""
        except ValueError:
            origin_host = ""
        if not loopback_host(f"[{origin_host}]" if ":" in origin_host else origin_host):
            return f"Origin {printable(origin)[:200]} is not this machine: requests from other web pages are refused."
    if token is None and host is not None and not loopback_host(host):
        return (f"Host {printable(host)[:200]} is not a loopback name: without --token only localhost, 127.0.0.1 "
                "and [::1] are answered (a guard against DNS rebinding).")
    return None


def token_matches(header: bytes, token: str) -> bool:
    """`Authorization: Bearer TOKEN`, compared as UTF-8 bytes in constant time (a token that is not
    ASCII matches what a client sends as UTF-8)."""
    scheme, _, given = header.strip().partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token.encode("utf-8", "surrogateescape"))


# what an answer, an error or a log line may carry

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_SECRET_PARAM = re.compile(r"(?i)\b(api[_-]?key|token|password|secret)=([^&\s]+)")


def redact(text: str) -> str:
    """`text` without secrets: the user:password@ of URLs and api_key=... parameters become ***."""
    text = _USERINFO.sub(r"\1***@", text)
    return _SECRET_PARAM.sub(r"\1=***", text)


def printable(text: str) -> str:
    """`text` fit for one log line: control characters (newlines, ESC) and lone surrogates as escapes."""
    return "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else c.encode("unicode_escape").decode("ascii")
                   for c in text)


class PathPolicy:
    """What answers and errors say about where things are (one decision for every HTTP front).

    By default documents are named relative to the folder they were indexed from (the deepest
    folder holding them all), the index by its name and the model by its folder's name: a client
    learns nothing of this machine's layout. `absolute` (serve --absolute-paths) keeps the paths
    as the CLI prints them. Secrets (a URL's user:password@, api_key=...) are never echoed."""

    def __init__(self, absolute: bool = False) -> None:
        self.absolute = absolute
        self._known: dict[str, str] = {}  # absolute prefix -> what a client sees instead
        self._roots: frozenset[str] = frozenset()  # the keys of _known that are documents roots
        self._rules: tuple[re.Pattern[str] | None, dict[str, str]] = (None, {})  # all of _known in one pattern, longest first
        self._current: _Generation | None = None  # one generation is asked at a time, mostly

    def _generation(self, index) -> _Generation:
        """What this policy knows of `index`'s generation, worked out (and remembered) once per generation."""
        current = self._current
        if current is not None and current.generation == index.manifest.generation:
            return current
        paths = [d.path for d in index.manifest.documents] + [f.path for f in index.manifest.failures]
        folders = [os.path.dirname(p) for p in paths if os.path.isabs(p)]
        try:
            root = os.path.commonpath(folders) if folders else None
        except ValueError:  # paths on different drives
            root = None
        self._remember(index, root)
        self._current = current = _Generation(index.manifest.generation, root)  # replaced whole: other threads publish too
        return current

    def root(self, index) -> str | None:
        """The folder the documents of this generation were indexed from."""
        return self._generation(index).root

    def learn(self, index) -> None:
        """Know this generation's folders, so that messages about it leave them out."""
        self._generation(index)

    def publish(self, document: dict, index) -> dict:
        """`document` (a query, status or documents answer of `index`) as a client may see it."""
        if self.absolute:
            return {**document, "index": redact(document["index"])} if "index" in document else document
        generation = self._generation(index)
        document = _copied(document)  # the CLI's builders are shared
        document["index"] = generation.index_name(document.get("index", ""))
        if isinstance(document.get("model"), str):
            document["model"] = _last_part(document["model"])
        elif isinstance(document.get("model"), dict):
            document["model"] = {**document["model"], "id": _last_part(document["model"]["id"])}
            if document["model"].get("path"):
                document["model"]["path"] = _last_part(document["model"]["path"])
        groups = [document.get(key) for key in ("documents", "failures")]
        groups += [answer["results"] for answer in document.get("queries") or []]
        for group in (g for g in groups if isinstance(g, list)):  # status has a count of documents
            for entry in group:
                entry["path"] = generation.relative(entry["path"])
                if "copies" in entry:
                    entry["copies"] = [generation.relative(path) for path in entry["copies"]]
        return document

    def relative(self, path: str, root: str | None) -> str:
        return _relative(path, root)

    def prefix(self, prefix: str, index) -> str:
        """A /documents prefix as the index stores paths. In the default naming a prefix names documents
        as answers do, relative to the root (it joins it); an absolute one is refused, whatever it names:
        how many documents it matched would tell the root, a character at a time."""
        if self.absolute or not prefix:
            return prefix
        if os.path.isabs(prefix):
            raise UsageError("prefix: an absolute path; documents are named relative to the folder they were indexed "
                             "from (reports/q3.pdf): give a prefix of such a name (absolute paths are answered only "
                             "with --absolute-paths).")
        root = self.root(index)
        return os.path.join(root, prefix) if root is not None else prefix

    @staticmethod
    def index_name(location: str) -> str:
        return _last_part(redact(location).rstrip("/"))

    def message(self, text: str) -> str:
        """An error message without secrets, and in the default policy without this machine's paths."""
        text = redact(text)
        if self.absolute:
            return text
        pattern, known = self._rules  # one pass (a replacement is never rewritten); read once: other threads learn too
        if pattern is None:
            return text
        return pattern.sub(lambda match: known[match.group()], text)

    def _remember(self, index, root: str | None) -> None:
        """Add `index`'s paths to what messages leave out. A newer root above an older one wins
        (older /data/docs/reports/, current /data/docs/: a message names reports/a.pdf, as answers do);
        roots match only where a path starts, so a root of / does not eat every slash."""
        known, roots = dict(self._known), set(self._roots)
        location = index.store.location
        known[location] = self.index_name(location)
        model = index.manifest.model
        for path in (model.path, model.id):
            if path and os.path.isabs(path):
                known[path] = _last_part(path)
        if root:
            key = root.rstrip(os.sep) + os.sep
            for older in [r for r in roots if r != key and r.startswith(key)]:
                roots.discard(older)
                known.pop(older, None)
            roots.add(key)
            known[key] = ""
        self._install(known, roots)

    def learn_location(self, location: str) -> None:
        """Messages name the index at `location` by its name even before there is an index to learn (mcp
        starts without one: "no index at default")."""
        self._install({**self._known, location: self.index_name(location)}, set(self._roots))

    def _install(self, known: dict[str, str], roots: set[str]) -> None:
        """`known` as one pattern, longest first, swapped in whole (other threads read it)."""
        parts = [(r"(?<![\w.~-])" if key in roots else "") + re.escape(key) for key in sorted(known, key=len, reverse=True)]
        pattern = re.compile("|".join(parts)) if parts else None
        self._known, self._roots, self._rules = known, frozenset(roots), (pattern, known)


class _Generation:
    """One generation's root, and the paths of its documents as published (each worked out once:
    os.path.relpath was most of publishing a query answer)."""

    def __init__(self, generation: int, root: str | None) -> None:
        self.generation, self.root = generation, root
        self._published: dict[str, str] = {}  # bounded by the generation's documents
        self._names: dict[str, str] = {}  # its location (one, mostly) -> the index's name

    def index_name(self, location: str) -> str:
        name = self._names.get(location)
        if name is None:
            name = self._names[location] = PathPolicy.index_name(location)
        return name

    def relative(self, path: str) -> str:
        published = self._published.get(path)
        if published is None:
            published = self._published[path] = _relative(path, self.root)
        return published


def _relative(path: str, root: str | None) -> str:
    if root and os.path.isabs(path) and (path + os.sep).startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, root)
    return _last_part(path) if os.path.isabs(path) else path


def _copied(document: dict) -> dict:
    """A copy of every part of `document` that publish changes (a JSON round trip copied it all,
    a measurable part of each /query answer)."""
    copy = dict(document)
    for key in ("documents", "failures"):
        if isinstance(copy.get(key), list):
            copy[key] = [dict(entry) for entry in copy[key]]
    if isinstance(copy.get("queries"), list):
        copy["queries"] = [{**answer, "results": [dict(entry) for entry in answer["results"]]} for answer in copy["queries"]]
    return copy


def _last_part(path: str) -> str:
    return path.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] if path else path
