"""Retrievers for the frameworks answerers are written in: LangChain and LlamaIndex.

`integrations.langchain.LgptRetriever` (langchain-core, the `langchain` extra) and
`integrations.llamaindex.LgptRetriever` (llama-index-core, the `llamaindex` extra), each over an open
index or a running `lgpt-index serve` (integrations.source).

Importing this package imports neither framework: each adapter module imports its own when it is imported.
"""
