"""`lgpt-index serve` and its client: the warm index over HTTP.

    runner      the exposure rule, the listening socket, uvicorn until SIGTERM  (cli/serve.py calls it)
    app         the FastAPI application; the model loaded, then warmed up, in the background
    routes      the endpoints, each answering with the CLI's own document; errors as answers
    images      page PNGs for /pages and with_images: a budget per answer, render slots, a cache
    middleware  the request log, then Host/Origin, the bearer token and the body limit
    schemas     the request body, the limits, the error document
    service     the warm index: the model loaded once, HEAD followed, queries batched
    httpguard   the HTTP policies (who may ask, what an answer may reveal), no FastAPI in them
    httpconn    uvicorn's httptools protocol with read deadlines and a connection cap
    client      `query --server`: the same documents over HTTP, checked
    warm        the Unix socket `query` finds by itself: where it is, who may use it, the cheap client
    warmapp     the socket's routes (the command line's own answer), its status, the idle time

Nothing is imported here, so that `query --server` (serve.client) does not load FastAPI."""
