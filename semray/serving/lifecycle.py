"""``semray serve up|down|status``: the library side of the CLI commands.

With a Ray address in the settings the tiers outlive the command (a long-lived app that later
runs reuse: ``start_tiers`` finds them running); with the embedded local Ray they live as long
as the process, so ``serve_up(..., block=True)`` keeps it alive until interrupted.

>>> handles = serve_up(Settings(), ServingConfig())  # doctest: +SKIP
>>> serve_status(Settings())["tiers"]  # doctest: +SKIP
{'semray-embedding': 'RUNNING', 'semray-small': 'RUNNING', 'semray-large': 'RUNNING'}
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import ray

from semray.cluster.connect import connect
from semray.log import get_logger
from semray.serving.cache import ResponseCache
from semray.serving.config import TIER_NAMES, ServingConfig
from semray.serving.deployments import TierHandles, start_tiers, stop_tiers, tier_status
from semray.settings import Settings

log = get_logger(__name__)


def serve_up(
    settings: Settings,
    config: ServingConfig | None = None,
    tiers: Sequence[str] = TIER_NAMES,
    *,
    block: bool = False,
    stop: threading.Event | None = None,
) -> TierHandles:
    """Connect to Ray and deploy the tiers; with ``block`` wait (until ``stop`` is set or Ctrl-C)
    and then take them down."""
    config = config or ServingConfig()
    connect(settings)
    handles = start_tiers(config, settings, tiers)
    simulated = [name for name in tiers if config.tier(name).backend == "simulated"]
    log.info("serve_up", apps=handles.apps, simulated_tiers=simulated, ray_address=settings.ray_address or "embedded")
    if block:
        event = stop or threading.Event()
        try:
            while not event.wait(timeout=1.0):
                pass
        except KeyboardInterrupt:
            log.info("serve_interrupted")
        finally:
            stop_tiers(config.app_prefix)
    return handles


def serve_down(settings: Settings, prefix: str = "semray") -> list[str]:
    """Delete the tier apps; returns the names that were running. A no-op without a cluster."""
    if not ray.is_initialized() and settings.ray_address is None:
        log.info("serve_down_nothing_running", reason="no Ray address configured and no cluster in this process")
        return []
    connect(settings)
    running = sorted(tier_status(prefix))
    stop_tiers(prefix)
    return running


def serve_status(settings: Settings, config: ServingConfig | None = None) -> dict[str, Any]:
    """Where the tiers stand: Ray connection, each app's status, the cache file and its size."""
    config = config or ServingConfig()
    status: dict[str, Any] = {
        "ray_address": settings.ray_address or "embedded",
        "connected": False,
        "tiers": {},
        "backends": {name: f"{config.tier(name).backend}:{config.tier(name).model}" for name in TIER_NAMES},
    }
    if ray.is_initialized() or settings.ray_address is not None:
        connect(settings)
        status["connected"] = True
        status["tiers"] = tier_status(config.app_prefix)
    cache_path = config.cache_path(settings.state_path)
    status["cache"] = {"enabled": cache_path is not None, "path": str(cache_path) if cache_path else None}
    if cache_path is not None and cache_path.exists():
        cache = ResponseCache(cache_path)
        status["cache"]["entries"] = len(cache)
        cache.close()
    return status
