"""A client of `lgpt-index serve` (`query --server URL`): the same documents, over HTTP (httpx)."""

from __future__ import annotations

from .errors import EnvironmentMissing, LgptError, UsageError

TIMEOUT_S = 300.0  # a first query may wait for a model that is still loading


class ServerClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--server {url}: expected an http:// or https:// URL.")
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def query(self, texts: list[str], k: int, filters: dict[str, str], first_pass: int | None = None,
              with_images: bool = False, dpi: int = 150) -> dict:
        body = {"queries": texts, "k": k, "filters": filters, "first_pass": first_pass, "with_images": with_images, "dpi": dpi}
        return self._request("POST", "/query", json=body).json()

    def page(self, sha256: str, page: int, dpi: int) -> bytes:
        return self._request("GET", f"/pages/{sha256}/{page}.png", params={"dpi": dpi}).content

    def _request(self, method: str, path: str, **kwargs):
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise EnvironmentMissing(
                f"cannot reach the lgpt-index server at {self.url} ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}).",
                hint="Start it with `lgpt-index serve`, or query without --server (and without $LGPT_SERVER).",
            ) from None
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
