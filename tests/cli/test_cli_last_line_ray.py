"""The last line of ``semray sql``: the run's model calls, tokens, dollars and id, as its journal has them.

A semantic query on the simulated tiers of a model profile (``--models``) over the demo corpus,
through ``semray.cli.main`` on the session's local Ray.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from semray.cli import main
from semray.demo import corpus
from semray.demo.models import DEMO_TASKS
from semray.serving.simulator.config import DatasetSpec, ModelProfile, SimulatorConfig
from semray.settings import Settings
from semray.transactions import list_runs, show_run

pytestmark = pytest.mark.ray

ROWS = 40
PRICED = ModelProfile(error_rate=0.0, price_in_per_million=2.5, price_out_per_million=10.0)
LAST_LINE = re.compile(
    r"^model calls: (?P<calls>\d+), tokens in/out: (?P<tokens_in>\d+)/(?P<tokens_out>\d+), "
    r"dollars: (?P<dollars>[0-9.]+) \(SIMULATED tier: answers come from labels, not a model\); run (?P<run>\S+)$"
)


def profile(folder: Path) -> Path:
    paths = corpus.write(folder, rows=ROWS)
    reviews = DatasetSpec(
        key_column="review_id", text_columns=("review",), path=paths["reviews"], labels_path=paths["labels"]
    )
    simulator = SimulatorConfig.model_validate(
        {"datasets": {"reviews": reviews}, "tasks": DEMO_TASKS, "models": {"sim-small": PRICED, "sim-large": PRICED}}
    )
    simulator.save(folder / "sim.json")
    path = folder / "semray.toml"
    path.write_text('simulator = "sim.json"\ncache_enabled = false\napp_prefix = "srlast"\n', encoding="utf-8")
    return path


def test_the_last_line_of_sql_is_the_runs_calls_tokens_dollars_and_id(
    ray_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    models = profile(tmp_path / "data")
    sql = "SELECT review_id FROM reviews WHERE SEM_FILTER('{review} is positive')"
    argv = ["--state-dir", str(state), "--models", str(models), "sql", sql]
    assert main([*argv, "-t", f"reviews={tmp_path / 'data' / 'reviews.csv'}", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    kept = captured.out.splitlines()[1:]
    assert 0 < len(kept) < ROWS
    last = [line for line in captured.err.splitlines() if line and not line.startswith("{")][-1]  # not log events
    found = LAST_LINE.match(last)
    assert found is not None, last
    (run,) = list_runs(Settings(state_dir=state))
    usage = show_run(Settings(state_dir=state), run.run_id).usage
    assert found["run"] == run.run_id and 0 < int(found["calls"]) == usage.calls <= ROWS
    assert (int(found["tokens_in"]), int(found["tokens_out"])) == (usage.tokens_in, usage.tokens_out)
    assert float(found["dollars"]) == pytest.approx(usage.dollars, abs=5e-5) and usage.dollars > 0
