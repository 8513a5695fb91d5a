"""The response cache copied to the state store (``serving/cache_store.py``), against moto's S3 server
on 127.0.0.1 through pyarrow's S3 filesystem (no Ray).

A tier answers with a cache under one state folder, the cache is pushed to the store, and a tier on a
"fresh machine" (another state folder, the same store URI) answers the same requests with 0 model
calls, for both cache scopes: the file on this node (``copy_cache_with_store`` with no actor) and the
cluster's cache actor (``CacheOwner``, called in process). The bucket is versioned: no cache segment
is put twice.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Server
from serving_fakes import ScriptedBackend

from semray.serving import cache_store
from semray.serving.cache import ResponseCache
from semray.serving.cache_store import CacheCopy
from semray.serving.cluster_cache import CacheOwner, copy_cache_with_store
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint, Usage
from semray.serving.deployments import response_cache_in_store
from semray.serving.tier import ModelTier
from semray.settings import Settings
from semray.transactions.remote import open_store

YES_NO = OutputConstraint.choice("Yes", "No")
SCRIPTED = TierConfig(backend="simulated", model="scripted")
REQUESTS = [ModelRequest(prompt=f"is review {i} positive?", constraint=YES_NO, request_id=str(i)) for i in range(6)]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with S3Server.start() as running:
        yield running


@pytest.fixture
def prefix(tmp_path: Path, server: S3Server) -> Iterator[str]:
    """A prefix of its own per test; afterwards: no object under it was put twice."""
    name = f"{tmp_path.name}/semray"
    yield name
    assert {key for key, puts in server.versions(name).items() if puts > 1} == set(), "a segment was put twice"


def machine(tmp_path: Path, name: str, server: S3Server, prefix: str) -> Settings:
    return Settings(state_dir=tmp_path / name, state_uri=server.uri(prefix), state_endpoint=server.endpoint)


def cache_file(settings: Settings) -> Path:
    path = ServingConfig().cache_path(settings.state_path)
    assert path is not None
    return path


def ask(path: Path) -> tuple[list[ModelResponse], int]:
    """The tier's answers to ``REQUESTS`` with the cache at ``path``, and the model calls it made."""
    backend = ScriptedBackend(lambda call: "Yes")
    tier = ModelTier("small", SCRIPTED, backend, ResponseCache(path))
    return asyncio.run(tier.generate(REQUESTS)), len(backend.calls)


def copy(settings: Settings, scope: str, direction: str) -> int:
    uri, path = settings.state_store_uri or "", cache_file(settings)
    if scope == "cluster":  # the head node's cache actor, its methods called in process
        return CacheOwner(str(path), 10.0).copy_with_store(uri, "pull" if direction == "pull" else "push")
    return copy_cache_with_store(uri, str(path), None, "pull" if direction == "pull" else "push", 10.0)


@pytest.mark.parametrize("scope", ["node", "cluster"])
def test_a_fresh_machine_answers_from_the_store_with_no_model_call(
    tmp_path: Path, server: S3Server, prefix: str, scope: str
) -> None:
    first, fresh = machine(tmp_path, "a", server, prefix), machine(tmp_path, "b", server, prefix)
    paid, calls = ask(cache_file(first))
    assert calls == len(REQUESTS)
    assert copy(first, scope, "push") == len(REQUESTS)
    segments = [key for key in server.objects(prefix) if key.startswith(f"{prefix}/cache/segments/")]
    assert len(segments) == 1 and segments[0].endswith(".jsonl.gzip")

    assert not cache_file(fresh).exists()
    assert copy(fresh, scope, "pull") == len(REQUESTS)
    answers, calls = ask(cache_file(fresh))
    assert calls == 0, "every answer came from the store"
    assert all(answer.cache_hit for answer in answers)
    assert [answer.value for answer in answers] == [answer.value for answer in paid]
    assert copy(fresh, scope, "pull") == 0 and copy(fresh, scope, "push") == 0, "nothing new either way"


