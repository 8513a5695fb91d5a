"""The tiers as Ray Serve applications on the connected Ray, and picklable handles to them.

Each tier is its own Serve application ``<prefix>-<tier>`` (so one can be redeployed without the
others), deployed without an HTTP proxy (callers use handles), each replica reserving a fraction
of a CPU so that all tiers plus the actor pools calling them fit ``num_cpus=2``.

``start_tiers`` reuses what is deployed: an app running the same tier configuration (its digest
is in the deployment's name, see ``semray.serving.deployed``) is used as it is, whoever deployed
it (``semray serve up``, another run). An app under the same name with another configuration is
replaced only when this driver deployed it for an earlier run; otherwise (``serve up``'s tiers,
another driver's) ``TierConfigMismatchError`` says what runs there and what was wanted. Before
deploying, the replicas' CPUs and GPUs are checked against what the cluster has free
(``TierResourcesError``, instead of Serve waiting forever), and the wait for RUNNING has a
deadline (``ServingConfig.deploy_timeout_s``, ``TierDeployError``).

>>> connect(settings)  # doctest: +SKIP
>>> handles = start_tiers(ServingConfig(simulator=sim_config), settings)  # doctest: +SKIP
>>> handles.generate("small", [ModelRequest(prompt="...")])  # doctest: +SKIP
>>> handles.embed(["a text"]).shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import serve

from semray.cluster.connect import names_semray_error
from semray.cluster.loopback import bind_serve_grpc_to_loopback
from semray.log import get_logger
from semray.serving.backends.base import build_backend
from semray.serving.backends.embedder import SentenceEmbedder
from semray.serving.backends.simulated import simulator_identity
from semray.serving.cache import AnswerCache, ResponseCache
from semray.serving.cache_store import CachePusher
from semray.serving.capacity import check_capacity, read_cluster, tier_needs
from semray.serving.cluster_cache import (
    CLUSTER_CACHE_NAME,
    ClusterResponseCache,
    copy_cache_with_store,
    ensure_cluster_cache,
)
from semray.serving.config import TIER_NAMES, Prices, ServingConfig, TierConfig
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.deployed import (
    DeployedApp,
    deployed_apps,
    deployment_name,
    describe_app,
    wait_deleted,
    wait_running,
)
from semray.serving.errors import ServingConfigError, ServingError, TierConfigMismatchError
from semray.serving.handles import TierHandles
from semray.serving.simulator import SimulatorConfig
from semray.serving.tier import ModelTier
from semray.settings import Settings

bind_serve_grpc_to_loopback()  # in Serve replicas, which import this module to build the tiers
log = get_logger(__name__)
__all__ = ["TierHandles", "start_tiers", "stop_tiers", "tier_digest", "tier_status"]

_REPLACEABLE: dict[tuple[str, str], str] = {}
"""(Ray job id, app) -> digest of the tier apps this driver deployed for a run (not ``serve up``):
the only apps a later ``start_tiers`` with another configuration may replace."""


SERVE_LOGGER = "ray.serve"
"""Serve's logger in a replica: a console handler (which Ray forwards to the driver's terminal)
and a buffered handler writing the replica's log file."""


def quiet_reported_failures(logger: logging.Logger | None = None) -> None:
    """In a replica: keep the stack trace of a request that failed with a ``SemrayError`` off the
    console, in the replica's log file only. Serve logs every failed request ("Request failed.")
    with its trace on each handler; the error itself goes back to the caller, which raises it with
    a message naming the cause (an endpoint's URL, status and attempts), so on the driver's
    terminal the forwarded trace (dozens of lines per failed batch) only buried that one line.
    Failures that are not semray's keep their trace on the console.

    >>> import io
    >>> logger, console = logging.getLogger("doctest.serve"), io.StringIO()
    >>> logger.addHandler(logging.StreamHandler(console))
    >>> quiet_reported_failures(logger)
    >>> try:
    ...     raise ServingConfigError("environment variable KEY is not set")
    ... except ServingConfigError:
    ...     logger.exception("Request failed.")
    >>> console.getvalue()
    ''
    """
    target = logger if logger is not None else logging.getLogger(SERVE_LOGGER)
    for handler in target.handlers:
        console = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
        if console and _not_reported not in handler.filters:
            handler.addFilter(_not_reported)


def _not_reported(record: logging.LogRecord) -> bool:
    """False for a record whose exception is (or was caused by) a ``SemrayError``."""
    return not (record.exc_info and names_semray_error(record.exc_info[1]))


