"""A folder that stays indexed: `lgpt-index watch DOCS` and `serve --watch DOCS` (see docs/watch.md).

`Watcher` (watcher.py) turns file events (source.py, on watchfiles) into debounced incremental
builds, filtered and settled by changes.py, and reports every step as a typed event (events.py).
"""
