"""The embedding tier has a price in the serving profile, like the LLM tiers, and the cost model charges it.

The default profile prices the packaged local MiniLM at $0 explicitly; a profile's ``[embedding]``
table without ``prices`` is "not set (counted as $0)", as for any other unpriced tier; a priced embedder
makes the cost model charge every embedded token (no Ray, no model).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from semray.cost_model.estimates import Interval
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import profiles_from_serving
from semray.cost_model.statistics import PlanStatistics
from semray.operators import Scan, Schema, SemSearch, SourceSpec
from semray.operators.keys import source_key, statistics_key
from semray.operators.relational import CatalogPin
from semray.serving.checking import _prices
from semray.serving.config import LOCAL_EMBEDDING_PRICES, Prices, ServingConfig
from semray.serving.handles import TierHandles
from semray.serving.profiles import load_profile

ROWS = 10_000.0
TOKENS_PER_ROW = 300.0
PRICED = """
[embedding]
backend = "sentence_transformers"
model = "all-MiniLM-L6-v2"
prices = { input_per_million = 0.02 }
"""


def _search(pin: CatalogPin | None) -> SemSearch:
    source = SourceSpec(kind="parquet", path="/data/notes.parquet", catalog=pin)
    scan = Scan(source=source, source_schema=Schema.of(("document_id", "VARCHAR"), ("text", "VARCHAR")))
    return SemSearch(input=scan, column="text", query="chest pain", k=5)


def _dollars(search: SemSearch, config: ServingConfig) -> float:
    statistics = PlanStatistics(
        source_rows={source_key(search.input): Interval.exact(ROWS)},  # type: ignore[arg-type]
        tokens_per_row={statistics_key(search): Interval.exact(TOKENS_PER_ROW)},
    )
    return float(estimate_plan(search, statistics, profiles_from_serving(config)).operator("").dollars.value)


def test_the_default_profile_prices_the_local_embedder_at_zero_explicitly() -> None:
    embedding = ServingConfig().embedding
    assert embedding.prices is LOCAL_EMBEDDING_PRICES and embedding.prices == Prices()  # said, not missing
    assert profiles_from_serving(ServingConfig())["embedding"].fee_in_per_m == 0.0
    assert _prices(embedding, None) == "$0 per 1M embedded tokens (a local model the profile prices at $0)"
    assert _dollars(_search(None), ServingConfig()) == 0.0


def test_an_embedding_tier_without_a_price_says_it_is_not_set(tmp_path: Path) -> None:
    (tmp_path / "semray.toml").write_text('[embedding]\nbackend = "sentence_transformers"\nmodel = "m"\n')
    embedding = load_profile(tmp_path / "semray.toml").embedding
    assert embedding.prices is None
    assert _prices(embedding, None) == "not set in the profile (counted as $0)"


def test_a_priced_embedder_is_charged_per_embedded_token(tmp_path: Path) -> None:
    (tmp_path / "semray.toml").write_text(PRICED)
    config = load_profile(tmp_path / "semray.toml")
    assert config.embedding.prices == Prices(input_per_million=0.02)
    assert profiles_from_serving(config)["embedding"].fee_in_per_m == 0.02
    assert _prices(config.embedding, None) == "$0.02 per 1M embedded tokens"
    # A run-scoped search embeds every row (and the query): 10k rows x 300 tokens at $0.02 per 1M.
    run_scoped = _dollars(_search(None), config)
    assert run_scoped == pytest.approx(ROWS * TOKENS_PER_ROW * 0.02 / 1e6, rel=0.01)
    # A search ranked by the catalog's indexes embeds only its query: a few tokens, priced all the same.
    pinned = _dollars(_search(CatalogPin(dataset="notes", version=1, content_hash="9f", documents=True)), config)
    assert 0.0 < pinned < run_scoped / 1000


def test_the_handles_carry_the_embedding_price_to_whoever_embeds() -> None:
    handles = TierHandles(apps={"embedding": "semray-embedding"}, embedding_prices=Prices(input_per_million=0.02))
    assert handles.embedding_dollars(1_000_000) == pytest.approx(0.02)
    shipped = pickle.loads(pickle.dumps(handles))  # into the Ray tasks and actors that embed
    assert shipped.embedding_dollars(500_000) == pytest.approx(0.01)
    assert TierHandles(apps={}).embedding_dollars(1_000_000) == 0.0  # no price given: the local default
