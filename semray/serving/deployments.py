"""The tiers as Ray Serve applications on the connected local Ray, and picklable handles to them.

Each tier is its own Serve application ``<prefix>-<tier>`` (so one can be redeployed without the
others), deployed without an HTTP proxy (callers use handles), each replica reserving a fraction
of a CPU so that all tiers plus the actor pools calling them fit ``num_cpus=2``.

>>> connect(settings)  # doctest: +SKIP
>>> handles = start_tiers(ServingConfig(simulator=sim_config), settings)  # doctest: +SKIP
>>> handles.generate("small", [ModelRequest(prompt="...")])  # doctest: +SKIP
>>> handles.embed(["a text"]).shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import ray
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, RayServeException

from semray.log import get_logger
from semray.serving.backends.base import build_backend
from semray.serving.backends.embedder import SentenceEmbedder
from semray.serving.cache import ResponseCache
from semray.serving.config import TIER_NAMES, ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.errors import ServingConfigError, ServingError, TiersNotRunningError
from semray.serving.tier import ModelTier
from semray.cluster.loopback import bind_serve_grpc_to_loopback
from semray.settings import Settings


bind_serve_grpc_to_loopback()  # in Serve replicas, which import this module to build the tiers
log = get_logger(__name__)
T = TypeVar("T")
_RETRYABLE = (ActorDiedError, ActorUnavailableError, RayActorError, DeploymentUnavailableError)


class TierServer:
    """Serve deployment of one generative tier (any backend) with its cache."""

    def __init__(self, tier: str, config: ServingConfig, cache_path: str | None, digest: str) -> None:
        tier_config = config.tier(tier)
        cache = ResponseCache(Path(cache_path)) if cache_path else None
        self._tier = ModelTier(tier, tier_config, build_backend(tier_config, config), cache)
        self._digest = digest

    async def generate(self, requests: list[ModelRequest]) -> list[ModelResponse]:
        return await self._tier.generate(requests)

    def config_digest(self) -> str:
        return self._digest


class EmbedderServer:
    """Serve deployment of the sentence-transformers embedder."""

    def __init__(self, config: ServingConfig, digest: str) -> None:
        self._embedder = SentenceEmbedder(config.embedding)
        self._digest = digest

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed(texts)

    def config_digest(self) -> str:
        return self._digest


def config_digest(config: ServingConfig, cache_path: str | None) -> str:
    """Identifies a deployed configuration (in-process simulator tables by shape and content hash)."""
    parts = [config.model_dump_json(), str(cache_path)]
    if config.simulator is not None:
        for name, spec in sorted(config.simulator.datasets.items()):
            for table in (spec.table, spec.labels_table):
                if table is not None:
                    parts.append(f"{name}:{table.num_rows}:{table.schema}:{_table_hash(table)}")
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def _table_hash(table: Any) -> str:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


@dataclass
class TierHandles:
    """Picklable access to the deployed tiers; resolves Serve handles lazily in each process.

    ``generate`` sends one batch per call and waits; when a replica dies mid-batch the whole batch
    is sent again (up to ``retries`` times). Only the attempt that returns is counted, so usage is
    never counted twice (responses the dead replica already cached come back as cache hits).
    """

    apps: dict[str, str]
    retries: int = 2
    timeout_s: float | None = None
    _handles: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"apps": self.apps, "retries": self.retries, "timeout_s": self.timeout_s, "_handles": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _handle(self, tier: str) -> Any:
        if tier not in self.apps:
            raise ServingConfigError(f"unknown tier {tier!r}; deployed tiers: {', '.join(self.apps)}")
        if tier not in self._handles:
            try:
                self._handles[tier] = serve.get_app_handle(self.apps[tier])
            except RayServeException as error:
                raise TiersNotRunningError(
                    f"tier {tier!r} (Serve app {self.apps[tier]!r}) is not running: {error}; call start_tiers first"
                ) from None
        return self._handles[tier]

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        """Answer a batch on ``tier`` (``small`` or ``large``), blocking; one round trip per batch."""
        if tier == "embedding":
            raise ServingConfigError("the embedding tier embeds texts; call embed(texts) instead of generate")
        batch = list(requests)
        if not batch:
            return []
        result: list[ModelResponse] = self._retrying(
            tier, lambda: self._handle(tier).generate.remote(batch).result(timeout_s=self.timeout_s)
        )
        return result

    async def agenerate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        """``generate`` for async callers."""
        if tier == "embedding":
            raise ServingConfigError("the embedding tier embeds texts; call embed(texts) instead of generate")
        batch = list(requests)
        for attempt in range(self.retries + 1):
            try:
                result: list[ModelResponse] = await self._handle(tier).generate.remote(batch)
                return result
            except _RETRYABLE as error:
                self._note_retry(tier, attempt, error, len(batch))
                await asyncio.sleep(0.2 * (attempt + 1))
        return []  # unreachable: _note_retry raises on the last attempt

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, d) L2-normalised vectors of ``texts``."""
        batch = list(texts)
        result: np.ndarray = self._retrying(
            "embedding", lambda: self._handle("embedding").embed.remote(batch).result(timeout_s=self.timeout_s)
        )
        return result

    def _retrying(self, tier: str, call: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return call()
            except _RETRYABLE as error:
                self._note_retry(tier, attempt, error, -1)
                attempt += 1
                time.sleep(0.2 * attempt)

    def _note_retry(self, tier: str, attempt: int, error: BaseException, rows: int) -> None:
        if attempt >= self.retries:
            raise ServingError(
                f"tier {tier!r} failed {attempt + 1} times: {type(error).__name__}: {error}; "
                "its replica keeps dying (see the Ray logs for the replica's error)"
            ) from error
        self._handles.pop(tier, None)
        log.warning("tier_batch_retry", tier=tier, attempt=attempt + 1, error=type(error).__name__, rows=rows)


def start_tiers(
    config: ServingConfig | None = None, settings: Settings | None = None, tiers: Sequence[str] = TIER_NAMES
) -> TierHandles:
    """Deploy the tiers on the connected Ray (call ``semray.cluster.connect.connect`` first).

    Idempotent: a tier already running with the same configuration is left alone; a changed one
    is redeployed. Settings only place the default cache under the state folder; ``tiers``
    deploys a subset (e.g. no embedder for a run without vector operators).
    """
    config = config or ServingConfig()
    if not ray.is_initialized():
        raise ServingError("Ray is not connected; call semray.cluster.connect.connect(settings) before start_tiers")
    cache = config.cache_path(settings.state_path if settings is not None else None)
    cache_path = str(cache.expanduser().resolve()) if cache is not None else None
    digest = config_digest(config, cache_path)
    vllm_tiers = [config.tier(tier) for tier in tiers if config.tier(tier).backend == "vllm"]
    # An HTTP proxy only when asked: vLLM tiers are reached through ray.serve.llm's OpenAI app.
    proxy = "HeadOnly" if vllm_tiers else "Disabled"
    serve.start(proxy_location=proxy, http_options={"host": "127.0.0.1", "port": config.vllm_http_port})
    if vllm_tiers:
        from semray.serving.backends.vllm import build_vllm_app

        serve.run(build_vllm_app(vllm_tiers), name=f"{config.app_prefix}-vllm", route_prefix="/")
        log.info("vllm_engines_deployed", models=[tier.model for tier in vllm_tiers], port=config.vllm_http_port)
    running = serve.status().applications
    for tier in tiers:
        config.tier(tier)  # unknown names fail before anything is deployed
    apps = {tier: config.app_name(tier) for tier in tiers}
    for tier, app in apps.items():
        if app in running and running[app].status == "RUNNING" and _deployed_digest(app) == digest:
            log.info("tier_already_running", tier=tier, app=app)
            continue
        started = time.perf_counter()
        serve.run(
            _application(tier, config, cache_path, digest),
            name=app,
            route_prefix=None,
            # semray logs its own events; Serve's per-request access log would drown a run's output.
            logging_config={"enable_access_log": False, "log_level": "WARNING"},
        )
        tier_config = config.tier(tier)
        log.info(
            "tier_deployed",
            tier=tier,
            app=app,
            backend=tier_config.backend,
            model=tier_config.model,
            seconds=round(time.perf_counter() - started, 2),
        )
    return TierHandles(apps=apps, retries=config.handle_retries)


def _application(tier: str, config: ServingConfig, cache_path: str | None, digest: str) -> Any:
    tier_config = config.tier(tier)
    options: dict[str, Any] = {
        "name": f"{tier}-{tier_config.backend}",
        "num_replicas": tier_config.replicas,
        "max_ongoing_requests": tier_config.max_ongoing_requests,
        "ray_actor_options": {"num_cpus": tier_config.num_cpus, "num_gpus": tier_config.num_gpus},
        "health_check_period_s": 5,
    }
    if tier == "embedding":
        if tier_config.backend != "sentence_transformers":
            raise ServingConfigError(
                f"the embedding tier needs backend 'sentence_transformers', got {tier_config.backend!r}"
            )
        embedder: Any = serve.deployment(EmbedderServer)
        return embedder.options(**options).bind(config, digest)
    server: Any = serve.deployment(TierServer)
    return server.options(**options).bind(tier, config, cache_path, digest)


def _deployed_digest(app: str) -> str | None:
    try:
        digest: str = serve.get_app_handle(app).config_digest.remote().result(timeout_s=30)
    except (RayServeException, *_RETRYABLE, TimeoutError):
        return None
    return digest


def stop_tiers(prefix: str = "semray") -> None:
    """Delete every tier application named ``<prefix>-*`` (Serve itself keeps running)."""
    if not ray.is_initialized():
        return
    for app in list(serve.status().applications):
        if app.startswith(f"{prefix}-"):
            serve.delete(app)
            log.info("tier_stopped", app=app)


def tier_status(prefix: str = "semray") -> dict[str, str]:
    """Serve application status of each tier app, e.g. ``{"semray-small": "RUNNING"}``."""
    if not ray.is_initialized():
        return {}
    applications = serve.status().applications.items()
    return {
        app: str(getattr(status.status, "value", status.status))
        for app, status in applications
        if app.startswith(f"{prefix}-")
    }
