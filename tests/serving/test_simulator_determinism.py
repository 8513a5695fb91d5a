"""The same question gets the same answer and confidence in another process (and from a config file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.serving.simulator import ChatCompletionRequest, Simulator, SimulatorConfig

_SCRIPT = """
import json, sys
from pathlib import Path
from semray.serving.simulator import ChatCompletionRequest, Simulator, SimulatorConfig
simulator = Simulator(SimulatorConfig.from_file(Path(sys.argv[1])))
answers = []
for body in json.loads(Path(sys.argv[2]).read_text()):
    response = simulator.complete_sync(ChatCompletionRequest.model_validate(body))
    answers.append(response.model_dump(mode="json")["choices"])
print(json.dumps(answers))
"""


def _answers(simulator: Simulator, bodies: list[dict[str, object]]) -> list[object]:
    return [
        simulator.complete_sync(ChatCompletionRequest.model_validate(body)).model_dump(mode="json")["choices"]
        for body in bodies
    ]


def test_answers_are_identical_across_processes(tmp_path: Path, reviews: pa.Table) -> None:
    pq.write_table(reviews, tmp_path / "reviews.parquet")
    config_file = tmp_path / "sim.json"
    config_file.write_text(
        json.dumps(
            {
                "seed": 3,
                "models": {"sim-small": {"error_rate": 0.4}, "sim-large": {"error_rate": 0.1}},
                "datasets": {
                    "reviews": {"path": "reviews.parquet", "key_column": "review_id", "text_columns": ["review"]}
                },
                "tasks": [
                    {"name": "sentiment", "kind": "label", "label_column": "sentiment", "keywords": ["sentiment"]},
                    {"name": "positive", "kind": "filter", "label_column": "is_positive", "keywords": ["positive"]},
                ],
            }
        )
    )
    bodies: list[dict[str, object]] = [
        {
            "model": model,
            "messages": [{"role": "user", "content": f"{question} {text}"}],
            "logprobs": True,
            "top_logprobs": 2,
        }
        for model in ("sim-small", "sim-large")
        for question in ("Sentiment?", "Is it positive?")
        for text in reviews.column("review").to_pylist()[:15]
    ]
    bodies_file = tmp_path / "bodies.json"
    bodies_file.write_text(json.dumps(bodies))
    environment = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(config_file), str(bodies_file)],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        timeout=120,
    )
    in_process = _answers(Simulator(SimulatorConfig.from_file(config_file)), bodies)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == in_process
    # Errors happened (the comparison is not trivially about right answers only).
    contents = [choices[0]["message"]["content"] for choices in in_process]  # type: ignore[index]
    assert len(set(contents)) > 2


def test_saved_in_process_config_answers_the_same(
    tmp_path: Path, review_config: SimulatorConfig, reviews: pa.Table
) -> None:
    reloaded = SimulatorConfig.from_file(review_config.save(tmp_path / "sim.json"))
    assert (tmp_path / "sim-reviews-table.parquet").exists()
    bodies: list[dict[str, object]] = [
        {"model": "sim-small", "messages": [{"role": "user", "content": f"Sentiment? {text}"}]}
        for text in reviews.column("review").to_pylist()[:10]
    ]
    assert _answers(Simulator(reloaded), bodies) == _answers(Simulator(review_config), bodies)
