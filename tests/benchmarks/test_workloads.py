"""Workload benchmarks without running any system: scoring, workload preparation, tables, skips.

No Ray, no model, no peer install: the functions that turn answers into figures are tested
on hand-made answers, and workload preparation on tiny copies of the shared data's shape.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.workloads import enron, medical, scaling
from benchmarks.workloads.compare import SystemRun, runner_command, select_runs, summarize_stats
from benchmarks.workloads.definitions import (
    INFECTIONS,
    LARGE_MODEL,
    SMALL_MODEL,
    enron_filter_labels,
    generated_tickets,
    join_sample,
    prepare_enron,
    prepare_medical,
    prepare_scaling,
    same_pairs,
)
from benchmarks.workloads.measure import _last_json
from benchmarks.workloads.report import cost_table, gaps
from benchmarks.workloads.scoring import (
    count_error,
    extraction_accuracy,
    label_accuracy,
    normalize_text,
    pairs,
    precision_recall,
)
from semray.serving.simulator import ChatCompletionRequest, Simulator, SimulatorConfig


# scoring ---------------------------------------------------------------------------------------
def test_precision_recall_counts_sets() -> None:
    result = precision_recall(["a", "b", "b", "x"], {"a", "b", "c", "d"})
    assert (result.precision, result.recall, result.predicted, result.positives) == (0.6667, 0.5, 3, 4)
    assert result.f1 == pytest.approx(2 * 0.6667 * 0.5 / (0.6667 + 0.5), abs=1e-3)


def test_precision_of_nothing_is_one_and_recall_zero() -> None:
    result = precision_recall([], {"a"})
    assert (result.precision, result.recall, result.f1) == (1.0, 0.0, 0.0)


def test_extraction_accuracy_accepts_any_listed_answer_and_ignores_case() -> None:
    expected = {
        "m1": [{"sender": "a@enron.com", "subject": "Raptor"}, {"sender": "b@enron.com", "subject": "Raptor II"}],
        "m2": [{"sender": "c@enron.com", "subject": "Chewco"}],
        "m3": [{"sender": "d@enron.com", "subject": "Fat Boy"}],
    }
    extracted = {
        "m1": {"sender": "B@Enron.com ", "subject": "raptor"},
        "m2": {"sender": "c@enron.com", "subject": None},
    }
    result = extraction_accuracy(extracted, expected, ("sender", "subject"))
    assert result == {"accuracy": 0.75, "accuracy_over_all_positives": 0.5, "rows_judged": 2}


def test_normalize_text_drops_punctuation_and_case() -> None:
    assert normalize_text("RE:  Raptor -- Update!") == "re raptor -- update"
    assert normalize_text(None) == ""


def test_label_accuracy_counts_missing_rows_wrong() -> None:
    result = label_accuracy({"1": "Malaria", "2": "dengue"}, {"1": "malaria", "2": "typhoid", "3": "acne"})
    assert result == {"accuracy": 0.3333, "answered": 2, "rows": 3}


def test_count_error_is_relative_l1() -> None:
    assert count_error({"a": 48, "b": 52, "c": 3}, {"a": 50, "b": 50}) == {
        "relative_l1": 0.07,
        "groups_exact": 0,
        "groups": 2,
    }


def test_pairs_are_unordered_and_drop_self_pairs() -> None:
    assert pairs([[2, 1], [1, 2], [3, 3], ["10", 9]]) == {("1", "2"), ("10", "9")}


# workload definitions --------------------------------------------------------------------------
def test_enron_filter_labels_conjunction_is_the_positive_label() -> None:
    for text in ("Raptor is a scheme", "news about Chewco from the WSJ", "lunch on friday", "FAT BOY deal"):
        for positive in (True, False):
            fraud, not_news = enron_filter_labels(text, positive)
            assert (fraud and not_news) == positive


def _enron_data(tmp_path: Path) -> Path:
    data = tmp_path / "enron"
    (data / "emails").mkdir(parents=True)
    bodies = {
        "a.txt": "From: ron.baker@enron.com\nSubject: Raptor hedges\n\n"
        + " ".join(f"raptor word{i}" for i in range(40)),
        "b.txt": "From: x@wsj.com\nSubject: News\n\n" + " ".join(f"chewco news story item{i}" for i in range(40)),
        "c.txt": "From: y@enron.com\nSubject: Lunch\n\n" + " ".join(f"lunch menu option{i}" for i in range(40)),
    }
    for name, body in bodies.items():
        (data / "emails" / name).write_text(body, encoding="utf-8")
    labels = {"a.txt": [{"sender": "ron.baker@enron.com", "subject": "Raptor hedges"}], "b.txt": [], "c.txt": []}
    (data / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
    return data


def _ask(config: SimulatorConfig, prompt: str, model: str = LARGE_MODEL) -> Any:
    simulator = Simulator(
        config.model_copy(update={"models": {model: config.models[model].model_copy(update={"error_rate": 0.0})}})
    )
    request = ChatCompletionRequest(model=model, messages=[{"role": "user", "content": prompt}])
    return simulator.complete_sync(request)


def test_prepare_enron_writes_inputs_truth_and_a_config_that_recognises_each_instruction(tmp_path: Path) -> None:
    workload = prepare_enron(_enron_data(tmp_path), tmp_path / "out", seed=1, latency_scale=0.0)
    rows = [json.loads(line) for line in Path(workload.spec["inputs"]["emails"]).read_text().splitlines()]
    assert [row["filename"] for row in rows] == ["a.txt", "b.txt", "c.txt"]
    assert workload.truth["positives"] == ["a.txt"]
    config = SimulatorConfig.from_file(workload.simulator_config)
    assert set(config.models) == {SMALL_MODEL, LARGE_MODEL}
    texts = {row["filename"]: row["text"] for row in rows}
    instructions = workload.spec["instructions"]
    fraud = _ask(config, f"{texts['b.txt']}\n{instructions['fraud']}. Answer True or False.")
    assert fraud.simulator.task == "fraud" and fraud.choices[0].message.content == "True"
    news = _ask(config, f"{texts['b.txt']}\n{instructions['not_news']}. Answer True or False.")
    assert news.simulator.task == "not_news" and news.choices[0].message.content == "False"
    extract = _ask(config, f"{texts['a.txt']}\nExtract {instructions['sender']} and {instructions['subject']} as JSON.")
    assert json.loads(extract.choices[0].message.content) == {
        "sender": "ron.baker@enron.com",
        "subject": "Raptor hedges",
    }


def _medical_data(tmp_path: Path) -> Path:
    data = tmp_path / "medical"
    data.mkdir()
    diagnoses = ["malaria", "acne", "migraine", "dengue"]
    patients = ["age,gender,smoking_history,patient_id,text_diagnosis"]
    symptoms = ["symptoms,patient_id,symptom_id"]
    for i in range(8):
        patients.append(f"{30 + i},Female,Never,{100 + i},{diagnoses[i % 4]}")
        words = " ".join(f"sym{i}x{j}" for j in range(20))
        symptoms.append(f'"I have {words}",{100 + i},{i}')
    patients.append("50,Male,Current,999,none")
    (data / "patient_data_with_labels.csv").write_text("\n".join(patients) + "\n", encoding="utf-8")
    (data / "text_symptoms_data.csv").write_text("\n".join(symptoms) + "\n", encoding="utf-8")
    return data


def test_prepare_medical_truth_sample_and_task_recognition(tmp_path: Path) -> None:
    workload = prepare_medical(_medical_data(tmp_path), tmp_path / "out", seed=1, latency_scale=0.0, join_rows=8)
    truth = workload.truth
    assert workload.spec["labels"] == ["acne", "dengue", "malaria", "migraine"]
    assert truth["groups"] == {"malaria": 2, "acne": 2, "migraine": 2, "dengue": 2}
    assert truth["infection"] == ["0", "3", "4", "7"]
    assert truth["avg_age"]["malaria"] == 32.0
    assert len(truth["same_pairs"]) == 4
    config = SimulatorConfig.from_file(workload.simulator_config)
    text = json.loads(Path(workload.spec["inputs"]["symptoms"]).read_text().splitlines()[0])["symptoms"]
    instructions = workload.spec["instructions"]
    labels = ", ".join(workload.spec["labels"])
    classify = _ask(config, f"{text}\n{instructions['classify']}. Answer with one of: {labels}.")
    assert classify.simulator.task == "diagnosis" and classify.choices[0].message.content == "malaria"
    infection = _ask(config, f"{text}\n{instructions['infection']}. Answer True or False.")
    assert infection.simulator.task == "infection"


def test_join_sample_takes_two_per_class_in_turn() -> None:
    diagnosis = {i: ("a" if i < 5 else "b" if i < 9 else "c") for i in range(12)}
    sample = join_sample(diagnosis, 6, seed=3)
    assert len(sample) == 6
    assert sorted(diagnosis[i] for i in sample) == ["a", "a", "b", "b", "c", "c"]
    assert same_pairs({i: diagnosis[i] for i in sample}) == {
        tuple(sorted((str(x), str(y))))  # type: ignore[misc]
        for x in sample
        for y in sample
        if x != y and diagnosis[x] == diagnosis[y]
    }


def test_infections_are_diagnoses() -> None:
    assert "pneumonia" in INFECTIONS and "migraine" not in INFECTIONS


def test_generated_tickets_are_unique_and_seeded(tmp_path: Path) -> None:
    tickets = generated_tickets(200, seed=4)
    assert len({t["text"] for t in tickets}) == 200
    assert tickets == generated_tickets(200, seed=4)
    workload = prepare_scaling(50, tmp_path, seed=4)
    assert workload.truth["rows"] == 50
    assert SimulatorConfig.from_file(workload.simulator_config).models[SMALL_MODEL].latency_base_s == 0.0


# scoring of whole answers and tables -----------------------------------------------------------
TRUTH_ENRON = {
    "positives": ["a", "b"],
    "extractions": {"a": [{"sender": "s", "subject": "t"}], "b": [{"sender": "u", "subject": "v"}]},
}


def test_enron_score_from_a_runner_answer() -> None:
    steps = {"pipeline": {"kept": ["a", "c"], "extracted": {"a": {"sender": "s", "subject": "t"}, "c": {}}}}
    quality = enron.score(steps, TRUTH_ENRON)
    assert quality["filter"]["precision"] == 0.5 and quality["filter"]["recall"] == 0.5
    assert quality["extraction"]["accuracy"] == 1.0
    assert enron.score({}, TRUTH_ENRON) == {}


def test_medical_score_covers_only_steps_that_ran() -> None:
    truth = {
        "diagnosis": {"1": "malaria", "2": "acne"},
        "infection": ["1"],
        "groups": {"malaria": 1, "acne": 1},
        "avg_age": {"malaria": 30.0, "acne": 40.0},
        "same_pairs": [["1", "3"]],
    }
    steps = {
        "classify": {"diagnosis": {"1": "malaria", "2": "malaria"}},
        "groupby": {"groups": {"malaria": 2}, "avg_age": {"malaria": 35.0}},
        "self_join": {"same_pairs": [[3, 1], [1, 3]]},
    }
    quality = medical.score(steps, truth)
    assert set(quality) == {"classify", "groupby", "self_join"}
    assert quality["classify"]["accuracy"] == 0.5
    assert quality["groupby"]["relative_l1"] == 1.0 and quality["groupby"]["avg_age_mae"] == 5.0
    assert quality["self_join"]["f1"] == 1.0


def test_scaling_runs_peers_only_up_to_peer_max() -> None:
    assert [r.label for r in scaling.runs_for(10, ["semray", "lotus"], 10, ["plain", "cheap"])] == [
        "semray (default)",
        "lotus (plain)",
        "lotus (cheap)",
    ]


def _row(system: str, **extra: Any) -> dict[str, Any]:
    stats = {
        "calls": 3,
        "models": {
            SMALL_MODEL: {"calls": 2, "prompt_tokens": 100, "completion_tokens": 2, "cost_usd": 0.00001},
            LARGE_MODEL: {"calls": 1, "prompt_tokens": 50, "completion_tokens": 1, "cost_usd": 0.0001},
        },
        "no_match": 0,
        "no_match_rate": 0.0,
    }
    return {
        "system": system,
        "config": "plain",
        "simulator": summarize_stats(stats),
        "wall_s": 1.5,
        "peak_pss_bytes": 1 << 30,
    } | extra


def test_summarize_stats_names_tiers_and_sums() -> None:
    summary = _row("lotus")["simulator"]
    assert summary["tiers"]["small"]["calls"] == 2 and summary["tiers"]["large"]["calls"] == 1
    assert summary["tokens"] == 153 and summary["cost_usd"] == pytest.approx(0.00011)


def test_cost_table_and_gaps_show_every_system() -> None:
    rows = [
        _row("semray", object_store_peak_bytes=1 << 20),
        _row("palimpzest", unsupported={"groupby": "no equi-join"}),
        {"system": "lotus", "config": "cheap", "error": "lotus is not installed"},
    ]
    table = cost_table(rows, lambda row: "q", "quality")
    assert "| semray (plain) | q | 2 / 102 | 1 / 51 | 0.0001 | 1.5 | 1.00 (0.001) | 0.000 |" in table
    assert "| lotus (cheap) | lotus is not installed |" in table
    assert "palimpzest (plain), `groupby`: cannot express — no equi-join" in gaps(rows)


def test_runner_command_says_how_to_install_a_missing_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.workloads import compare

    monkeypatch.setattr(compare, "VENVS_DIR", tmp_path)
    assert "install.sh lotus" in str(runner_command(SystemRun("lotus", "plain"), tmp_path / "spec.json"))
    command = runner_command(SystemRun("semray", "default"), tmp_path / "spec.json")
    assert command[:3] == [sys.executable, "-m", "benchmarks.workloads.semray_runner"]
    assert [r.system for r in select_runs(["palimpzest"])] == ["palimpzest", "palimpzest"]


def test_last_json_line_is_the_answer() -> None:
    assert _last_json('progress...\n{"steps": {}}\n') == {"steps": {}}
    assert _last_json("no json here") is None


def test_benchmarks_skip_without_shared_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEMRAY_SHARED_DATA", str(tmp_path / "absent"))
    for module in (enron, medical):
        assert (
            module.main(["--skip-if-missing", "--results-dir", str(tmp_path / "r"), "--out-dir", str(tmp_path / "o")])
            == 0
        )
        assert "skipped" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_semray_bench_names_the_known_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    from semray.cli import main

    root = Path(__file__).resolve().parents[2]
    assert main(["bench", "--repo", str(root), "no-such-benchmark"]) == 2
    error = capsys.readouterr().err
    assert "known:" in error and "enron" in error and "relational" in error and "scoring" not in error


def test_semray_bench_runs_a_workload_that_skips_without_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from semray.cli import main

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("SEMRAY_SHARED_DATA", str(tmp_path / "absent"))
    options = ["--skip-if-missing", "--results-dir", str(tmp_path / "r"), "--out-dir", str(tmp_path / "o")]
    assert main(["bench", "--repo", str(root), "enron", *options]) == 0
    assert main(["bench", "--repo", str(root), "enron", "--results-dir", str(tmp_path / "r")]) == 2


def test_step_usage_takes_differences_of_cumulative_stats() -> None:
    from benchmarks.workloads.compare import step_usage

    def snapshot(small: int, large: int, no_match: int) -> dict[str, Any]:
        models = {
            SMALL_MODEL: {
                "calls": small,
                "prompt_tokens": 10 * small,
                "completion_tokens": small,
                "cost_usd": 0.1 * small,
            },
            LARGE_MODEL: {
                "calls": large,
                "prompt_tokens": 10 * large,
                "completion_tokens": large,
                "cost_usd": 1.0 * large,
            },
        }
        return {"calls": small + large, "models": models, "no_match": no_match}

    usage = step_usage({"first": snapshot(4, 0, 0), "second": snapshot(4, 2, 1)})
    assert usage["first"]["calls"] == 4 and set(usage["first"]["tiers"]) == {"small"}
    assert usage["second"]["tiers"] == {
        "large": {"calls": 2, "prompt_tokens": 20, "completion_tokens": 2, "rejected": 0, "cost_usd": 2.0}
    }
    assert usage["second"]["tokens"] == 22 and usage["second"]["no_match_rate"] == 0.5


def _usage(tokens: int) -> dict[str, Any]:
    tiers = {"large": {"calls": 2, "prompt_tokens": tokens - 2, "completion_tokens": 2, "rejected": 0, "cost_usd": 0.5}}
    return {"calls": 2, "tokens": tokens, "cost_usd": 0.5, "tiers": tiers, "no_match_rate": 0.0}


def test_medical_markdown_compares_each_step_with_the_best_peer() -> None:
    import argparse

    peer = _row("lotus") | {
        "quality": {"classify": {"accuracy": 0.9}, "self_join": {"f1": 0.8}},
        "step_usage": {"classify": _usage(1000), "self_join": _usage(5000)},
    }
    ours = _row("semray") | {
        "config": "default",
        "quality": {"classify": {"accuracy": 0.95}},
        "step_usage": {"classify": _usage(150)},
        "unsupported": {"self_join": "not executable in semray yet: LoweringError"},
    }
    args = argparse.Namespace(rows=None, join_rows=48, latency_scale=1.0)
    text = medical.markdown([ours, peer], args)
    expected = "classification accuracy: semray (default) 0.950 vs best peer lotus (plain) 0.900 (+0.050) at 0.15x"
    assert expected + " its tokens and 1.00x its dollars — met." in text
    assert "— met." in text
    assert "self-join F1: semray (default) has no result" in text
    assert "| semray (default) | 0.950; 2 large; 150 tok; $0.500 | – | – | cannot express |" in text


def test_enron_markdown_states_the_goal_verdict() -> None:
    quality = {
        "filter": {"precision": 1.0, "recall": 1.0, "f1": 1.0},
        "extraction": {"accuracy": 1.0, "accuracy_over_all_positives": 1.0},
    }
    rows = [_row("semray", quality=quality, config="default"), _row("lotus", quality=quality)]
    text = enron.markdown(rows, 1.0)
    assert (
        "filter F1: semray (default) 1.000 vs best peer lotus (plain) 1.000 (+0.000) at 1.00x its tokens"
        " and 1.00x its dollars — NOT met (tokens)." in text
    )


def test_scaling_goals_report_memory_and_cost_linearity() -> None:
    def finished(rows: int, pss_gib: float, dollars: float) -> dict[str, Any]:
        usage = {"calls": rows, "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": dollars}
        stats = {"calls": rows, "models": {SMALL_MODEL: usage}}
        row = {"system": "semray", "config": "default", "rows": rows, "wall_s": 10.0}
        return row | {"peak_pss_bytes": int(pss_gib * (1 << 30)), "simulator": summarize_stats(stats)}

    runs = [finished(10_000, 1.0, 0.1), finished(100_000, 1.5, 1.0), finished(1_000_000, 2.0, 10.0)]
    goals = scaling.scaling_goals(runs)
    assert goals[0].endswith("1.33x that at 100k — met")
    assert goals[1].endswith("(max/min 1.000) — met")
    too_slow = scaling.too_slow(runs[1:2], "semray", 1_000_000, 60)
    assert too_slow is not None and "100,000 rows" in too_slow
    assert "not measured (largest finished size 100,000)" in scaling.scaling_goals(runs[:2])[0]


def test_in_process_semray_figures_come_from_its_usage() -> None:
    from benchmarks.workloads.compare import in_process, stats_from_semray_usage

    assert in_process({"system": "semray", "semray_serving": "inprocess"})
    assert not in_process({"system": "lotus", "semray_serving": "inprocess"})
    answer = {"steps": {"filter": {"semray_usage": {"calls": 3, "tokens_in": 30, "tokens_out": 3, "dollars": 0.5}}}}
    summary = summarize_stats(stats_from_semray_usage(answer, "default"))
    assert summary["tiers"] == {
        "large": {"calls": 3, "prompt_tokens": 30, "completion_tokens": 3, "rejected": 0, "cost_usd": 0.5}
    }
    assert summary["no_match_rate"] is None
