"""The embedded Ray listens on 127.0.0.1 only, and its temp dir stays short."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from semray.cluster.connect import SOCKET_PATH_LIMIT, ray_temp_dir
from semray.settings import Settings


@pytest.mark.ray
def test_no_socket_on_another_address(ray_settings: Settings) -> None:
    import ray

    from semray.serving.deployments import start_tiers

    assert ray.is_initialized()
    start_tiers(settings=ray_settings, tiers=("large",))  # Serve replicas open gRPC servers too
    ours = {os.getpid()}
    temp = str(ray_temp_dir(ray_settings))
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if temp in cmdline or "ray::" in cmdline or "raylet" in cmdline or "gcs_server" in cmdline:
            ours.add(process.info["pid"])
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in ours]
    assert listening, "expected Ray to listen somewhere"
    exposed = [
        (c.laddr.ip, c.laddr.port, c.pid)
        for c in listening
        if c.laddr.ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")
    ]
    assert not exposed, (
        f"sockets outside loopback: {exposed}\n"
        + subprocess.run(["ss", "-tlnp"], capture_output=True, text=True).stdout
    )


def test_temp_dir_is_short_even_for_deep_state_dirs(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    temp = ray_temp_dir(Settings(state_dir=deep))
    assert len(str(temp)) + 70 <= SOCKET_PATH_LIMIT
    assert temp.resolve() == (deep / "ray").resolve()
