"""`lgpt-index serve` and its client: the warm index over HTTP.

Nothing is imported here, so that `query --server` (serve.client) does not load FastAPI."""
