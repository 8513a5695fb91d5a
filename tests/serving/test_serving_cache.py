"""The durable response cache: content addresses, persistence, concurrent writers in processes."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from semray.serving.cache import ResponseCache, cache_key
from semray.serving.contract import ModelResponse, Usage


def _response(text: str) -> ModelResponse:
    return ModelResponse(text=text, value=text, confidence=0.9, usage=Usage(input_tokens=5), tier="small", model="m")


def test_keys_are_stable_and_sensitive_to_every_part() -> None:
    base = cache_key("simulated:m", {"messages": [["user", "hi"]], "temperature": 0.0})
    assert base == cache_key("simulated:m", {"temperature": 0.0, "messages": [["user", "hi"]]})
    assert base != cache_key("simulated:m2", {"messages": [["user", "hi"]], "temperature": 0.0})
    assert base != cache_key("simulated:m", {"messages": [["user", "hi"]], "temperature": 0.5})


def test_responses_survive_reopening_and_first_write_wins(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "responses.sqlite"
    cache = ResponseCache(path)
    assert cache.put_many([("k1", _response("a")), ("k2", _response("b"))]) == 2
    assert cache.put_many([("k1", _response("changed"))]) == 0
    cache.close()
    reopened = ResponseCache(path)
    found = reopened.get_many(["k1", "k2", "missing"])
    assert {key: r.text for key, r in found.items()} == {"k1": "a", "k2": "b"}
    assert len(reopened) == 2


def _write(path: str, worker: int, count: int) -> None:
    cache = ResponseCache(Path(path))
    for start in range(0, count, 10):
        # Overlapping keys across workers: every worker writes the even keys, and its own odd ones.
        items = [
            (f"shared-{i}" if i % 2 == 0 else f"w{worker}-{i}", _response(f"{worker}-{i}"))
            for i in range(start, start + 10)
        ]
        cache.put_many(items)
    cache.close()


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    ResponseCache(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write, args=(str(path), w, 100)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert len(ResponseCache(path)) == 50 + 4 * 50
