"""``semray serve up|down|status``: the library side of the CLI commands.

``serve_up`` deploys the tiers pinned (no run with another configuration replaces them) and then
checks each one with a real call (one probe per generative tier, one embedding) before it
returns: a tier that cannot answer (an endpoint that is down) fails ``serve up`` with its typed
error. Runs on the same cluster with the same model profile reuse these apps (``start_tiers``
finds them by their configuration digest). With the embedded local Ray the apps live as long as
the process, so ``serve_up(..., block=True)`` (or ``hold_tiers``) keeps it alive until interrupted.

>>> handles = serve_up(Settings(), ServingConfig())  # doctest: +SKIP
>>> serve_status(Settings())["healthy"]  # doctest: +SKIP
True
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayError

from semray.cluster.connect import connect
from semray.log import get_logger
from semray.serving.cache import ResponseCache
from semray.serving.cluster_cache import cluster_cache_status
from semray.serving.config import TIER_NAMES, ServingConfig
from semray.serving.contract import ModelRequest, OutputConstraint
from semray.serving.deployed import DeployedApp, deployed_apps, describe_app
from semray.serving.deployments import (
    TierHandles,
    cache_actor_name,
    start_tiers,
    stop_apps,
    stop_tiers,
    tier_digest,
)
from semray.serving.errors import ServingError
from semray.settings import Settings

log = get_logger(__name__)
PROBE = ModelRequest(
    prompt="Reply with the single word OK.", constraint=OutputConstraint.text(), max_tokens=8, request_id="probe"
)
"""The call each generative tier must answer before ``serve up`` says it is ready."""


def serve_up(
    settings: Settings,
    config: ServingConfig | None = None,
    tiers: Sequence[str] = TIER_NAMES,
    *,
    block: bool = False,
    stop: threading.Event | None = None,
    probe: bool = True,
) -> TierHandles:
    """Connect to Ray, deploy (or reuse) the tiers pinned, and probe each one; with ``block`` wait
    (until ``stop`` is set or Ctrl-C) and then take them down. A failed probe raises the tier's
    error (e.g. ``EndpointError`` for an endpoint that is down) after deleting the apps this call
    deployed, so a cluster is not left holding pinned tiers that cannot answer (tiers that were
    already running, another ``serve up``'s, are left to it)."""
    config = config or ServingConfig()
    connect(settings)
    running_before = {app for app, state in deployed_apps(config.app_prefix).items() if state.status == "RUNNING"}
    handles = start_tiers(config, settings, tiers, pinned=True)
    try:
        answered = probe_tiers(handles, tiers) if probe else {}
    except ServingError:
        deployed_now = [app for app in handles.apps.values() if app not in running_before]
        log.info("serve_up_failed", deleted=deployed_now)
        stop_apps(deployed_now)
        raise
    simulated = [name for name in tiers if config.tier(name).backend == "simulated"]
    log.info(
        "serve_up",
        apps=handles.apps,
        probes=answered,
        simulated_tiers=simulated,
        ray_address=settings.ray_address or "embedded",
    )
    if block:
        hold_tiers(config.app_prefix, stop)
    return handles


def probe_tiers(handles: TierHandles, tiers: Sequence[str]) -> dict[str, str]:
    """One real call per tier (cache reads skipped); raises the first tier's error.

    Returns what each answered: ``"ok"``, or a generative tier's per-row error code (the simulator
    has no label for the probe: ``no_label``), which still shows that the tier is serving.
    """
    answered: dict[str, str] = {}
    for tier in tiers:
        try:
            if tier == "embedding":
                handles.embed(["semray probe"])
                answered[tier] = "ok"
            else:
                (response,) = handles.generate(tier, [PROBE], fresh=True)
                answered[tier] = response.error_code or "ok"
        except (ServingError, RayError) as error:
            cause = getattr(error, "cause", None)
            typed = cause if isinstance(cause, ServingError) else error
            log.info("tier_probe_failed", tier=tier, app=handles.apps[tier], error=str(typed)[:300])
            if isinstance(typed, ServingError):
                raise typed from None
            raise ServingError(
                f"tier {tier!r} (Serve app {handles.apps[tier]!r}) failed its probe call: "
                f"{type(error).__name__}: {error}; see the Ray logs of its replica"
            ) from error
    return answered


def hold_tiers(prefix: str, stop: threading.Event | None = None) -> None:
    """Keep this process (and an embedded Ray with it) alive until ``stop`` is set, Ctrl-C or
    SIGTERM, then delete the ``<prefix>-*`` apps. SIGTERM counts as Ctrl-C because a ``serve up``
    run in the background or under a supervisor is stopped with it (a background job ignores
    SIGINT), and on a cluster its pinned apps would otherwise outlive it."""
    event = stop or threading.Event()
    on_main_thread = threading.current_thread() is threading.main_thread()  # where Python takes signals
    previous = signal.signal(signal.SIGTERM, _setter(event)) if on_main_thread else None
    try:
        while not event.wait(timeout=1.0):
            pass
    except KeyboardInterrupt:
        log.info("serve_interrupted")
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        stop_tiers(prefix)


def _setter(event: threading.Event) -> Any:
    """A signal handler that sets ``event``."""

    def on_sigterm(signum: int, frame: object) -> None:
        log.info("serve_terminated")
        event.set()

    return on_sigterm


def serve_down(settings: Settings, prefix: str = "semray") -> list[str]:
    """Delete the tier apps; returns the names that were running. A no-op without a cluster."""
    if not ray.is_initialized() and settings.ray_address is None:
        log.info("serve_down_nothing_running", reason="no Ray address configured and no cluster in this process")
        return []
    connect(settings)
    running = sorted(deployed_apps(prefix))
    stop_tiers(prefix)
    return running


def serve_status(settings: Settings, config: ServingConfig | None = None) -> dict[str, Any]:
    """Where the tiers stand: the Ray connection; each deployed ``<prefix>-*`` app with its status,
    replicas, backend and model as deployed, and whether it matches ``config``; ``healthy`` (every
    deployed app RUNNING with its replicas, and at least one deployed); ``problems`` in words;
    the backends ``config`` names; the cache file and its size."""
    config = config or ServingConfig()
    status: dict[str, Any] = {
        "ray_address": settings.ray_address or "embedded",
        "connected": False,
        "healthy": None,
        "tiers": {},
        "deployed": {},
        "problems": [],
        "backends": {name: f"{config.tier(name).backend}:{config.tier(name).model}" for name in TIER_NAMES},
    }
    cache_path = config.cache_path(settings.state_path)
    actor: str | None = None
    if ray.is_initialized() or settings.ray_address is not None:
        connect(settings)
        status["connected"] = True
        resolved = str(cache_path.expanduser().resolve()) if cache_path is not None else None
        actor = cache_actor_name(config, resolved)
        apps = deployed_apps(config.app_prefix)
        status["tiers"] = {app: state.status for app, state in apps.items()}
        for app, state in apps.items():
            wanted = tier_digest(config, state.tier, resolved, actor) if state.tier is not None else None
            status["deployed"][app] = _deployed_entry(state, wanted)
        status["problems"] = _problems(config.app_prefix, apps, status["deployed"])
        status["healthy"] = bool(apps) and all(state.healthy for state in apps.values())
    status["cache"] = {"enabled": cache_path is not None, "path": str(cache_path) if cache_path else None}
    shared = cluster_cache_status() if actor is not None else None
    if shared is not None:  # the replicas use the head node's file through the cluster's cache actor
        status["cache"].update(shared)
    elif cache_path is not None and cache_path.exists():
        cache = ResponseCache(cache_path, timeout_s=config.cache_timeout_s)
        status["cache"]["entries"] = len(cache)
        if cache.failure is not None:
            status["cache"]["error"] = cache.failure
        cache.close()
    return status


def _deployed_entry(state: DeployedApp, wanted: str | None) -> dict[str, Any]:
    described = describe_app(state.app) if state.running_replicas else None
    entry: dict[str, Any] = {
        "status": state.status,
        "tier": state.tier,
        "backend": state.backend,
        "model": None,
        "digest": state.digest,
        "matches_profile": state.digest is not None and state.digest == wanted,
        "replicas": state.replicas,
    }
    if described is not None:
        entry.update(
            model=described.get("model"),
            base_url=described.get("base_url"),
            replicas_wanted=described.get("replicas"),
            deployed_by=described.get("deployed_by"),
            process=described.get("process"),
        )
    if state.message:
        entry["message"] = state.message
    return entry


def _problems(prefix: str, apps: dict[str, DeployedApp], entries: dict[str, dict[str, Any]]) -> list[str]:
    if not apps:
        return [f"no tier apps named {prefix}-* are deployed; `semray serve up` deploys them"]
    problems: list[str] = []
    for app, state in apps.items():
        if not state.healthy:
            reason = f": {state.message}" if state.message else ""
            problems.append(f"{app} is {state.status} with replicas {state.replicas or 'none'}{reason}")
        if state.tier is None and not app.endswith("-vllm"):
            problems.append(
                f"{app} is not a semray tier deployment (another program, or an older semray): a run would stop "
                f"with TierConfigMismatchError; `semray serve down --prefix {prefix}` removes it"
            )
        if state.tier is not None and not entries[app]["matches_profile"]:
            problems.append(
                f"{app} serves another configuration of tier {state.tier!r} than the model profile (deployed "
                f"digest {state.digest}): a run with this profile stops with TierConfigMismatchError; use the "
                f"deployed profile, or `semray serve down --prefix {prefix}` and `semray serve up` again"
            )
    return problems