class WriteThroughCache(ResponseCache):
    """The response cache for a fresh batch (a probe): every lookup misses, so each answer is a
    real model call; answers are still stored, and a lost attempt's paid answers still read back."""

    def get_many(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        return {}


class TierServer:
    """Serve deployment of one generative tier (any backend) with its cache."""

    def __init__(
        self,
        tier: str,
        config: ServingConfig,
        cache_path: str | None,
        described: dict[str, Any],
        cache_actor: str | None = None,
    ) -> None:
        """``cache_actor``: the cluster's cache actor (``cluster_cache.py``), used instead of the file
        at ``cache_path`` on this replica's node."""
        quiet_reported_failures()
        tier_config = config.tier(tier)
        backend = build_backend(tier_config, config)
        timeout = config.cache_timeout_s
        cache: AnswerCache | None = None
        fresh_cache: AnswerCache | None = None
        if cache_actor is not None:
            cache, fresh_cache = ClusterResponseCache(cache_actor), ClusterResponseCache(cache_actor, fresh=True)
        elif cache_path:
            cache = ResponseCache(Path(cache_path), timeout_s=timeout)
            fresh_cache = WriteThroughCache(Path(cache_path), timeout_s=timeout)
        self._tier = ModelTier(tier, tier_config, backend, cache)
        self._fresh = ModelTier(tier, tier_config, backend, fresh_cache)
        self._described = described

    async def generate(
        self, requests: list[ModelRequest], fresh: bool = False, batch: str | None = None
    ) -> list[ModelResponse]:
        """Answer a batch; ``fresh`` skips cache reads, ``batch`` is its id across attempts (see ``TierHandles``)."""
        return await (self._fresh if fresh else self._tier).generate(requests, batch=batch)

    def describe(self) -> dict[str, Any]:
        """What this replica serves: tier, backend, model, digest, who deployed it, resources."""
        return self._described


class EmbedderServer:
    """Serve deployment of the sentence-transformers embedder."""

    def __init__(self, config: ServingConfig, described: dict[str, Any]) -> None:
        quiet_reported_failures()
        self._embedder = SentenceEmbedder(config.embedding)
        self._described = described

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed(texts)

    def describe(self) -> dict[str, Any]:
        return self._described


def check_key_variables(config: ServingConfig, tiers: Sequence[str]) -> None:
    """Before deploying on the Ray this process started: each endpoint tier's API-key variable is
    set here, since its replicas inherit this process's environment. A missing one would fail the
    replica's constructor twice, a Serve controller's stack trace for each on the console, before
    the same message came back as ``TierDeployError``; now it is one error and nothing deployed.
    (On a cluster joined by address the replicas have their nodes' environment: they check it.)

    >>> from semray.serving.config import TierConfig
    >>> tier = TierConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env="SEMRAY_DOC_UNSET")
    >>> check_key_variables(ServingConfig(large=tier), ["small", "large"])
    Traceback (most recent call last):
    ...
    semray.serving.errors.ServingConfigError: environment variable SEMRAY_DOC_UNSET (the API key of tier 'large' ...
    """
    for tier in tiers:
        tier_config = config.tier(tier)
        variable = tier_config.api_key_env
        if tier_config.backend == "openai" and variable and not os.environ.get(variable):
            raise ServingConfigError(
                f"environment variable {variable} (the API key of tier {tier!r} at {tier_config.base_url}) is not "
                "set; the local Ray's replicas read it from this command's environment: export it before the "
                "command (nothing was deployed)"
            )


def cache_actor_name(config: ServingConfig, cache_path: str | None) -> str | None:
    """The cluster's cache actor the replicas use (``cluster_cache.py``), None for the file on their node."""
    return CLUSTER_CACHE_NAME if cache_path is not None and _cache_on_cluster(config) else None


@contextlib.contextmanager
def response_cache_in_store(config: ServingConfig | None, settings: Settings) -> Iterator[None]:
    """While a run runs, copy the tiers' new cache entries to the state store (``Settings.state_uri``)
    every ``Settings.cache_sync_s`` and once when it ends, however it ends; ``start_tiers`` takes them
    back on a machine whose cache lacks them. Nothing without a state URI or a cache."""
    config = config or ServingConfig()
    uri = settings.state_store_uri
    cache = config.cache_path(settings.state_path)
    if uri is None or cache is None:
        yield
        return
    path = str(cache.expanduser().resolve())

    def push() -> int:
        # Where the tiers cache is known once Ray is up; before that, only this node's file can hold entries.
        actor = cache_actor_name(config, path) if ray.is_initialized() else None
        return copy_cache_with_store(uri, path, actor, "push", config.cache_timeout_s)

    pusher = CachePusher(push, settings.cache_sync_s).start()
    try:
        yield
    finally:
        pusher.close()


def _cache_on_cluster(config: ServingConfig) -> bool:
    """Whether the replicas share the head node's cache through its actor (``ServingConfig.cache_scope``):
    on 'auto', when this process joined a cluster rather than starting Ray, or Ray has several nodes."""
    if config.cache_scope != "auto":
        return config.cache_scope == "cluster"
    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return not _started_here() or len([node for node in listed if node.get("Alive")]) > 1


def _started_here() -> bool:
    """Whether this process started the Ray it is connected to (the embedded local cluster), so
    that the tiers' replicas run with this process's environment."""
    node = getattr(ray._private.worker, "_global_node", None)  # no public API says who started Ray
    return bool(getattr(node, "head", False))


def tier_digest(config: ServingConfig, tier: str, cache_path: str | None, cache_actor: str | None = None) -> str:
    """Identifies what a tier's deployment serves: its ``TierConfig``, the cache it writes, and for
    a simulated tier the simulator (settings, and its tables and files by content). Options that
    change nothing in the replica (``app_prefix``, ``handle_retries``, ``deploy_timeout_s``, the
    other tiers) are left out, so a run that needs only ``small`` reuses ``serve up``'s.

    >>> tier_digest(ServingConfig(), "small", None) == tier_digest(ServingConfig(app_prefix="x"), "small", None)
    True
    """
    tier_config = config.tier(tier)
    parts: dict[str, Any] = {
        "tier": tier,
        "config": tier_config.model_dump(mode="json"),
        # Replicas using the cluster's cache actor never open the driver's file: a driver with another
        # state folder then reuses the running tiers instead of meeting TierConfigMismatchError.
        "cache": None if cache_actor is not None else cache_path,
        "cache_actor": cache_actor,
        "cache_timeout_s": config.cache_timeout_s,
    }
    if tier_config.backend == "simulated":
        simulator = config.simulator or SimulatorConfig()
        parts["simulator"] = simulator.model_dump(mode="json")
        if tier_config.model in simulator.models:
            parts["answers"] = simulator_identity(simulator, tier_config.model)
    if tier_config.backend == "vllm":
        parts["vllm_http_port"] = config.vllm_http_port
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def start_tiers(
    config: ServingConfig | None = None,
    settings: Settings | None = None,
    tiers: Sequence[str] = TIER_NAMES,
    *,
    pinned: bool = False,
) -> TierHandles:
    """Deploy the tiers on the connected Ray (call ``semray.cluster.connect.connect`` first), or
    reuse the ones running with the same configuration.

    Settings only place the default cache under the state folder; ``tiers`` deploys a subset
    (e.g. no embedder for a run without vector operators). ``pinned`` (``semray serve up``): no
    later ``start_tiers`` with another configuration replaces these apps, not even in this process.
    """
    config = config or ServingConfig()
    if not ray.is_initialized():
        raise ServingError("Ray is not connected; call semray.cluster.connect.connect(settings) before start_tiers")
    for tier in tiers:
        config.tier(tier)  # unknown names fail before anything is deployed
    cache = config.cache_path(settings.state_path if settings is not None else None)
    cache_path = str(cache.expanduser().resolve()) if cache is not None else None
    apps = {tier: config.app_name(tier) for tier in tiers}
    cache_actor = cache_actor_name(config, cache_path)
    if cache_path is not None and any(tier != "embedding" for tier in tiers):
        if cache_actor is not None:
            ensure_cluster_cache(cache_path, config.cache_timeout_s)
        if settings is not None and settings.state_store_uri is not None:
            # A fresh machine or cluster (an empty cache) takes the answers runs elsewhere copied to the store.
            copy_cache_with_store(settings.state_store_uri, cache_path, cache_actor, "pull", config.cache_timeout_s)
    digests = {tier: tier_digest(config, tier, cache_path, cache_actor) for tier in tiers}
    vllm_tiers = [config.tier(tier) for tier in tiers if config.tier(tier).backend == "vllm"]
    # An HTTP proxy only when asked: vLLM tiers are reached through ray.serve.llm's OpenAI app.
    # Serve's INFO notices (started, deploying, adding a replica) reach the console of every run, in
    # the driver and forwarded from its controller: semray says what it deploys (`serve status`).
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    serve.start(
        proxy_location="HeadOnly" if vllm_tiers else "Disabled",
        http_options={"host": "127.0.0.1", "port": config.vllm_http_port},
        logging_config={"enable_access_log": False, "log_level": "WARNING"},
    )
    job = ray.get_runtime_context().get_job_id()
    running = deployed_apps()
    if deleting := [app for app in apps.values() if app in running and running[app].status == "DELETING"]:
        wait_deleted(deleting, config.deploy_timeout_s)  # e.g. right after a deadline deleted them
        running = deployed_apps()
    deploy, waiting, freed = _plan(config, apps, digests, running, job)
    if _started_here():
        check_key_variables(config, [tier for tier in tiers if tier in deploy])
    vllm_app = f"{config.app_prefix}-vllm"
    # The engines are redeployed with their tiers' clients, or when their app is not healthy.
    vllm_state = running.get(vllm_app)
    deploy_vllm = bool(vllm_tiers) and (
        vllm_state is None or not vllm_state.healthy or any(config.tier(tier).backend == "vllm" for tier in deploy)
    )
    replaced = {apps[tier] for tier in deploy}
    holders = [
        f"{state.app} ({state.running_replicas} running)"
        for state in running.values()
        if state.app not in replaced and state.running_replicas
    ]
    to_deploy = {tier: apps[tier] for tier in tiers if tier in deploy}
    check_capacity(tier_needs(config, to_deploy, vllm_app if deploy_vllm else None), read_cluster(freed, holders))
    targets = [
        serve.RunTarget(
            _application(
                tier, config, cache_path, _described(config, tier, apps[tier], digests[tier], pinned), cache_actor
            ),
            name=apps[tier],
            route_prefix=None,
            # semray logs its own events; Serve's per-request access log would drown a run's output.
            logging_config={"enable_access_log": False, "log_level": "WARNING"},
        )
        for tier in tiers
        if tier in deploy
    ]
    if deploy_vllm:
        from semray.serving.backends.vllm import build_vllm_app

        targets.insert(0, serve.RunTarget(build_vllm_app(vllm_tiers), name=vllm_app, route_prefix="/"))
    started = time.perf_counter()
    if targets:
        serve.run_many(targets, wait_for_applications_running=False)
    owned = [target.name for target in targets]
    wait_running([*owned, *waiting], config.deploy_timeout_s, owned=owned)
    for tier, app in apps.items():
        if pinned:
            _REPLACEABLE.pop((job, app), None)
        elif tier in deploy and (app not in running or (job, app) in _REPLACEABLE):
            # New, or this driver's own: a same-configuration redeploy of `serve up`'s stays pinned.
            _REPLACEABLE[(job, app)] = digests[tier]
        tier_config = config.tier(tier)
        event = "tier_deployed" if tier in deploy else "tier_already_running"
        log.info(
            event,
            tier=tier,
            app=app,
            backend=tier_config.backend,
            model=tier_config.model,
            digest=digests[tier],
            seconds=round(time.perf_counter() - started, 2),
        )
    if deploy_vllm:
        log.info("vllm_engines_deployed", models=[tier.model for tier in vllm_tiers], port=config.vllm_http_port)
    return TierHandles(apps=apps, retries=config.handle_retries, embedding_prices=config.embedding.prices or Prices())


def _plan(
    config: ServingConfig,
    apps: Mapping[str, str],
    digests: Mapping[str, str],
    running: Mapping[str, DeployedApp],
    job: str,
) -> tuple[set[str], list[str], dict[str, float]]:
    """Which tiers to deploy, which apps to wait for (same configuration, still deploying), and
    the resources the apps about to be replaced give back; raises on a foreign configuration."""
    deploy: set[str] = set()
    waiting: list[str] = []
    freed = {"CPU": 0.0, "GPU": 0.0}
    for tier, app in apps.items():
        state = running.get(app)
        if state is None:
            deploy.add(tier)
        elif state.digest == digests[tier]:
            if state.status == "DEPLOYING":
                waiting.append(app)  # someone deploys this very configuration: wait for it
            elif state.status != "RUNNING":
                deploy.add(tier)  # failed or unhealthy: deploy the same configuration again
        elif state.digest is not None and _REPLACEABLE.get((job, app)) == state.digest:
            deploy.add(tier)  # this driver's own earlier run: replace it
            described = describe_app(app) if state.running_replicas else None
            if described is not None:
                freed["CPU"] += state.running_replicas * float(described.get("num_cpus", 0.0))
                freed["GPU"] += state.running_replicas * float(described.get("num_gpus", 0.0))
        else:
            raise _mismatch(config, tier, app, digests[tier], state)
    return deploy, waiting, freed


def _mismatch(config: ServingConfig, tier: str, app: str, digest: str, state: DeployedApp) -> TierConfigMismatchError:
    tier_config = config.tier(tier)
    wanted = f"{tier_config.backend}:{tier_config.model} (digest {digest})"
    described = describe_app(app) if state.running_replicas else None
    if described is not None:
        deployed = f"{described.get('backend')}:{described.get('model')} (digest {state.digest})"
        by = f", deployed by {described.get('deployed_by')} from {described.get('process')}"
    elif state.digest is not None:
        deployed, by = f"{state.backend} (digest {state.digest})", ""
    else:
        deployed, by = "a deployment semray does not recognise (another program, or an older semray)", ""
    prefix = config.app_prefix
    return TierConfigMismatchError(
        f"Serve app {app!r} already serves tier {tier!r} with another configuration: deployed {deployed}{by}, "
        f"status {state.status}; wanted {wanted}. It was left running. Use the same model profile as the "
        f"deployed tiers (`semray serve status` shows them), take them down with `semray serve down --prefix "
        f"{prefix}`, or give this run another app_prefix in its model profile",
        app=app,
        tier=tier,
        deployed=deployed,
        wanted=wanted,
    )


def _described(config: ServingConfig, tier: str, app: str, digest: str, pinned: bool) -> dict[str, Any]:
    """What the replica's ``describe()`` answers (``semray serve status`` shows it)."""
    tier_config = config.tier(tier)
    return {
        "tier": tier,
        "app": app,
        "backend": tier_config.backend,
        "model": tier_config.model,
        "base_url": tier_config.base_url,
        "digest": digest,
        "deployed_by": "semray serve up" if pinned else "a semray run",
        "process": f"pid {os.getpid()} on {socket.gethostname()}",
        "deployed_at": time.time(),
        "replicas": tier_config.replicas,
        "num_cpus": tier_config.num_cpus,
        "num_gpus": 0.0 if tier_config.backend == "vllm" else tier_config.num_gpus,
    }


def _application(
    tier: str, config: ServingConfig, cache_path: str | None, described: dict[str, Any], cache_actor: str | None
) -> Any:
    tier_config = config.tier(tier)
    options: dict[str, Any] = {
        "name": deployment_name(tier, tier_config.backend, described["digest"]),
        "num_replicas": tier_config.replicas,
        "max_ongoing_requests": tier_config.max_ongoing_requests,
        "ray_actor_options": _actor_options(tier_config, described),
        "health_check_period_s": 5,
        # A replica whose constructor fails (a missing model folder or API-key variable) fails for
        # good: Serve's default of 20 tries only delays the error.
        "max_constructor_retry_count": 2,
    }
    if tier == "embedding":
        if tier_config.backend != "sentence_transformers":
            raise ServingConfigError(
                f"the embedding tier needs backend 'sentence_transformers', got {tier_config.backend!r}"
            )
        embedder: Any = serve.deployment(EmbedderServer)
        return embedder.options(**options).bind(config, described)
    server: Any = serve.deployment(TierServer)
    return server.options(**options).bind(tier, config, cache_path, described, cache_actor)


TORCH_BACKENDS = frozenset({"sentence_transformers", "hf"})

CPU_MODEL_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""The environment of a replica that runs a torch model on the CPU. OpenMP's threads otherwise spin
at each barrier while they wait for each other, burning cores the run's actors and other tiers
need: two MiniLM replicas side by side on 2 shared cores, two callers each, embedded 1.2x more
texts/s when their threads slept (``benchmarks/serving.py``, ``wait_policy``). Set before the
replica's process starts: OpenMP reads it once, when torch loads."""


def _actor_options(tier_config: TierConfig, described: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"num_cpus": described["num_cpus"], "num_gpus": described["num_gpus"]}
    if tier_config.backend in TORCH_BACKENDS and tier_config.device == "cpu":
        options["runtime_env"] = {"env_vars": dict(CPU_MODEL_ENV)}
    return options


def stop_tiers(prefix: str = "semray") -> None:
    """Delete every tier application named ``<prefix>-*`` (Serve itself keeps running)."""
    if not ray.is_initialized():
        return
    stop_apps([app for app in serve.status().applications if app.startswith(f"{prefix}-")])


def stop_apps(apps: Sequence[str]) -> None:
    """Delete these Serve applications (the ones that exist), e.g. the tiers a failed ``serve up`` deployed."""
    if not ray.is_initialized():
        return
    existing = set(serve.status().applications)
    for app in apps:
        if app in existing:
            serve.delete(app)
            for key in [key for key in _REPLACEABLE if key[1] == app]:
                del _REPLACEABLE[key]
            log.info("tier_stopped", app=app)


def tier_status(prefix: str = "semray") -> dict[str, str]:
    """Serve application status of each tier app, e.g. ``{"semray-small": "RUNNING"}``."""
    if not ray.is_initialized():
        return {}
    return {app: state.status for app, state in deployed_apps(prefix).items()}
