"""What Serve has deployed: each tier app's status, configuration digest and replicas, and waiting
(with a deadline) for apps to be RUNNING.

The digest of a tier's configuration travels in its deployment's name, ``<tier>-<backend>-<digest>``
(e.g. ``small-simulated-3f2a9c0d1e4b5a67``), so ``serve.status()`` alone says which configuration
an app runs: no replica needs to answer (an app still waiting for CPUs is recognised too), the
Serve controller keeps it for as long as the cluster lives (also after the deploying driver
exits), and no private Serve API or extra actor is involved. The details behind the digest
(backend, model, who deployed it, resources per replica) come from the replica's ``describe()``.

>>> parse_deployment_name("small-simulated-3f2a9c0d1e4b5a67")
('small', 'simulated', '3f2a9c0d1e4b5a67')
>>> parse_deployment_name("small-simulated") is None  # deployed by an older semray, or not by semray
True
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.exceptions import RayError
from ray.serve.exceptions import RayServeException

from semray.serving.errors import TierDeployError

_NAME = re.compile(r"^(?P<tier>embedding|small|large)-(?P<backend>[a-z_]+)-(?P<digest>[0-9a-f]{16})$")
_MESSAGE_CHARS = 600


def deployment_name(tier: str, backend: str, digest: str) -> str:
    """The name of a tier's deployment inside its app, carrying the configuration digest."""
    return f"{tier}-{backend}-{digest}"


def parse_deployment_name(name: str) -> tuple[str, str, str] | None:
    """``(tier, backend, digest)`` of a semray tier deployment, or None for any other name."""
    match = _NAME.match(name)
    return (match["tier"], match["backend"], match["digest"]) if match else None


@dataclass(frozen=True, slots=True)
class DeployedApp:
    """One Serve application as ``serve.status()`` reports it."""

    app: str
    status: str
    message: str = ""
    tier: str | None = None
    backend: str | None = None
    digest: str | None = None
    replicas: dict[str, int] = field(default_factory=dict)

    @property
    def running_replicas(self) -> int:
        return self.replicas.get("RUNNING", 0)

    @property
    def healthy(self) -> bool:
        return self.status == "RUNNING" and self.running_replicas > 0


def deployed_apps(prefix: str | None = None) -> dict[str, DeployedApp]:
    """Every Serve app (or those named ``<prefix>-*``) with its status, digest and replica states."""
    found: dict[str, DeployedApp] = {}
    for app, overview in serve.status().applications.items():
        if prefix is not None and not app.startswith(f"{prefix}-"):
            continue
        messages = [overview.message] if overview.message else []
        replicas: dict[str, int] = {}
        parsed: tuple[str, str, str] | None = None
        for name, deployment in overview.deployments.items():
            parsed = parsed or parse_deployment_name(name)
            if deployment.message:
                messages.append(deployment.message)
            for state, count in deployment.replica_states.items():
                key = str(getattr(state, "value", state))
                replicas[key] = replicas.get(key, 0) + int(count)
        tier, backend, digest = parsed if parsed is not None else (None, None, None)
        found[app] = DeployedApp(
            app=app,
            status=_text(overview.status),
            message=" | ".join(dict.fromkeys(messages)),
            tier=tier,
            backend=backend,
            digest=digest,
            replicas=replicas,
        )
    return found


def describe_app(app: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """What a running semray tier replica says it serves (``TierServer.describe``), or None."""
    try:
        described: dict[str, Any] = serve.get_app_handle(app).describe.remote().result(timeout_s=timeout_s)
    except (RayServeException, RayError, TimeoutError, AttributeError):
        return None  # not running, not a semray tier, or a replica deployed by an older semray
    return described


def wait_running(apps: Sequence[str], timeout_s: float, *, owned: Collection[str] = (), poll_s: float = 0.25) -> None:
    """Block until every app in ``apps`` is RUNNING; ``TierDeployError`` when one fails to deploy
    or is not RUNNING within ``timeout_s`` (with what Serve says about it). On a timeout the apps
    in ``owned`` (the caller just deployed them) that are still not RUNNING are deleted, so that
    their replicas do not go on waiting for resources behind the caller's back."""
    deadline = time.monotonic() + timeout_s
    pending = list(dict.fromkeys(apps))
    while pending:
        state = deployed_apps()
        for app in list(pending):
            current = state.get(app)
            if current is not None and current.status == "RUNNING":
                pending.remove(app)
            elif current is not None and current.status == "DEPLOY_FAILED":
                raise TierDeployError(
                    f"Serve app {app!r} failed to deploy: {_cut(current.message) or 'Serve gives no reason'}; "
                    "fix the tier's configuration (the replica's own error is in the Ray logs) and try again",
                    app=app,
                    status=current.status,
                    serve_message=current.message,
                )
        if not pending:
            return
        if time.monotonic() >= deadline:
            app = pending[0]
            current = state.get(app)
            status = current.status if current is not None else "MISSING"
            message = current.message if current is not None else ""
            deleted = [name for name in pending if name in owned]
            for name in deleted:
                serve.delete(name, _blocking=False)
            fate = f"deleted {', '.join(deleted)} so that nothing keeps waiting" if deleted else "left it as it is"
            raise TierDeployError(
                f"Serve app {app!r} is still {status} after {timeout_s:g} s: "
                f"{_cut(message) or 'Serve gives no reason yet'}; {fate}. "
                "If it waits for resources, free them (`semray serve down --prefix <prefix>`) or lower num_cpus / "
                "num_gpus in the model profile; if the model is slow to load, raise deploy_timeout_s",
                app=app,
                status=status,
                serve_message=message,
            )
        time.sleep(poll_s)


def wait_deleted(apps: Sequence[str], timeout_s: float, *, poll_s: float = 0.25) -> None:
    """Block until none of ``apps`` is listed by Serve any more (their deletion finished)."""
    deadline = time.monotonic() + timeout_s
    while remaining := [app for app in apps if app in serve.status().applications]:
        if time.monotonic() >= deadline:
            raise TierDeployError(
                f"Serve app {remaining[0]!r} is still being deleted after {timeout_s:g} s; wait and try again, "
                "or look at the Serve controller's log for a replica that does not stop",
                app=remaining[0],
                status="DELETING",
                serve_message="",
            )
        time.sleep(poll_s)


def _text(status: Any) -> str:
    return str(getattr(status, "value", status))


def _cut(message: str) -> str:
    """Serve's message without its traceback body: the first line and the error's last line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
