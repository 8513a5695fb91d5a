"""The simulator served over HTTP on 127.0.0.1 for one system's run, in its own process.

A fresh server per run keeps ``/stats`` (calls, tokens and dollars per model, no-match rate)
to that run alone, and keeps the server's memory out of the measured system's figures: it
plays the remote model API, which no system's memory includes.

>>> with SimulatorServer(Path("sim.json"), log_path=Path("sim.log")) as server:  # doctest: +SKIP
...     server.base_url, server.stats()["calls"]
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

STARTUP_TIMEOUT_S = 180.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class SimulatorServer:
    """``semray sim serve --config F`` on a free loopback port, stopped on exit."""

    def __init__(self, config_path: Path, log_path: Path, port: int | None = None) -> None:
        self.config_path = config_path
        self.log_path = log_path
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> SimulatorServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        command = [sys.executable, "-m", "semray.cli", "sim", "serve", "--config", str(self.config_path)]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"simulator exited with {self._process.returncode}; see {self.log_path}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"simulator did not answer within {STARTUP_TIMEOUT_S:.0f} s; see {self.log_path}")

    def stats(self) -> dict[str, Any]:
        """The server's ``/stats``: calls, tokens, cost per model; no-match counts and samples."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=30.0)
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None
