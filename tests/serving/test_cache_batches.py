"""The cache's record of what each batch paid for (``batch_answers``), and the tier reading it
back on a retry of the same batch (no Ray)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from serving_fakes import ScriptedBackend

from semray.serving.cache import BATCH_ANSWERS_KEPT_S, ResponseCache
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint, Usage
from semray.serving.tier import ModelTier

YES_NO = OutputConstraint.choice("Yes", "No")
SCRIPTED = TierConfig(backend="simulated", model="scripted")


def _response(text: str, error: str | None = None) -> ModelResponse:
    usage = Usage(input_tokens=7)
    return ModelResponse(
        text=text, value=None, confidence=None, tier="small", model="m", usage=usage, calls=1, error=error
    )


def test_a_batch_records_every_paid_answer_and_caches_the_good_ones(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    paid = [("good", _response("Yes")), ("bad", _response("Perhaps", error="unparseable: no choice"))]
    assert cache.put_many(paid, batch="b1") == 1
    assert set(cache.get_many(["good", "bad"])) == {"good"}, "an error is never cached"
    recorded = ResponseCache(tmp_path / "responses.sqlite").batch_answers("b1", ["good", "bad", "other"])
    assert set(recorded) == {"good", "bad"} and all(r.usage.input_tokens == 7 for r in recorded.values())
    assert cache.batch_answers("b2", ["good", "bad"]) == {}, "another batch recorded nothing"
    assert cache.put_many([("plain", _response("No"))]) == 1 and cache.batch_answers("b1", ["plain"]) == {}


def test_old_batch_rows_are_dropped_by_the_first_recording_write(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    ResponseCache(path).put_many([("k", _response("Yes"))], batch="old")
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE batch_answers SET created = ?", (time.time() - BATCH_ANSWERS_KEPT_S - 1,))
    cache = ResponseCache(path)
    assert set(cache.batch_answers("old", ["k"])) == {"k"}, "kept until a write prunes it"
    cache.put_many([("k2", _response("No"))], batch="new")
    assert cache.batch_answers("old", ["k"]) == {} and set(cache.batch_answers("new", ["k2"])) == {"k2"}
    assert set(cache.get_many(["k", "k2"])) == {"k", "k2"}, "pruning leaves the cached answers alone"


def test_a_retry_of_the_batch_returns_the_lost_answers_as_paid(tmp_path: Path) -> None:
    """Errors included: the dead attempt's off-format reply (two paid calls) is not asked again."""
    replies = {"good?": "Yes", "odd?": "Perhaps"}
    backend = ScriptedBackend(lambda call: next(v for k, v in replies.items() if k in call.messages[-1][1]))
    tier = ModelTier("small", SCRIPTED, backend, ResponseCache(tmp_path / "responses.sqlite"))
    requests = [ModelRequest(prompt=p, constraint=YES_NO, request_id=str(i)) for i, p in enumerate(replies)]
    lost = asyncio.run(tier.generate(requests, batch="b1"))
    sent = len(backend.calls)
    assert sent == 3 and [r.calls for r in lost] == [1, 2], "one answer, one off-format reply and its repair"
    retry = asyncio.run(tier.generate([*requests, requests[0]], batch="b1"))
    assert len(backend.calls) == sent, "the retry pays for nothing"
    assert [(r.cache_hit, r.calls, r.value) for r in retry] == [(False, 1, "Yes"), (False, 2, None), (True, 0, "Yes")]
    assert [r.usage for r in retry[:2]] == [r.usage for r in lost] and retry[1].error_code == "unparseable"
    later = asyncio.run(tier.generate(requests, batch="b2"))
    assert [r.cache_hit for r in later] == [True, False] and len(backend.calls) == sent + 2, "a new batch re-asks"
