"""A client of `lgpt-index serve` (`query --server URL`): the same documents, over HTTP (httpx).

What the server answers is checked before use (interop.results.QueryDocument, strictly; a PNG
for a page): a server is a peer, and its answer names files that `--export-pages` writes."""

from __future__ import annotations

from pydantic import ValidationError

from ..core.errors import EnvironmentMissing, LgptError, UsageError
from ..interop.results import QueryDocument
from ..query.request import QueryRequest

TIMEOUT_S = 300.0  # a first query may wait for a model that is still loading
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ServerClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--server {url}: expected an http:// or https:// URL.")
        self.url = url.rstrip("/")
        # as UTF-8 bytes: httpx refuses a str header that is not ASCII, and the server compares the token's UTF-8
        headers = {b"Authorization": f"Bearer {token}".encode("utf-8", "surrogateescape")} if token else {}
        # plain http has no certificate to check: loading the system's CA bundle for it costs 30-70 ms a client
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, verify=self.url.startswith("https://"))

    def query(self, request: QueryRequest) -> dict:
        """The server's query document for `request`, checked: a bad answer is an LgptError naming the server.
        Only the queries and the fields that differ from their defaults are sent (a server that predates a
        field refuses it, and answers a request that leaves it out)."""
        body = {"queries": list(request.queries), **request.model_dump(mode="json", exclude_defaults=True, exclude={"queries"})}
        response = self._request("POST", "/query", json=body)
        try:
            document = response.json()
        except ValueError:
            raise self._bad_answer(f"not JSON ({response.headers.get('content-type', 'no content type')}: "
                                   f"{_excerpt(response.text)})") from None
        try:
            QueryDocument.model_validate(document, strict=True)  # strict: a rank or page given as a string is refused
        except ValidationError as exc:
            raise self._bad_answer(_problems(exc)) from None
        if len(document["queries"]) != len(request.queries):
            raise self._bad_answer(f"{len(document['queries'])} answers for {len(request.queries)} queries")
        return document

    def page(self, sha256: str, page: int, dpi: int) -> bytes:
        content = self._request("GET", f"/pages/{sha256}/{page}.png", params={"dpi": dpi}).content
        if not content.startswith(PNG_MAGIC):
            raise LgptError(f"the server at {self.url} sent something other than a PNG for page {page} of {sha256[:12]}.")
        return content

    def _bad_answer(self, what: str) -> LgptError:
        return LgptError(f"the server at {self.url} did not answer with a query document: {what}.",
                         hint="Is it an lgpt-index server (`lgpt-index serve`) of this version?")

    def _request(self, method: str, path: str, **kwargs):
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise EnvironmentMissing(
                f"cannot reach the lgpt-index server at {self.url} ({type(exc).__name__}: {_excerpt(str(exc), 160)}).",
                hint="Start it with `lgpt-index serve`, or query without --server (and without $LGPT_SERVER).",
            ) from None
        except httpx.HTTPError as exc:  # a redirect loop, a body that cannot be decoded
            raise LgptError(f"the server at {self.url} answered badly ({type(exc).__name__}: {_excerpt(str(exc), 160)}).") from None
        if response.status_code < 400:
            return response
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300] or response.reason_phrase
        if response.status_code == 503:
            raise EnvironmentMissing(f"the server at {self.url} cannot answer yet: {message}")
        if response.status_code in (400, 401, 404, 413):
            raise UsageError(f"the server at {self.url} refused the request ({response.status_code}): {message}")
        raise LgptError(f"the server at {self.url} failed ({response.status_code}): {message}")


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(" ".join(text.split())[:limit]) if text.strip() else "empty"


def _problems(exc: ValidationError) -> str:
    """The first few of pydantic's complaints, each with where it is (queries.0.results.2.page)."""
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "the document"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(problems) + more
