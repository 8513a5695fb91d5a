"""A configured LLM tier writes each dataset's summary and proposes a schema for a file whose schema had
to be inferred; the proposal is kept only when it checks against the data (``catalog/summaries.py``,
``catalog/ingest.py``). The tier is a stand-in for ``generate_with_tier``: no endpoint, no Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from semray.catalog import ingest, summaries
from semray.catalog.ingest import add_server
from semray.catalog.store import Catalog
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.settings import Settings

SERVING = ServingConfig(small=TierConfig(backend="openai", model="stand-in", base_url="http://127.0.0.1:9/v1"))


def _tier(proposal: list[dict[str, str]], asked: list[ModelRequest]) -> Any:
    async def generate(config: ServingConfig, tier_name: str, requests: list[ModelRequest]) -> list[ModelResponse]:
        assert tier_name == "small"
        asked.extend(requests)
        return [
            ModelResponse(text="", value={"columns": proposal}, confidence=None, request_id=request.request_id)
            if request.request_id.startswith("p")
            else ModelResponse(
                text="", value=f"summary {request.request_id}", confidence=None, request_id=request.request_id
            )
            for request in requests
        ]

    return generate


def _columns(price: str) -> list[dict[str, str]]:
    return [{"name": "id", "type": "INTEGER"}, {"name": "price", "type": price}, {"name": "code", "type": "VARCHAR"}]


@pytest.mark.parametrize("proposal,kept", [(_columns("DOUBLE"), True), (_columns("DATE"), False)])
def test_the_tier_summarises_and_its_schema_proposal_is_checked_against_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proposal: list[dict[str, str]], kept: bool
) -> None:
    folder = tmp_path / "shop"
    folder.mkdir()
    (folder / "items.csv").write_text("1,2.5,x\n4,5.5,y\n7,8.5,z\n")
    asked: list[ModelRequest] = []
    monkeypatch.setattr(ingest, "resolve_serving", lambda models: SERVING)
    monkeypatch.setattr(summaries, "generate_with_tier", _tier(proposal, asked))
    settings = Settings(state_dir=tmp_path / "state")
    add_server(settings, str(folder), engine="local")
    (record,) = Catalog.open(settings).datasets()
    assert record.summary == "summary s0" and record.summary_status == "summarised by the small tier (stand-in)"
    assert [request.request_id for request in asked] == ["s0", "p0"]  # one summary, one schema proposal
    assert "1,2.5,x" in asked[1].prompt  # the proposal is asked from the file's own lines
    if kept:
        assert "names and types proposed by the model, checked on 3 rows" in record.schema_status
        assert [column["proposed_name"] for column in record.schema] == ["id", "price", "code"]
    else:
        assert "a proposed schema was refused" in record.schema_status and "DATE" in record.schema_status
        assert all("proposed_name" not in column for column in record.schema)
