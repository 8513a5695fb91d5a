"""Pair and aggregate tasks of the simulator: a row paired with itself, comparisons by score,
and counts / most common label over many quoted rows with partial answers combined."""

from __future__ import annotations

import pyarrow as pa
import pytest

from semray.serving.simulator import ModelProfile, Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.aggregates import format_counts, partial_counts

WORDS = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo")


def _text(index: int) -> str:
    return " ".join(
        WORDS[(index * 7 + step * (index + 3)) % len(WORDS)] + WORDS[(index + step) % len(WORDS)] for step in range(12)
    )


TABLE = pa.table(
    {
        "id": [f"r{i}" for i in range(6)],
        "text": [f"{_text(i)} row{i}x row{i}y row{i}z" for i in range(6)],
        "kind": ["flu", "cold", "flu", "flu", "cold", None],
        "quality": [3, 5, 1, 4, 2, 3],
    }
)
TASKS = (
    TaskSpec(name="same_kind", kind="pair", label_column="kind", keywords=("same kind",)),
    TaskSpec(name="better", kind="pair", label_column="quality", relation="greater", keywords=("better than",)),
    TaskSpec(name="kind_counts", kind="aggregate", label_column="kind", keywords=("how many", "each kind")),
    TaskSpec(
        name="common_kind",
        kind="aggregate",
        label_column="kind",
        statistic="most_common",
        keywords=("most common kind",),
    ),
)


@pytest.fixture(scope="module")
def simulator() -> Simulator:
    config = SimulatorConfig.from_labels(
        TABLE,
        key_column="id",
        text_columns=["text"],
        tasks=TASKS,
        dataset="d",
        models={"m": ModelProfile(error_rate=0.0)},
    )
    return Simulator(config)


def ask(simulator: Simulator, prompt: str) -> str:
    return simulator.answer("m", prompt).text


def text(index: int) -> str:
    return str(TABLE.column("text")[index])


def test_pair_of_two_rows_and_of_a_row_with_itself(simulator: Simulator) -> None:
    assert ask(simulator, f"Do '{text(0)}' and '{text(2)}' have the same kind? Yes or no.") == "Yes"
    assert ask(simulator, f"Do '{text(0)}' and '{text(1)}' have the same kind? Yes or no.") == "No"
    assert ask(simulator, f"Do '{text(1)}' and '{text(1)}' have the same kind? Yes or no.") == "Yes"
    assert ask(simulator, f"Do '{text(5)}' and '{text(5)}' have the same kind? Yes or no.") == "No"  # null label


def test_greater_relation_compares_scores_in_quoted_order(simulator: Simulator) -> None:
    assert ask(simulator, f"Is '{text(1)}' better than '{text(0)}'? Yes or no.") == "Yes"
    assert ask(simulator, f"Is '{text(0)}' better than '{text(1)}'? Yes or no.") == "No"
    assert ask(simulator, f"Is '{text(0)}' better than '{text(5)}'? Yes or no.") == "No"  # a tie is not greater


def test_aggregate_counts_and_most_common_over_quoted_rows(simulator: Simulator) -> None:
    records = "\n".join(f"{i}. {text(i)}" for i in range(5))
    assert ask(simulator, f"How many records have each kind?\n\n{records}") == "flu: 3\ncold: 2"
    assert ask(simulator, f"What is the most common kind among these records?\n\n{records}") == "flu"


def test_aggregate_combines_partial_counts_and_answers_partial_steps_as_counts(simulator: Simulator) -> None:
    leaf = ask(simulator, f"What is the most common kind? Give partial counts.\n\n1. {text(1)}\n2. {text(4)}")
    assert leaf == "cold: 2"
    reduced = ask(simulator, f"What is the most common kind? Combine the parts:\n\n{leaf}\n\nflu: 3")
    assert reduced == "flu"
    assert (
        ask(simulator, "How many records have each kind? Combine the parts:\n\ncold: 2\n\nflu: 1\ncold: 1")
        == "cold: 3\nflu: 1"
    )


def test_count_lines_helpers() -> None:
    assert partial_counts("a: 1\nb: 2\nA: 3\nx: 9", ["a", "b"]) == {"a": 4, "b": 2}
    assert format_counts({"b": 2, "a": 2, "c": 0}) == "a: 2\nb: 2"


def test_aggregate_errors_change_one_count() -> None:
    config = SimulatorConfig.from_labels(
        TABLE,
        key_column="id",
        text_columns=["text"],
        tasks=TASKS,
        dataset="d",
        models={"m": ModelProfile(error_rate=1.0)},
    )
    records = "\n".join(f"{i}. {text(i)}" for i in range(5))
    answer = Simulator(config).answer("m", f"How many records have each kind?\n\n{records}").text
    assert answer != "flu: 3\ncold: 2"
    counts = partial_counts(answer, ["flu", "cold"])
    assert abs(counts["flu"] - 3) + abs(counts["cold"] - 2) == 1
