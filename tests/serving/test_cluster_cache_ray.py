"""The cluster's response cache actor (``serving/cluster_cache.py``) on the session's local Ray:
one file on the head node behind one actor; a replica's client reads and writes it, a probe's
client never reads answers, and a client whose actor is gone degrades to misses, logged once."""

from __future__ import annotations

from pathlib import Path

import pytest

from semray.serving.cache import ResponseCache
from semray.serving.cluster_cache import CLUSTER_CACHE_NAME, NAMESPACE, ClusterResponseCache, ensure_cluster_cache
from semray.serving.contract import ModelResponse, Usage
from semray.settings import Settings

pytestmark = pytest.mark.ray


def _response(text: str) -> ModelResponse:
    return ModelResponse(text=text, value=text, confidence=0.9, usage=Usage(input_tokens=5), tier="small", model="m")


def test_replicas_share_the_head_nodes_file_through_the_actor(
    ray_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    del ray_settings  # only starts the session's Ray
    path = tmp_path / "cache" / "responses.sqlite"
    name = ensure_cluster_cache(str(path), 10.0)
    try:
        assert ensure_cluster_cache(str(tmp_path / "other.sqlite"), 10.0) == name, "one cache per cluster"
        writer, reader, probe = ClusterResponseCache(name), ClusterResponseCache(name), ClusterResponseCache(name)
        probe.fresh = True
        assert writer.put_many([("k1", _response("a"))], batch="b1") == 1
        assert writer.put_many([("k1", _response("changed"))]) == 0, "first write wins"
        assert {key: r.text for key, r in reader.get_many(["k1", "k2"]).items()} == {"k1": "a"}
        assert probe.get_many(["k1"]) == {}, "a probe pays for its answers"
        assert set(probe.batch_answers("b1", ["k1"])) == {"k1"}, "a retried probe batch reads what it paid"
        assert probe.look_up("b1", ["k1", "k2"]) == (probe.batch_answers("b1", ["k1"]), {})
        paid, cached = reader.look_up("b2", ["k1", "k2"])
        assert (paid, set(cached)) == ({}, {"k1"}), "one call: no paid answers of b2, k1 cached"
        assert set(ResponseCache(path).get_many(["k1"])) == {"k1"}, "the file is the driver's path"
        assert not (tmp_path / "other.sqlite").exists()
    finally:
        ray.kill(ray.get_actor(CLUSTER_CACHE_NAME, namespace=NAMESPACE), no_restart=True)
    capsys.readouterr()
    gone = ClusterResponseCache(name)
    assert gone.get_many(["k1"]) == {} and gone.put_many([("k3", _response("c"))]) == 0
    assert gone.failure is not None and not gone.available
    assert gone.get_many(["k1"]) == {}
    assert capsys.readouterr().err.count("response_cache_unavailable") == 1
