"""The Qdrant backend: an index in a Qdrant deployment (a server, a cluster, or the in-process mode)."""