def test_a_push_sends_only_the_entries_the_store_lacks(tmp_path: Path, server: S3Server, prefix: str) -> None:
    settings = machine(tmp_path, "a", server, prefix)
    store = open_store(settings.state_store_uri or "")
    cache = ResponseCache(cache_file(settings))
    cache.put_many([(f"k{i}", _response(i)) for i in range(3)])
    first = CacheCopy(cache.path, store)
    assert (first.push(), first.push()) == (3, 0)
    cache.put_many([(f"k{i}", _response(i)) for i in range(5)])
    assert (CacheCopy(cache.path, store).push(), first.pull()) == (2, 0), "a push marks its own segment merged"
    assert len(server.objects(f"{prefix}/cache/segments/")) == 2


def test_two_writers_pushing_at_once_lose_nothing(tmp_path: Path, server: S3Server, prefix: str) -> None:
    """Overlapping entries from two machines, pushed at the same moment: a third has the union."""
    machines = [machine(tmp_path, name, server, prefix) for name in ("a", "b", "c")]
    ResponseCache(cache_file(machines[0])).put_many([(f"k{i}", _response(i)) for i in range(0, 60)])
    ResponseCache(cache_file(machines[1])).put_many([(f"k{i}", _response(i)) for i in range(30, 90)])
    start = threading.Barrier(2)
    pushed: list[int] = []

    def push(settings: Settings) -> None:
        copier = CacheCopy(cache_file(settings), open_store(settings.state_store_uri or ""))
        start.wait()
        pushed.append(copier.push())

    threads = [threading.Thread(target=push, args=(settings,)) for settings in machines[:2]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(pushed) == [60, 60]
    assert copy(machines[2], "node", "pull") == 90
    found = ResponseCache(cache_file(machines[2])).get_many([f"k{i}" for i in range(90)])
    assert len(found) == 90 and found["k45"].text == "answer 45"


def test_a_run_pushes_its_new_entries_when_it_ends(tmp_path: Path, server: S3Server, prefix: str) -> None:
    settings = machine(tmp_path, "a", server, prefix).model_copy(update={"cache_sync_s": 3600.0})
    with response_cache_in_store(ServingConfig(), settings):
        ResponseCache(cache_file(settings)).put_many([("k1", _response(1))])
        assert not server.objects(prefix), "nothing before the interval or the end"
    (segment,) = server.objects(f"{prefix}/cache/segments/")
    assert segment.endswith(".jsonl.gzip")


def test_without_a_state_uri_nothing_is_copied(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "a")
    with response_cache_in_store(ServingConfig(), settings):
        ResponseCache(cache_file(settings)).put_many([("k1", _response(1))])
    assert not (tmp_path / "a" / "cache").joinpath("segments").exists()


def _response(i: int) -> ModelResponse:
    return ModelResponse(
        text=f"answer {i}", value=None, confidence=None, tier="small", model="m", usage=Usage(input_tokens=3), calls=1
    )


def test_a_large_push_is_several_segments_read_back_whole(
    tmp_path: Path, server: S3Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_store, "SEGMENT_ENTRIES", 4)
    first, fresh = machine(tmp_path, "a", server, prefix), machine(tmp_path, "b", server, prefix)
    ResponseCache(cache_file(first)).put_many([(f"k{i:02d}", _response(i)) for i in range(10)])
    assert copy(first, "node", "push") == 10
    assert len(server.objects(f"{prefix}/cache/segments/")) == 3, "4 + 4 + 2 entries"
    assert copy(fresh, "node", "pull") == 10
    assert len(ResponseCache(cache_file(fresh)).get_many([f"k{i:02d}" for i in range(10)])) == 10


def test_a_damaged_segment_is_skipped_and_the_others_merged(tmp_path: Path, server: S3Server, prefix: str) -> None:
    first, fresh = machine(tmp_path, "a", server, prefix), machine(tmp_path, "b", server, prefix)
    ResponseCache(cache_file(first)).put_many([("k1", _response(1))])
    assert copy(first, "node", "push") == 1
    store = open_store(first.state_store_uri or "")
    store.write_once(f"{store.base}/cache/segments/0000000000000-damaged.jsonl.gzip", b"not gzip")
    assert copy(fresh, "node", "pull") == 1
    assert set(ResponseCache(cache_file(fresh)).get_many(["k1"])) == {"k1"}
