"""The Python API's warm opt-in: `open_warm_index`, a Searcher that asks a warm service of its index first.

A program that searches an index a few times and exits pays the model's load each run, as a one-shot
`lgpt-index query` does; where `lgpt-index warm` (or `serve`, `mcp`, `query --keep-warm`) keeps a
service of the index with the same model and settings, `open_warm_index` answers from it: the same hits
(the service scores as a fresh process does, the command line's answers byte for byte), no model here.
Where none answers (none runs, another model or settings, another generation than this Searcher's, or a
request it is not asked: text mode, which loads no model, and regions, whose boxes it rounds), the
Searcher answers itself as `open_index`'s does, loading the model once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..core.types import SearchHit
from ..index.local.paths import index_path
from ..index.local.store import LocalStore
from ..index.protocols import View
from ..index.scoring.device import DeviceScoring
from ..models.resolve import ModelSpec
from ..query.request import AUTO, QueryRequest
from ..query.search import Searcher, as_request
from .warm import Identity, ask, identity


class WarmSearcher(Searcher):
    """A Searcher of a local index whose queries a matching warm service answers where one runs
    (`answered_warm` counts them); the others it answers itself, with the model of `spec`."""

    def __init__(self, view: View, expect: Identity, spec: ModelSpec, scoring: DeviceScoring | None = None) -> None:
        super().__init__(view, scoring=scoring)
        self.expect, self.spec = expect, spec
        self.answered_warm = 0

    def search(self, request: QueryRequest | str | Sequence[str], **fields: Any) -> list[list[SearchHit]]:
        request = as_request(request, **fields)
        if self._encoder is None and not request.regions and request.first_pass != AUTO and self.mode(request) != "text":
            answer = ask(Path(self.expect.root), self.expect, request.model_dump(mode="json") | {"generation": self.manifest.generation})
            if isinstance(answer, dict):
                self.answered_warm += 1
                return [[_hit(hit) for hit in query["results"]] for query in answer["document"]["queries"]]
            self.load_encoder(self.spec)
        return super().search(request)


def _hit(document: dict) -> SearchHit:
    """A hit of the query document back as the SearchHit it was made from (SearchHit.to_dict's fields)."""
    fused = "visual_rank" in document
    return SearchHit(rank=document["rank"], score=document["score"], path=document["path"], page=document["page"],
                     sha256=document["sha256"], kind=document["kind"], metadata=document["metadata"], fused=fused,
                     visual_rank=document.get("visual_rank"), text_rank=document.get("text_rank"),
                     visual_score=document.get("visual_score"), text_score=document.get("text_score"),
                     snippet=document.get("snippet"), text=document.get("text"), copies=tuple(document.get("copies", ())))


def open_warm_index(index_dir: str | Path | None = None, name: str | None = None, model: ModelSpec = ModelSpec(),
                    scoring: DeviceScoring | None = None) -> WarmSearcher:
    """Open the current generation of a local index as `open_index` does, its queries answered by a warm
    service of it where one runs with `model` (its device and dtype) and `scoring` (`lgpt-index warm`'s
    --model, --device, --dtype, --scorer, --max-resident), else here (the same hits)."""
    scoring = scoring or DeviceScoring()
    store = LocalStore(index_path(index_dir, name))
    expect = identity(store.root, model.id, model.device, model.dtype, scoring.scorer, scoring.max_resident)
    return WarmSearcher(store.open_view(), expect, model, scoring)
