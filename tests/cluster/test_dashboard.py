"""The Grafana dashboard charts only metrics semray records, under the names Ray exports (no Ray)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from semray.cluster import metrics

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "semray.json"
VALID = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def exported() -> set[str]:
    names = {metrics.exported_name(name) for name in (*metrics.COUNTERS, *metrics.GAUGES)}
    for name in metrics.HISTOGRAMS:
        names |= {f"ray_{name}_bucket", f"ray_{name}_count", f"ray_{name}_sum"}
    return names


def test_every_metric_has_a_prometheus_name() -> None:
    names = [*metrics.COUNTERS, *metrics.GAUGES, *metrics.HISTOGRAMS]
    assert all(VALID.match(name) and name.startswith("semray_") for name in names)
    assert metrics.exported_name("semray_dollars") == "ray_semray_dollars_total"
    assert metrics.exported_name("semray_run_progress") == "ray_semray_run_progress"


def test_the_dashboard_charts_what_semray_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in expressions for name in re.findall(r"ray_semray_[a-z_]+", expr)}
    assert used and used <= exported(), used - exported()
    counters = {metrics.exported_name(name) for name in metrics.COUNTERS}
    assert counters <= used, counters - used  # every counter is charted
