"""Usage ledger: per tier, operator and run totals; summaries add up across actors."""

from __future__ import annotations

import pickle
import threading

from semray.serving.config import Prices
from semray.serving.contract import ModelResponse, Usage
from semray.serving.usage import UsageLedger, UsageSummary


def _response(tier: str, tokens: int, *, hit: bool = False, error: str | None = None) -> ModelResponse:
    usage = Usage() if hit else Usage(input_tokens=tokens, output_tokens=1, dollars=tokens / 1e6, gpu_seconds=0.5)
    return ModelResponse(
        text="x",
        value=None if error else "x",
        confidence=None,
        usage=usage,
        tier=tier,
        model="m",
        cache_hit=hit,
        error=error,
        calls=0 if hit else 1,
        latency_s=0.1,
    )


def test_ledger_aggregates_per_tier_operator_and_run() -> None:
    ledger = UsageLedger()
    ledger.record("filter#1", _response("small", 10))
    ledger.record("filter#1", _response("small", 10, hit=True))
    ledger.record("filter#1", _response("large", 20))
    ledger.record("map#2", _response("large", 5, error="unparseable: x"))
    summary = ledger.summary()
    assert summary.total.requests == 4 and summary.total.calls == 3 and summary.total.cache_hits == 1
    assert summary.total.input_tokens == 35 and summary.total.errors == 1
    assert summary.by_tier["small"].input_tokens == 10 and summary.by_tier["small"].cache_hit_rate == 0.5
    assert summary.by_operator["filter#1"].input_tokens == 30
    assert summary.by_operator_tier["filter#1/large"].input_tokens == 20
    assert abs(summary.total.gpu_seconds - 1.5) < 1e-9


def test_summaries_from_several_actors_add_up_and_pickle() -> None:
    first, second = UsageLedger(), UsageLedger()
    first.record("op", _response("small", 3))
    second.record("op", _response("small", 4))
    second.record("other", _response("large", 5))
    combined = UsageSummary.combine([pickle.loads(pickle.dumps(first.summary())), second.summary()])
    assert combined.total.input_tokens == 12 and combined.by_operator["op"].input_tokens == 7
    assert set(combined.by_tier) == {"small", "large"}


def test_ledger_is_thread_safe() -> None:
    ledger = UsageLedger()

    def record() -> None:
        for _ in range(200):
            ledger.record("op", _response("small", 1))

    threads = [threading.Thread(target=record) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger.summary().total.input_tokens == 800


def test_price_table_charges_tokens_and_gpu_time() -> None:
    prices = Prices(input_per_million=3.0, output_per_million=15.0, gpu_hour=3.6)
    assert abs(prices.dollars(1_000_000, 100_000, gpu_seconds=10.0) - (3.0 + 1.5 + 0.01)) < 1e-12
