"""The reviews workload (issue 19's acceptance benchmark) at a tiny size: data, simulator tasks, scoring, tables.

No Ray and no peer: the generator, the simulator's recognition of each instruction (in process),
the scores of hand-made answers, the LIMIT bounds and the section's table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.workloads import reviews
from benchmarks.workloads.compare import summarize_stats
from benchmarks.workloads.definitions import LARGE_MODEL
from benchmarks.workloads.reviews_data import CATEGORIES, INSTRUCTIONS, generated_reviews, prepare_reviews
from semray.planner.join_factors import find_factorization
from semray.serving.prompts.set_ops import right_labels_template, side_template
from semray.serving.simulator import ChatCompletionRequest, Simulator, SimulatorConfig


def _ask(config: SimulatorConfig, prompt: str) -> Any:
    exact = config.models[LARGE_MODEL].model_copy(update={"error_rate": 0.0})
    simulator = Simulator(config.model_copy(update={"models": {LARGE_MODEL: exact}}))
    request = ChatCompletionRequest(model=LARGE_MODEL, messages=[{"role": "user", "content": prompt}])
    return simulator.complete_sync(request)


def _truthy(content: str) -> bool:
    assert content in ("Yes", "No", "True", "False")
    return content in ("Yes", "True")


def test_generated_reviews_are_seeded_unique_and_labelled() -> None:
    first = generated_reviews(200, seed=3)
    assert first == generated_reviews(200, seed=3) and first != generated_reviews(200, seed=4)
    assert len({r["text"] for r in first}) == 200
    share = sum(r["complaint"] == "true" for r in first) / 200
    assert 0.45 < share < 0.75
    assert {r["category"] for r in first} <= set(CATEGORIES.values())


def test_the_join_wording_factorizes_and_the_category_wording_is_left_to_the_right_labels() -> None:
    found = find_factorization(INSTRUCTIONS["same_family"])
    assert found is not None and (found.factor, found.relation) == ("device family", "=")
    assert find_factorization(INSTRUCTIONS["category"]) is None


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("reviews")
    return prepare_reviews(out, seed=5, latency_scale=0.0, rows=40, join_rows=12, category_rows=10, sql_rows=8)


def test_prepare_writes_inputs_and_truth(prepared: Any) -> None:
    inputs = prepared.spec["inputs"]
    lines = {name: Path(path).read_text().splitlines() for name, path in inputs.items()}
    assert [len(lines[n]) for n in ("reviews", "join_sample", "category_sample", "sql_sample", "categories")] == [
        40,
        12,
        10,
        8,
        5,
    ]
    assert set(json.loads(lines["reviews"][0])) == {"review_id", "text", "brand"}  # no label reaches a system
    truth = prepared.truth
    assert set(truth["complaint_and_shipping"]) <= set(truth["complaint"])
    assert sum(truth["mood_counts"].values()) == 8 and len(truth["category_pairs"]) == 10


def test_the_simulator_tells_pair_questions_from_per_row_ones(prepared: Any) -> None:
    config = SimulatorConfig.from_file(prepared.simulator_config)
    rows = [json.loads(line) for line in Path(prepared.spec["inputs"]["reviews"]).read_text().splitlines()]
    labels = {r["review_id"]: r for r in generated_reviews(40, seed=5)}
    a, b = rows[0], rows[1]
    pair = INSTRUCTIONS["same_family"].replace("{l.text}", a["text"]).replace("{r.text}", b["text"])
    answer = _ask(config, pair)
    assert answer.simulator.task == "same_family"
    same = labels[a["review_id"]]["family"] == labels[b["review_id"]]["family"]
    assert _truthy(answer.choices[0].message.content) == same
    side = side_template(INSTRUCTIONS["same_family"], "l", "device family").replace("{text}", a["text"])
    answer = _ask(config, side)
    assert answer.simulator.task == "family"
    assert answer.choices[0].message.content == labels[a["review_id"]]["family"]
    choices = "; ".join(sorted(CATEGORIES.values()))
    classify = right_labels_template(INSTRUCTIONS["category"]).replace("{text}", a["text"])
    answer = _ask(config, f"Classify {classify}\nAnswer with one of: {choices}")
    assert answer.simulator.task == "category"
    assert answer.choices[0].message.content == labels[a["review_id"]]["category"]
    topic = CATEGORIES["battery"]
    pairwise = INSTRUCTIONS["category"].replace("{l.text}", a["text"]).replace("{r.description}", topic)
    answer = _ask(config, pairwise)
    assert answer.simulator.task == "in_category"
    assert _truthy(answer.choices[0].message.content) == (labels[a["review_id"]]["category"] == topic)


def test_scores_of_a_hand_made_answer(prepared: Any) -> None:
    truth = prepared.truth
    same = truth["same_family_pairs"]
    wrong = next(r for r in (f"R{i:05d}" for i in range(40)) if r not in truth["complaint"])
    description, name = next(iter(CATEGORIES.values())), next(iter(CATEGORIES))
    steps = {
        "filter_limit": {"kept": [*truth["complaint"][:3], wrong]},
        "self_join": {"pairs": [list(reversed(p)) for p in same] + [[same[0][0], same[0][0]]]},
        "category_join": {"pairs": [[a, d] for a, d in truth["category_pairs"]] + [["R00000", description]]},
        "sql_aggregate": {"complaint_share": truth["brand_complaint_share"], "stars": {}},
        "sql_group_by": {"mood_counts": truth["mood_counts"]},
    }
    quality = reviews.score(steps, truth)
    assert quality["filter_limit"] == {"precision": 0.75, "returned": 4}
    assert quality["self_join"]["f1"] == 1.0  # reversed pairs and self-pairs do not count against it
    extra = ("R00000", name) not in {(a, reviews.NAMES_OF_DESCRIPTIONS[d]) for a, d in truth["category_pairs"]}
    assert quality["category_join"]["recall"] == 1.0 and (quality["category_join"]["precision"] < 1.0) == extra
    assert quality["sql_aggregate"]["share_mae"] == 0.0 and quality["sql_aggregate"]["stars_mae"] > 0
    assert quality["sql_group_by"]["relative_l1"] == 0.0
    assert "chain_limit" not in quality


def test_limit_bounds_follow_the_issue() -> None:
    truth = {
        "rows": 100,
        "complaint": [str(i) for i in range(50)],
        "complaint_and_shipping": [str(i) for i in range(25)],
        "join_rows": 4,
        "same_family_pairs": [["a", "b"], ["c", "d"]],
    }
    limits = {"filter_limit": 5, "cascade_limit": 10, "chain_limit": 5, "self_join_limit": 2}
    bounds = reviews.limit_bounds(truth, limits)
    assert bounds["filter_limit"]["bound"] == 3 * 5 / 0.5 + reviews.BATCH_ROWS
    assert bounds["chain_limit"]["bound"] == 3 * 5 / 0.25 + reviews.BATCH_ROWS
    # 4 rows, pairs (a,b), (c,d) both ways plus 4 self-pairs: 2 kept per left row; m = 4 right rows.
    assert bounds["self_join_limit"]["bound"] == 4 + 3 * 2 / 2 + reviews.BATCH_ROWS


def test_the_table_shows_calls_the_bound_and_why_a_query_is_missing() -> None:
    spent = {"calls": 50, "prompt_tokens": 900, "completion_tokens": 100, "cost_usd": 0.01}
    usage = {"calls": 50, "models": {LARGE_MODEL: spent}}
    step = {
        "calls": 50,
        "tokens": 1000,
        "cost_usd": 0.01,
        "tiers": {"large": {"calls": 50, "prompt_tokens": 900, "completion_tokens": 100}},
    }
    ours = {
        "system": "semray",
        "config": "default",
        "simulator": summarize_stats(usage | {"no_match_rate": 0.0}),
        "wall_s": 3.0,
        "peak_pss_bytes": 1 << 30,
        "seconds": {"filter_limit": 1.5},
        "step_usage": {"filter_limit": step},
        "semray_usage": {"filter_limit": {"calls": 40}},
        "quality": {"filter_limit": {"precision": 1.0, "returned": 5}},
        "unsupported": {"sql_group_by": "no SQL"},
    }
    peer = {"system": "lotus", "config": "plain", "error": "lotus is not installed"}
    bounds = {"filter_limit": {"k": 5, "selectivity": 0.5, "bound": 42.0}}
    table = reviews.step_table([ours, peer], bounds)
    assert (
        "| filter_limit | semray (default) | 50 (0 + 50) | 40 | 1,000 | 0.0100 | 1.5 | precision 1.000 (5 rows) "
        "| 5 / 0.500 / 42 | no (yes for its own calls) |  |" in table
    )
    assert "| sql_group_by | semray (default) | cannot express |" in table
    assert "| filter_limit | lotus (plain) | lotus is not installed |" in table
