"""Reaching Ray (``semray.cluster.connect``): an address where nothing listens, or a cluster that
refuses the token, fails at once with what to set (not after twenty retries); Ray Data is
configured the same whichever way Ray was reached, also when the caller started Ray itself; an
embedded start does not print Ray's token-auth notice. Only that last test starts a Ray (in a
CLI subprocess)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.data import DataContext

from semray.cluster import connect as connecting
from semray.errors import ClusterError
from semray.settings import Settings


@pytest.fixture()
def listening() -> Iterator[str]:
    """A TCP port on 127.0.0.1 that accepts connections (and is no Ray)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def _closed_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_an_address_where_nothing_listens_fails_at_once() -> None:
    address = _closed_address()
    started = time.monotonic()
    with pytest.raises(ClusterError, match=f"cannot reach the Ray cluster at {address}: nothing accepts connections"):
        connecting.check_cluster_address(address)  # what connect() runs first when Ray is not yet up
    assert time.monotonic() - started < connecting.PREFLIGHT_TIMEOUT_S + 1


def test_a_refused_token_says_what_to_set(listening: str, monkeypatch: pytest.MonkeyPatch) -> None:
    class RefusingGcs:
        def __init__(self, address: str) -> None:
            raise ray.exceptions.AuthenticationError(
                "RPC error: InvalidAuthToken: Authentication token is missing or incorrect. Note: RAY_AUTH_MODE ..."
            )

    monkeypatch.setattr(ray._raylet, "GcsClient", RefusingGcs)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(ClusterError) as refused:
        connecting.check_cluster_address(listening)
    message = str(refused.value)
    assert message.startswith(f"cannot reach the Ray cluster at {listening}: it refused this process's")
    assert "InvalidAuthToken" in message and "Note:" not in message  # Ray's first sentence, then ours
    assert "RAY_AUTH_MODE=token" in message and "RAY_AUTH_TOKEN" in message
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    with pytest.raises(ClusterError, match="RAY_AUTH_MODE=token is set but no token is"):
        connecting.check_cluster_address(listening)


def test_addresses_ray_resolves_itself_are_not_checked() -> None:
    for address in ("auto", "ray://127.0.0.1:1", "local"):
        connecting.check_cluster_address(address)  # no error: ray.init resolves and reports these


def test_ray_started_by_the_caller_gets_semrays_data_options(monkeypatch: pytest.MonkeyPatch) -> None:
    context = DataContext.get_current()
    monkeypatch.setattr(context.execution_options, "preserve_order", False)
    monkeypatch.setitem(connecting._DATA_CONTEXT, "configured", False)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # as after the caller's own ray.init()
    connecting.connect(Settings())
    assert context.execution_options.preserve_order is True
    assert connecting._DATA_CONTEXT["configured"] is True


def test_the_progress_bar_notice_is_dropped_where_ray_data_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    connecting._configure_data_context()
    connecting._configure_data_context()  # twice: one filter, not two
    logger = logging.getLogger(connecting.PROGRESS_LOGGER)
    assert logger.filters.count(connecting.quiet_progress_notice) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning("Progress bars disabled. To enable, set `enable_progress_bars = True`.")
        logger.warning("a warning that stays")
    assert [record.getMessage() for record in caplog.records] == ["a warning that stays"]


@pytest.mark.slow  # a whole CLI process with its own Ray: ~17 s
@pytest.mark.ray
def test_an_embedded_start_keeps_token_auth_on_without_telling_every_call_how_to_turn_it_off(
    tmp_path: Path,
) -> None:
    """A CLI call starts its own Ray (a subprocess: this process's Ray would make connect a no-op);
    Ray's default-on token notice is dropped from its standard error (the filter only drops it:
    Ray's own auth mode is left as Ray sets it)."""
    table = tmp_path / "t.csv"
    table.write_text("id,text\n1,hello\n2,bye\n", encoding="utf-8")
    semray = Path(sys.executable).with_name("semray")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_MODE", None)
    argv = [str(semray), "--state-dir", str(tmp_path / "s"), "sql", "SELECT id FROM t WHERE id > 1", "-t", f"t={table}"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "2" in done.stdout
    assert "Token authentication" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "no model calls", done.stderr
