"""Optimized vs written plans end to end on a local Ray with the simulated tier.

The simulator answers from labels keyed on (row, task) with error rate 0 and the response
cache off, so the optimized plan must return exactly the written plan's rows while paying
for fewer model calls (``Result.usage.calls``). Two semantic operators per query at most: more
actor pools than that do not fit a 2-CPU Ray (tests/pipeline/test_semantic_ray.py).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

import semray
from semray.api import Query
from semray.planner import optimize
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings

pytestmark = pytest.mark.ray

ROWS = 60
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo", "gu", "hi", "jo")
TASKS = (
    TaskSpec(name="urgent", kind="filter", label_column="urgent", true_values=("true",), keywords=("urgent",)),
    TaskSpec(name="severity", kind="score", label_column="severity", keywords=("severity",)),
    TaskSpec(name="details", kind="extract", fields={"city": "city", "amount": "amount"}, keywords=("city", "amount")),
)


@dataclass(frozen=True)
class Tickets:
    table: pa.Table
    serving: ServingConfig


@pytest.fixture(scope="module")
def tickets() -> Tickets:
    rng = random.Random(5)
    texts = [" ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(12)) for _ in range(ROWS)]
    labelled = pa.table(
        {
            "ticket_id": [f"T{i:03d}" for i in range(ROWS)],
            "text": texts,
            "urgent": [rng.choice(("true", "false")) for _ in range(ROWS)],
            "severity": [rng.randint(1, 5) for _ in range(ROWS)],
            "city": [rng.choice(("Oslo", "Lima", "Pune")) for _ in range(ROWS)],
            "amount": [float(rng.randint(1, 900)) for _ in range(ROWS)],
        }
    )
    simulator = SimulatorConfig.from_labels(
        labelled,
        key_column="ticket_id",
        text_columns=["text"],
        tasks=TASKS,
        dataset="tickets-optimizer",
        models={"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)},
    )
    return Tickets(labelled.select(["ticket_id", "text"]), ServingConfig(simulator=simulator, cache_enabled=False))


def run(tickets: Tickets, settings: Settings, query: Query, optimized: bool) -> tuple[Counter[tuple[Any, ...]], int]:
    plan = optimize(query.plan) if optimized else query.plan
    result = Query(plan, settings, tickets.serving).execute(optimize=False)
    rows = result.table.drop_columns(["_rowid"]).to_pylist()
    return Counter(tuple(sorted(row.items())) for row in rows), result.usage.calls


def source(tickets: Tickets, settings: Settings) -> Query:
    return semray.from_arrow(tickets.table, name="tickets", settings=settings)


@pytest.mark.slow  # 15-50 s on 2 cores: `make test` stays under 13 minutes; CI's test-slow runs it
def test_score_moves_above_the_filters_and_pays_for_surviving_rows_only(
    tickets: Tickets, ray_settings: Settings
) -> None:
    query = (
        source(tickets, ray_settings)
        .sem_score("the severity of {text}", output="severity")
        .filter("ticket_id < 'T040'")
        .sem_filter("{text} is urgent")
    )
    written_rows, written_calls = run(tickets, ray_settings, query, optimized=False)
    optimized_rows, optimized_calls = run(tickets, ray_settings, query, optimized=True)
    assert optimized_rows == written_rows and written_rows
    assert written_calls == ROWS + 40
    assert optimized_calls == 40 + sum(written_rows.values())


def test_unused_extraction_field_is_not_asked_for(tickets: Tickets, ray_settings: Settings) -> None:
    query = (
        source(tickets, ray_settings)
        .sem_extract("{text}", "city: text, amount: float")
        .filter("ticket_id >= 'T030'")
        .select("ticket_id", "city")
    )
    written_rows, written_calls = run(tickets, ray_settings, query, optimized=False)
    optimized_rows, optimized_calls = run(tickets, ray_settings, query, optimized=True)
    assert optimized_rows == written_rows and len(written_rows) == 30
    assert (written_calls, optimized_calls) == (ROWS, 30)
