"""The response cache of a Ray cluster: one named actor on the head node owns the SQLite file.

``ResponseCache`` is a file on the node of the process that opens it. On one machine that is
every process; on a cluster each tier replica would open the file on its own node, so a replica
on another node than the one that paid for an answer misses it and pays again, and a retry of a
batch whose replica died reads the paid answers (``batch_answers``) only if it lands on the same
node. So on a cluster (``ServingConfig.cache_scope``) the cache is a detached actor
(``CLUSTER_CACHE_NAME`` in namespace ``semray``) pinned to the head node, holding the
``ResponseCache`` at the driver's cache path on that node; the replicas on every node reach it
through ``ClusterResponseCache``: a batch's reads (``look_up``: its paid answers, then the cached
ones) are one actor call, its writes (``put_many``) another, each with all the batch's keys.
Why an actor and not entries shipped through the object store (``Settings.state_uri``): a miss
must be answered within the batch, before the model is called; through the store that is a GET
per key or a download of an index that grows with the cache, and an answer paid a second ago on
another node is not there until the next push, so two replicas (or a retried batch) would pay
twice within one run. The actor answers from the one file at once, at the cost of two round trips
per batch to the head node (next to a model call's hundreds of milliseconds) and of the head
node's disk as the one copy: the cache lives as long as the head node's state folder does, as it
does on one machine.

Like ``ResponseCache``, a cache actor that cannot be reached degrades to misses, logged once.

>>> name = ensure_cluster_cache("/home/me/.semray/cache/responses.sqlite", 10.0)  # doctest: +SKIP
>>> ClusterResponseCache(name).get_many(["k"])  # doctest: +SKIP
{}
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ray

from semray.log import get_logger
from semray.serving.cache import ResponseCache
from semray.serving.cache_store import Direction, copy_with_store
from semray.serving.contract import ModelResponse
from semray.transactions.remote import uri_for_logs

log = get_logger(__name__)

CLUSTER_CACHE_NAME = "semray-response-cache"
NAMESPACE = "semray"
HEAD_NODE_RESOURCE = "node:__internal_head__"
"""The custom resource Ray gives the head node alone: a sliver of it pins the actor there."""
CALL_TIMEOUT_S = 60.0
"""Longest wait for one call (the actor's SQLite waits up to ``cache_timeout_s`` for its lock)."""
STORE_COPY_TIMEOUT_S = 600.0
"""Longest wait for the actor's pull from the state store (a fresh head node reads every segment)."""


class CacheOwner:
    """The actor: a ``ResponseCache`` on the head node, answering the replicas of every node.

    Threaded (``max_concurrency``): each call runs on a thread with its own SQLite connection,
    writers serialised by SQLite's lock, as replicas on one machine share the file today.
    """

    def __init__(self, path: str, timeout_s: float) -> None:
        self.cache = ResponseCache(Path(path), timeout_s=timeout_s)

    def where(self) -> tuple[str, str]:
        """The file and the node it lives on."""
        return str(self.cache.path), ray.get_runtime_context().get_node_id()

    def get_many(self, keys: list[str]) -> dict[str, ModelResponse]:
        return self.cache.get_many(keys)

    def batch_answers(self, batch: str, keys: list[str]) -> dict[str, ModelResponse]:
        return self.cache.batch_answers(batch, keys)

    def look_up(
        self, batch: str | None, keys: list[str], fresh: bool
    ) -> tuple[dict[str, ModelResponse], dict[str, ModelResponse]]:
        paid = self.cache.batch_answers(batch, keys) if batch is not None else {}
        return paid, {} if fresh else self.cache.get_many([key for key in keys if key not in paid])

    def put_many(self, items: list[tuple[str, ModelResponse]], batch: str | None) -> int:
        return self.cache.put_many(items, batch=batch)

    def size(self) -> int:
        return len(self.cache)

    def copy_with_store(self, uri: str, direction: Direction) -> int:
        """Push the file's new entries to the state store, or pull what it lacks (``cache_store.py``)."""
        return copy_with_store(self.cache.path, uri, direction, timeout_s=self.cache.timeout_s)


def ensure_cluster_cache(path: str, timeout_s: float) -> str:
    """Start the cluster's cache actor on the head node unless it runs; returns its name.

    The first driver's ``path`` (resolved on the head node) is the cluster's cache for as long as
    the actor lives (``semray down`` or the cluster's end); a later driver naming another file is
    told so in the log and shares the running one (entries are content-addressed: sharing is safe).
    """
    owner: Any = ray.remote(CacheOwner)
    handle = owner.options(
        name=CLUSTER_CACHE_NAME,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        num_cpus=0,
        resources={HEAD_NODE_RESOURCE: 0.001},
        max_concurrency=16,
        max_restarts=-1,  # a crashed owner restarts on the head node, reopening the same file
    ).remote(path, timeout_s)
    held, node = ray.get(handle.where.remote(), timeout=CALL_TIMEOUT_S)
    if held != str(Path(path).expanduser().resolve()):
        log.info("response_cache_shared", path=path, cluster_cache=held, node=node)
    return CLUSTER_CACHE_NAME


def cluster_cache_status() -> dict[str, object] | None:
    """The running cache actor's file, node and entries (``semray serve status``); None when none runs."""
    try:
        handle = ray.get_actor(CLUSTER_CACHE_NAME, namespace=NAMESPACE)
        found: list[Any] = ray.get([handle.where.remote(), handle.size.remote()], timeout=CALL_TIMEOUT_S)
        where, entries = found
    except (ValueError, ray.exceptions.RayError):
        return None
    return {"path": where[0], "node": where[1], "entries": entries, "actor": CLUSTER_CACHE_NAME}


def copy_cache_with_store(uri: str, path: str, actor: str | None, direction: Direction, timeout_s: float) -> int:
    """Copy the replicas' cache with the state store at ``uri`` (``cache_store.py``): in the cluster's cache
    actor, which owns the head node's file, when ``actor`` names it; else the file at ``path`` on this node.
    Returns the entries moved; 0 when it failed (logged: the run goes on without the copy)."""
    if actor is None:
        return copy_with_store(Path(path), uri, direction, timeout_s=timeout_s)
    try:
        handle = ray.get_actor(actor, namespace=NAMESPACE)
    except ValueError:  # none runs (no generative tier started here): it holds nothing to copy
        log.debug("response_cache_store_skipped", actor=actor, direction=direction)
        return 0
    try:
        # A pull waits (the tiers answer from what it brings); a push that runs long goes on in the actor.
        timeout = STORE_COPY_TIMEOUT_S if direction == "pull" else CALL_TIMEOUT_S
        moved: Any = ray.get(handle.copy_with_store.remote(uri, direction), timeout=timeout)
    except ray.exceptions.RayError as error:
        log.warning(
            "response_cache_store_failed",
            direction=direction,
            actor=actor,
            uri=uri_for_logs(uri),
            error=f"{type(error).__name__}: {error}"[:300],
        )
        return 0
    return int(moved)


class ClusterResponseCache:
    """A replica's side of the cluster's cache actor, with ``ResponseCache``'s methods.

    ``fresh`` (a probe's cache, as ``WriteThroughCache``): every lookup misses, so each answer is a
    real model call; answers are still stored and a lost attempt's paid answers still read back.
    """

    def __init__(self, name: str, *, fresh: bool = False) -> None:
        self.name = name
        self.fresh = fresh
        self._handle: Any = None
        self._failure: str | None = None
        self._lock = threading.Lock()

    @property
    def failure(self) -> str | None:
        return self._failure

    @property
    def available(self) -> bool:
        return self._failure is None

    def get_many(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        if self.fresh or not keys:
            return {}
        found: dict[str, ModelResponse] | None = self._call("get_many", list(keys))
        return found or {}

    def batch_answers(self, batch: str, keys: Sequence[str]) -> dict[str, ModelResponse]:
        found: dict[str, ModelResponse] | None = self._call("batch_answers", batch, list(keys)) if keys else {}
        return found or {}

    def look_up(
        self, batch: str | None, keys: Sequence[str]
    ) -> tuple[dict[str, ModelResponse], dict[str, ModelResponse]]:
        """``ResponseCache.look_up`` in one actor call (a batch's reads cost one round trip)."""
        found: tuple[dict[str, ModelResponse], dict[str, ModelResponse]] | None = (
            self._call("look_up", batch, list(keys), self.fresh) if keys else None
        )
        return found or ({}, {})

    def put_many(self, items: Iterable[tuple[str, ModelResponse]], *, batch: str | None = None) -> int:
        answers = list(items)
        added: int | None = self._call("put_many", answers, batch) if answers else 0
        return added or 0

    def close(self) -> None:
        self._handle = None  # the actor is the cluster's: it stays

    def _call(self, method: str, *args: Any) -> Any:
        if self._failure is not None:
            return None
        try:
            if self._handle is None:
                self._handle = ray.get_actor(self.name, namespace=NAMESPACE)
            return ray.get(getattr(self._handle, method).remote(*args), timeout=CALL_TIMEOUT_S)
        except (ValueError, ray.exceptions.RayError) as error:
            # A cache that cannot be reached is a miss, never a failed batch (as ResponseCache's file).
            with self._lock:
                first, self._failure = self._failure is None, f"{method} failed: {type(error).__name__}: {error}"
            if first:
                log.warning(
                    "response_cache_unavailable",
                    actor=self.name,
                    operation=method,
                    error=f"{type(error).__name__}: {error}"[:300],
                    hint="answers are neither cached nor reused by this replica; is the head node up?",
                )
            return None

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "fresh": self.fresh}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"], fresh=state["fresh"])  # type: ignore[misc]
