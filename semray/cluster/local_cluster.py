"""``semray up`` / ``semray down``: a long-lived local Ray head on 127.0.0.1 that CLI calls attach to.

``start_local_cluster`` runs ``ray start --head`` (a daemon that outlives this process) with every
server bound to 127.0.0.1: GCS, dashboard (and its job API), Ray Client server, node agents. Its
temp dir is ``<state>/ray-up`` (through a short /tmp link when that is too long for Unix
sockets), token authentication is on with a token made for it (``<state>/cluster/auth_token``,
mode 0600), and its processes carry ``SEMRAY_LOOPBACK_ONLY=1`` so Serve replicas bind loopback.
The record ``<state>/cluster/local.json`` names its address; ``find_local_cluster`` returns it
while the GCS answers, so later calls join it instead of starting Ray (tens of seconds).
``stop_local_cluster`` stops exactly its processes (found by the ``SEMRAY_LOCAL_CLUSTER``
marker in their environment and their descendants), never other Ray clusters of the machine.

>>> cluster = start_local_cluster(Settings(state_dir=Path("/tmp/s")), num_cpus=2)  # doctest: +SKIP
>>> find_local_cluster(Settings(state_dir=Path("/tmp/s"))).address  # doctest: +SKIP
'127.0.0.1:40123'
>>> stop_local_cluster(Settings(state_dir=Path("/tmp/s")))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from semray.cluster.connect import ray_temp_dir
from semray.cluster.loopback import LOOPBACK_ENV
from semray.errors import ClusterError
from semray.log import get_logger
from semray.settings import Settings

log = get_logger(__name__)

MARKER_ENV = "SEMRAY_LOCAL_CLUSTER"
"""Set to the cluster's id in the environment of ``ray start``; every daemon it starts inherits it."""
RECORD_FOLDER = "cluster"
TEMP_NAME = "ray-up"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class LocalCluster:
    """What ``semray up`` started: where it listens and how to authenticate to it."""

    cluster_id: str
    address: str
    """The GCS address, ``127.0.0.1:PORT`` (what ``ray.init(address=...)`` takes)."""
    dashboard_url: str
    """The dashboard and job API, ``http://127.0.0.1:PORT`` (what ``JobSubmissionClient`` takes)."""
    temp_dir: str
    token_path: str
    num_cpus: int
    started_at: float

    def auth_environment(self) -> dict[str, str]:
        """The variables a process needs to join or submit to this cluster (token authentication)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": self.token_path}

    def answers(self, timeout_s: float = 0.5) -> bool:
        """True when the GCS accepts a connection (a cheap liveness probe, no Ray import)."""
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            return False


def use_token_auth(cluster: LocalCluster) -> None:
    """Authenticate this process (and the processes it starts) to ``cluster`` with its token.

    Ray reads ``RAY_AUTH_MODE`` and caches its token when ``ray._raylet`` is first imported;
    when that already happened, both caches are refreshed, as ``ray.init`` itself does when it
    turns token authentication on.
    """
    os.environ.update(cluster.auth_environment())
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


def record_path(settings: Settings) -> Path:
    return settings.state_path / RECORD_FOLDER / "local.json"


def read_record(settings: Settings) -> LocalCluster | None:
    """The record ``semray up`` left, or None (absent, or unreadable: then it is ignored)."""
    path = record_path(settings)
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        return LocalCluster(**values)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        log.warning("local_cluster_record_unreadable", path=str(path), error=str(error))
        return None


def find_local_cluster(settings: Settings) -> LocalCluster | None:
    """The running cluster of ``semray up`` under this state folder, or None."""
    cluster = read_record(settings)
    if cluster is None:
        return None
    if not cluster.answers():
        log.info("local_cluster_not_answering", address=cluster.address, record=str(record_path(settings)))
        return None
    return cluster


def start_local_cluster(settings: Settings, num_cpus: int) -> LocalCluster:
    """Start a Ray head on 127.0.0.1 under the state folder and record it; raises ``ClusterError``
    when one already runs there or Ray does not start."""
    running = find_local_cluster(settings)
    if running is not None:
        raise ClusterError(
            f"a local cluster started by `semray up` already runs at {running.address} for state folder "
            f"{settings.state_path}; use it, or stop it first with `semray down`"
        )
    folder = settings.state_path / RECORD_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    token_path = folder / "auth_token"
    _write_private(token_path, secrets.token_hex(32))
    temp = ray_temp_dir(settings, TEMP_NAME)
    # Ray's node agent listens on 52365 unless told otherwise; another Ray on this machine (a
    # `ray.init` in a notebook, a second state folder's cluster) holding it leaves the head with no
    # job agent ("No available agent to submit job"), so every port is picked free.
    gcs, dashboard, client, agent = _free_ports(4)
    cluster = LocalCluster(
        cluster_id=uuid.uuid4().hex[:12],
        address=f"{LOOPBACK}:{gcs}",
        dashboard_url=f"http://{LOOPBACK}:{dashboard}",
        temp_dir=str(temp),
        token_path=str(token_path),
        num_cpus=num_cpus,
        started_at=time.time(),
    )
    command = [
        _ray_executable(),
        "start",
        "--head",
        f"--node-ip-address={LOOPBACK}",
        f"--port={gcs}",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=true",
        f"--dashboard-host={LOOPBACK}",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
    ]
    if settings.object_store_bytes is not None:
        command.append(f"--object-store-memory={settings.object_store_bytes}")
    environment = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    environment.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every server on the node IP, 127.0.0.1
            "RAY_USAGE_STATS_ENABLED": "0",
            LOOPBACK_ENV: "1",
            MARKER_ENV: cluster.cluster_id,
            **cluster.auth_environment(),
        }
    )
    log.info("local_cluster_starting", address=cluster.address, num_cpus=num_cpus, temp_dir=str(temp))
    # The record first: a `semray down` after a failed or interrupted start still finds what to stop.
    _write_private(record_path(settings), json.dumps(asdict(cluster), indent=2))
    try:
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        stop_local_cluster(settings)
        raise ClusterError(
            f"`ray start --head` did not finish in {START_TIMEOUT_S:.0f} s; nothing is left running"
        ) from None
    if done.returncode != 0 or not cluster.answers(timeout_s=5.0):
        stop_local_cluster(settings)
        tail = (done.stderr or done.stdout)[-1500:]
        raise ClusterError(f"`ray start --head` failed (exit {done.returncode}); nothing is left running:\n{tail}")
    log.info("local_cluster_started", address=cluster.address, dashboard=cluster.dashboard_url)
    return cluster


def stop_local_cluster(settings: Settings) -> int:
    """Stop the processes of the recorded cluster and remove its record; returns how many were stopped."""
    cluster = read_record(settings)
    if cluster is None:
        return 0
    processes = cluster_processes(cluster)
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=STOP_TIMEOUT_S)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=STOP_TIMEOUT_S)
    record_path(settings).unlink(missing_ok=True)
    log.info("local_cluster_stopped", address=cluster.address, processes=len(processes), killed=len(alive))
    return len(processes)


def cluster_processes(cluster: LocalCluster) -> list[psutil.Process]:
    """The cluster's processes: those whose environment carries its marker or whose command line
    names its temp dir, and all their descendants (workers retitle themselves, hiding their
    environment)."""
    roots: list[psutil.Process] = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.pid == os.getpid():
                continue
            cmdline = " ".join(process.info["cmdline"] or [])
            if cluster.temp_dir in cmdline or process.environ().get(MARKER_ENV) == cluster.cluster_id:
                roots.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    found = {process.pid: process for process in roots}
    for process in roots:
        try:
            found.update({child.pid: child for child in process.children(recursive=True)})
        except psutil.NoSuchProcess:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback now (held open together so they differ)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _ray_executable() -> str:
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise ClusterError("the `ray` command was not found beside this Python or on PATH; install ray[default]")
    return found


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, replacing ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)
