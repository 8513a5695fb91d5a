"""`semray serve up` holds its tiers until Ctrl-C or SIGTERM, then deletes them (a background
`serve up` ignores SIGINT; a supervisor stops it with SIGTERM). No Ray: deleting is recorded."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from semray.serving import lifecycle

pytestmark = pytest.mark.timeout(30)


def test_sigterm_takes_the_held_tiers_down_and_restores_the_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[str] = []
    monkeypatch.setattr(lifecycle, "stop_tiers", stopped.append)
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    lifecycle.hold_tiers("held")  # returns instead of the process dying with its apps left deployed
    timer.join()
    assert stopped == ["held"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_off_the_main_thread_a_stop_event_ends_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[str] = []
    monkeypatch.setattr(lifecycle, "stop_tiers", stopped.append)
    event = threading.Event()
    holder = threading.Thread(target=lifecycle.hold_tiers, args=("side", event))
    holder.start()
    event.set()
    holder.join(timeout=5)
    assert not holder.is_alive() and stopped == ["side"]
