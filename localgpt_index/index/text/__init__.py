"""The lexical side of the index: one tokenizer, one BM25 weighting, and the full-text engine.

The tokenizer (tokenize), the full-text engine over SQLite FTS5 with the BM25 weighting of both
stores (engine) that a generation stores beside its vectors, and page text (artifact)."""
