"""On a terminal the CLI draws semray's progress bar and turns Ray Data's own bars off (no Ray started)."""

from __future__ import annotations

import pytest
from ray.data import DataContext

from semray.cli_progress import BarReporter, reporter_for
from semray.cluster import connect
from semray.pipeline.runs.progress import LogReporter
from semray.settings import Settings


def test_semrays_bar_leaves_ray_datas_bars_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(connect._TERMINAL_BARS, "semray", False)
    context = DataContext.get_current()
    monkeypatch.setattr(context, "enable_progress_bars", True)
    assert isinstance(reporter_for(Settings(), terminal=False), LogReporter)
    assert connect.ray_data_progress_bars(terminal=True) and context.enable_progress_bars  # no bar of semray's

    assert isinstance(reporter_for(Settings(), terminal=True), BarReporter)
    assert context.enable_progress_bars is False  # a DataContext already configured by a connect
    assert not connect.ray_data_progress_bars(terminal=True)  # and what a later connect sets
