"""The lexical side of the index: one tokenizer (tokenize), one BM25 weighting (bm25), and the
full-text engine over SQLite FTS5 (engine) that a generation stores beside its vectors."""
