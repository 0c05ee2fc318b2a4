"""Where the vectors live: the format, both stores (local, Qdrant), their one transaction, views and scoring."""
