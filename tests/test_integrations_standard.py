"""LangChain's own retriever suite (langchain-tests' RetrieversIntegrationTests) over the LangChain retriever
(localgpt_index.integrations.langchain), over an open index and over a real `lgpt-index serve` on a real port.
The retrievers' own tests: tests/test_integrations.py."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from helpers import report_index as build_report_index
from served import serving

from localgpt_index import open_index
from localgpt_index.integrations import langchain as lc

# langchain-tests takes about 2 s of CPU to import, in every process that collects the module: the real-component
# tier's (the fast tier does not import a module marked slow as a whole: conftest.pytest_ignore_collect)
pytestmark = pytest.mark.slow

QUERY = "report 1 page 0"


@pytest.fixture(scope="module")
def report_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("standard"), fake_model, reports=3, pages=2)


@pytest.fixture(scope="module")
def server(report_index):
    yield from serving("--index-dir", str(report_index["index"]))


class TestLangChainStandardSuiteOverTheApi(RetrieversIntegrationTests):
    """LangChain's own retriever suite (langchain-tests), over an open index and the fake encoder."""

    @pytest.fixture(autouse=True)
    def _index(self, report_index):
        self.index = open_index(report_index["index"])

    @property
    def retriever_constructor(self):
        return lc.LgptRetriever.from_index  # the constructor users call, taking k as the suite expects

    @property
    def retriever_constructor_params(self) -> dict:
        return {"index": self.index}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class TestLangChainStandardSuiteOverServe(RetrieversIntegrationTests):
    """LangChain's own retriever suite over a running `lgpt-index serve`."""

    @pytest.fixture(autouse=True)
    def _server(self, server):
        self.url = server.url

    @property
    def retriever_constructor(self):
        return lc.LgptRetriever.from_server

    @property
    def retriever_constructor_params(self) -> dict:
        return {"url": self.url}

    @property
    def retriever_query_example(self) -> str:
        return QUERY
