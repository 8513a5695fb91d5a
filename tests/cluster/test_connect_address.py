"""Joining an existing cluster: RAY_ADDRESS is honoured without resource arguments, Ray Data is
configured as on the embedded path, and a token-auth failure says what to set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A one-CPU head on 127.0.0.1 with token authentication, its token under a private HOME."""
    home = tmp_path_factory.mktemp("home")
    temp = Path(f"/tmp/sr-head-{os.getpid()}")
    port = _free_port()
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    subprocess.run([str(RAY), "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
    head = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while not list(temp.glob("session_*/logs/raylet.out")) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        head.terminate()
        head.wait(timeout=60)
        subprocess.run(["pkill", "-9", "-f", str(temp)], check=False)


def _connect(env: dict[str, str], settings: str) -> subprocess.CompletedProcess[str]:
    script = (
        "from semray.settings import Settings\n"
        "from semray.cluster.connect import connect\n"
        "from semray.errors import ClusterError\n"
        "try:\n"
        f"    connect(Settings({settings}))\n"
        "except ClusterError as error:\n"
        "    print('ClusterError:', error)\n"
        "else:\n"
        "    import ray\n"
        "    from ray.data import DataContext\n"
        "    ordered = DataContext.get_current().execution_options.preserve_order\n"
        "    print('connected', ray.cluster_resources().get('CPU'), ordered)\n"
    )
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=150)


def test_ray_address_from_the_environment_joins_without_resources(token_cluster: tuple[str, dict[str, str]]) -> None:
    address, env = token_cluster
    done = _connect({**env, "RAY_ADDRESS": address}, "")
    assert "connected 1.0 True" in done.stdout, done.stdout + done.stderr[-2000:]


def test_token_auth_failure_says_what_to_set(token_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = token_cluster
    without = {**env, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)}
    done = _connect(without, f"ray_address={address!r}")
    assert "ClusterError: cannot reach the Ray cluster at " + address in done.stdout, done.stdout + done.stderr[-2000:]
    assert "RAY_AUTH_MODE=token" in done.stdout and "RAY_AUTH_TOKEN" in done.stdout
