"""``semray.ask`` end to end on local Ray: the demo recording plans, validates and runs on the simulated tiers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import semray
from semray.demo.corpus import generate, write
from semray.demo.models import demo_serving
from semray.operators import plan_from_json, walk
from semray.serving.profiles import resolve_serving
from semray.settings import Settings

RECORDING = Path(semray.__file__).parent / "demo" / "ask_delivery.json"
ROWS = 120


@pytest.mark.ray
def test_ask_runs_the_demo_recording_on_ray_and_returns_answer_steps_and_run(
    ray_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = json.loads(RECORDING.read_text(encoding="utf-8"))
    paths = write(tmp_path / "demo", ROWS)
    monkeypatch.chdir(tmp_path / "demo")  # the recording scans reviews.csv of the working folder
    corpus = generate(ROWS)
    serving = resolve_serving(ray_settings.models).model_copy(update={"simulator": demo_serving(corpus).simulator})
    result = semray.ask(
        recording["question"],
        tables={"reviews": paths["reviews"], "products": paths["products"]},
        settings=ray_settings,
        serving=serving,
        replay=RECORDING,
    )
    assert result.datasets == ("reviews",) and result.iterations == 1
    (scan,) = [node for node in walk(plan_from_json(result.plan_json)) if node.op == "scan"]
    assert Path(scan.source.path).resolve() == paths["reviews"].resolve()  # type: ignore[attr-defined]

    # The answer is the one the labels give: low ratings whose review mentions delivery, per product.
    reviews = corpus.reviews.to_pylist()
    delivery = {row["review_id"] for row in corpus.labels.to_pylist() if row["mentions_delivery"]}
    expected: dict[str, int] = {}
    for row in reviews:
        if row["rating"] <= 2 and row["review_id"] in delivery:
            expected[row["product"]] = expected.get(row["product"], 0) + 1
    assert result.answer is not None
    answer = {row["product"]: row["complaints"] for row in result.answer.to_pylist()}
    low = {row["product"] for row in reviews if row["rating"] <= 2}
    assert answer and set(answer) <= low  # the simulated tier errs at its profile's rate, the SQL filter never
    assert 0.6 * sum(expected.values()) <= sum(answer.values()) <= 1.5 * sum(expected.values())
    counts = [row["complaints"] for row in result.answer.to_pylist()]
    assert counts == sorted(counts, reverse=True)

    assert result.run_id and result.usage_line
    kinds = [(step.agent, step.kind) for step in result.steps]
    assert ("manipulation", "fill") in kinds and ("execution", "run") in kinds
    fill = next(step for step in result.steps if step.kind == "fill")
    assert (fill.input_tokens, fill.output_tokens) == (4200, 380)
    assert result.planning_tokens > 4580 and result.planning_dollars > 0
    execution = next(step for step in result.steps if step.agent == "execution")
    assert execution.error is None and execution.output == f"ran: run {result.run_id}"  # the run id, journaled

    # The engine run was linked in the ask's journal while it ran: before the run step, journaled at its end.
    from semray.planner.agents.ask_journal import (
        ASKS_FOLDER,
        RunLinked,
        StepJournaled,
        read_ask_trace,
        render_ask_trace,
    )

    folder = ray_settings.state_path / ASKS_FOLDER / result.ask_id
    records = read_ask_trace(folder)
    links = [index for index, record in enumerate(records) if isinstance(record, RunLinked)]
    ran = next(i for i, r in enumerate(records) if isinstance(r, StepJournaled) and r.agent == "execution")
    assert links and links[0] < ran and {records[i].run_id for i in links} == {result.run_id}  # type: ignore[union-attr]
    assert f"engine run {result.run_id}: succeeded (semray runs show {result.run_id})" in render_ask_trace(folder)
