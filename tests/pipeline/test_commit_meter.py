"""The driver's per-operator counters, from the journal (``CommitMeter``), without Ray: journals
written by the transaction layer itself, as the actors write them, and the points the meter
would hand to ``ray.util.metrics`` caught at ``metrics.record_committed``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from semray.cluster import metrics
from semray.operators import SourceSpec
from semray.pipeline.runs.progress import JournalTail
from semray.pipeline.runs.resume_record import CancellableLedger
from semray.pipeline.stages.relational import ReadStage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage, SemanticTask
from semray.pipeline.workers.metering import CommitMeter, operator_tags
from semray.settings import Settings
from semray.transactions import LLMUsage, RowFailures, begin_run, resume_run

Points = list[tuple[metrics.MetricTags, metrics.CommittedPoint]]
FILTER = "SemFilter[review is positive]"
TAGS = {
    "operators": {"op1": [FILTER, "large"], "op1:small": [FILTER, "small"]},
    "questions": {"q1": FILTER},
}


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> Points:
    caught: Points = []
    monkeypatch.setattr(metrics, "record_committed", lambda tags, point: caught.append((tags, point)))
    return caught


def _commit(ledger: CancellableLedger, operator: str, ids: list[str], failed: tuple[str, ...] = ()) -> None:
    table = pa.table({"_rowid": pa.array(ids, pa.string())})
    usage = LLMUsage(
        calls=len(ids) + len(failed), tokens_in=10 * len(ids), tokens_out=len(ids), dollars=0.001 * len(ids)
    )
    groups = (RowFailures(reason="no_label", row_ids=failed),) if failed else ()
    ledger.commit(operator, f"{operator}:{ids[0]}", ids, table, usage, rows_out=1, failed=groups)


def _by_tags(points: Points) -> dict[tuple[str, str], tuple[int, int, int, int, int, int, float]]:
    """(operator, tier) -> rows in, rows out, failed rows, calls, tokens in, tokens out, dollars (to 1e-9)."""
    summed: dict[tuple[str, str], list[float]] = {}
    for tags, p in points:
        total = summed.setdefault((tags.operator, tags.tier), [0, 0, 0, 0, 0, 0, 0.0])
        for i, value in enumerate(
            (p.rows_in, p.rows_out, p.failed_rows, p.calls, p.tokens_in, p.tokens_out, p.dollars)
        ):
            total[i] += value
    return {key: (*(int(v) for v in total[:6]), round(total[6], 9)) for key, total in summed.items()}  # type: ignore[misc]


def test_the_driver_counts_its_attempts_batches_once_by_operator_and_tier(tmp_path: Path, points: Points) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, {"plan": 1}, None, config={"operator_metrics": TAGS})
    ledger = CancellableLedger(run.path, run.attempt)
    meter = CommitMeter(run.run_id, run.attempt)
    tail = JournalTail(run.path, on_record=meter.observe)
    _commit(ledger, "op1", ["a", "b"], failed=("c",))
    _commit(ledger, "op1", ["a", "b"], failed=("c",))  # journaled twice (a retried actor): counted once
    _commit(ledger, "op1:small", ["d"])
    _commit(ledger, "answers:q1:large", ["e"])  # bought while estimating: paid, not the operator's rows
    _commit(ledger, "elsewhere", ["f"])  # a key the run did not name: tagged by itself
    tail.poll()
    assert _by_tags(points) == {
        (FILTER, "large"): (3, 1, 1, 4, 30, 3, 0.003),  # op1 once, and the estimation's answer
        (FILTER, "small"): (1, 1, 0, 1, 10, 1, 0.001),
        ("elsewhere", ""): (0, 0, 0, 1, 10, 1, 0.001),
    }
    assert {tags.run for tags, _ in points} == {run.run_id}
    run.finish("cancelled", "stopped")

    # The resumed driver reads the journal from its start but counts only what its attempt adds.
    points.clear()
    resumed = resume_run(settings, run.run_id)
    second = CommitMeter(resumed.run_id, resumed.attempt)
    tail = JournalTail(resumed.path, on_record=second.observe)
    _commit(CancellableLedger(resumed.path, resumed.attempt), "op1", ["g"])
    tail.poll()
    assert _by_tags(points) == {(FILTER, "large"): (1, 1, 0, 1, 10, 1, 0.001)}
    resumed.close()


def test_a_run_without_journaled_tags_is_tagged_by_its_keys(tmp_path: Path, points: Points) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": 1}, None, config={})
    meter = CommitMeter(run.run_id, run.attempt)
    _commit(CancellableLedger(run.path, run.attempt), "op1", ["a"])
    JournalTail(run.path, on_record=meter.observe).poll()
    assert _by_tags(points) == {("op1", ""): (0, 0, 0, 1, 10, 1, 0.001)}
    run.close()


def test_operator_tags_name_keys_as_the_actors_do() -> None:
    read = ReadStage(source=SourceSpec(kind="csv", path="t.csv"), columns=None, batch_rows=32)
    task = SemanticTask(kind="filter", instruction="{review} is positive", tier="large", question_key="q1")
    cascade = CascadeStage(
        task=SemanticTask(kind="classify", instruction="{review} topic", tier="cascade"),
        operator_key="c1",
        batch_rows=32,
        actors=1,
        inputs=(read,),
    )
    stage = SemanticStage(task=task, operator_key="op1", batch_rows=32, actors=1, inputs=(cascade,))
    assert operator_tags(stage) == {
        "operators": {
            "op1": [FILTER, "large"],
            "c1": ["SemClassify[review topic]", "large"],
            "c1:small": ["SemClassify[review topic]", "small"],
            "c1:embedding": ["SemClassify[review topic]", "embedding"],
        },
        "questions": {"q1": FILTER},
    }
