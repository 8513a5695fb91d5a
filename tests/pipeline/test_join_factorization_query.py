"""`Query.with_join_factorization` and `Settings.join_factorization` end to end on a local Ray:
a free-form self-join is checked, runs factorized, finds the pairs, and its calls are what the
cost model estimated for it."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import semray
from semray.api import Query
from semray.cost_model.cardinality import source_statistics
from semray.cost_model.plan_cost import estimate_plan
from semray.cost_model.prices import profiles_from_serving
from semray.operators import SemJoin, walk
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = 48
TOPICS = {
    "billing": "invoice payment refund charge billing card",
    "shipping": "parcel courier delivery tracking shipping box",
    "technical": "crash error login bug technical server",
}
FREE = (
    "Here is one support ticket: {l.text}. Here is another one: {r.text}. "
    "Answer yes if both tickets concern the same topic, and no otherwise."
)
TASKS = (
    TaskSpec(name="same_topic", kind="pair", label_column="topic", keywords=("same topic",)),
    TaskSpec(name="topic", kind="label", label_column="topic", keywords=("topic",)),
)


@dataclass(frozen=True)
class Tickets:
    table: pa.Table
    topics: dict[str, str]
    serving: ServingConfig


@pytest.fixture(scope="module")
def tickets() -> Tickets:
    rng = random.Random(11)
    names = list(TOPICS)
    ids, texts, topics = [], [], []
    for index in range(ROWS):
        topic = names[(index * 7) % len(names)]
        words = TOPICS[topic].split()
        rng.shuffle(words)
        ids.append(f"T{index:03d}")
        texts.append(" ".join(words) + f" ticket number {index}")
        topics.append(topic)
    labelled = pa.table({"ticket_id": ids, "text": texts, "topic": topics})
    simulator = SimulatorConfig.from_labels(
        labelled,
        key_column="ticket_id",
        text_columns=["text"],
        tasks=TASKS,
        dataset="tickets",
        models={"sim-small": ModelProfile(error_rate=0.2), "sim-large": ModelProfile(error_rate=0.0)},
    )
    serving = ServingConfig(simulator=simulator, cache_enabled=False)
    return Tickets(labelled.select(["ticket_id", "text"]), dict(zip(ids, topics, strict=True)), serving)


@pytest.fixture(scope="module")
def settings(ray_settings: Settings) -> Settings:
    return ray_settings.model_copy(update={"semantic_actors": 1, "semantic_batch_size": 128})


def self_join(tickets: Tickets, settings: Settings, instruction: str = FREE) -> Query:
    side: Query = semray.from_arrow(tickets.table, settings=settings).with_serving(tickets.serving)
    return side.sem_join(side, instruction)


def pairs_of(table: pa.Table) -> set[tuple[str, str]]:
    return set(zip(table.column("ticket_id").to_pylist(), table.column("ticket_id_right").to_pylist(), strict=True))


def true_pairs(tickets: Tickets) -> set[tuple[str, str]]:
    return {(a, b) for a in tickets.topics for b in tickets.topics if tickets.topics[a] == tickets.topics[b]}


def the_join(query: Query) -> SemJoin:
    (join,) = (node for node in walk(query.plan) if isinstance(node, SemJoin))
    return join


def test_a_checked_free_form_join_runs_factorized_with_the_calls_the_cost_model_estimates(
    tickets: Tickets, settings: Settings
) -> None:
    checked = self_join(tickets, settings).with_join_factorization(0.9)
    join = the_join(checked)
    assert (join.implementation, join.factor, join.relation) == ("factorized", "topic", "=")
    assert join.agreement is not None and join.agreement >= 0.9
    assert "verified: agreement" in checked.explain()
    result = checked.execute()
    assert pairs_of(result.table) == true_pairs(tickets)
    # A self-join asks its one relation once: n side questions, not n + n, nor n x n pairs.
    assert result.usage.calls <= ROWS < ROWS * ROWS
    runs = checked.optimized().plan
    estimate = estimate_plan(runs, source_statistics(runs), profiles_from_serving(tickets.serving))
    estimated = estimate.operator("").rows_in.value
    assert estimated == ROWS
    assert result.usage.calls <= estimated <= 2 * result.usage.calls  # the stated factor: 2


def test_every_run_applies_the_check_by_default_and_none_turns_it_off(tickets: Tickets, settings: Settings) -> None:
    assert settings.join_factorization == 0.9  # the default: the fixture sets nothing
    query = self_join(tickets, settings)
    assert the_join(query).implementation == "auto"  # the check runs with the run, not when the plan is built
    result = query.execute()
    assert pairs_of(result.table) == true_pairs(tickets)
    # Factorized and asked once (a self-join); the check's calls (none when an earlier test journaled
    # this join's verdict) are counted apart.
    assert result.usage.calls - result.factorization_check.calls <= ROWS
    off = query.with_join_factorization(None)
    assert off.settings.join_factorization is None and off.plan == query.plan
    pairwise = off.limit(3).execute()  # pairwise, in a LIMIT's rounds: a few batches of pairs
    assert len(pairs_of(pairwise.table)) == 3 and pairs_of(pairwise.table) <= true_pairs(tickets)


def test_a_similar_topic_join_is_not_factorized(tickets: Tickets, settings: Settings) -> None:
    similar = "Are {l.text} and {r.text} about a similar topic?"
    query = self_join(tickets, settings, similar).with_join_factorization(0.9)
    assert the_join(query).implementation == "auto"


def check_calls(settings: Settings) -> int:
    """The calls of every join factorization check run journaled under ``settings``."""
    from semray.transactions import list_runs, show_run

    runs = [show_run(settings, summary.run_id) for summary in list_runs(settings)]
    return sum(run.usage.calls for run in runs if run.config.get("purpose") == "join_factorization")


def test_the_check_is_paid_once_per_join_counted_in_the_usage_and_reused_under_a_limit(
    tickets: Tickets, settings: Settings, tmp_path: Path
) -> None:
    from semray.transactions import show_run

    fresh = settings.model_copy(update={"state_dir": tmp_path / "state"})
    query = self_join(tickets, fresh)
    assert "no verdict journaled; the run checks it first (at most" in query.explain()
    first = query.execute()
    paid = first.factorization_check
    assert paid.calls == check_calls(fresh) > 0
    ran = show_run(fresh, first.run_id).usage  # the join's own run: side questions only
    assert first.usage.calls == ran.calls + paid.calls and first.usage.dollars == pytest.approx(
        ran.dollars + paid.dollars
    )
    assert f"join factorization check: {paid.calls} calls" in first.usage_line()
    # The same join under a LIMIT, or under a filter: the verdict is the join's, found journaled.
    limited = query.limit(5)
    assert "[verdict journaled: reused, no call]" in limited.explain()
    second = limited.execute()
    assert second.factorization_check.calls == 0 and check_calls(fresh) == paid.calls
    assert the_join_ran_factorized(second) and len(pairs_of(second.table)) == 5
    third = query.filter("ticket_id <> 'T000'").execute()
    assert third.factorization_check.calls == 0 and check_calls(fresh) == paid.calls
    assert pairs_of(third.table) == {pair for pair in true_pairs(tickets) if pair[0] != "T000"}


def the_join_ran_factorized(result: Any) -> bool:
    return any(isinstance(node, SemJoin) and node.implementation == "factorized" for node in walk(result.plan))


def test_a_budget_the_check_would_pass_stops_the_query_before_it(
    tickets: Tickets, settings: Settings, tmp_path: Path
) -> None:
    from semray.pipeline.runs.budget import BudgetError
    from semray.transactions import list_runs

    assert tickets.serving.simulator is not None
    fee = ModelProfile(error_rate=0.0, price_in_per_million=1.0, price_out_per_million=4.0)
    simulator = tickets.serving.simulator.model_copy(
        update={"models": {**tickets.serving.simulator.models, "sim-large": fee}}
    )
    priced = Tickets(tickets.table, tickets.topics, tickets.serving.model_copy(update={"simulator": simulator}))
    tight = settings.model_copy(update={"state_dir": tmp_path / "state", "max_cost": 0.0001})
    with pytest.raises(BudgetError, match="join factorization check"):
        self_join(priced, tight).execute()
    assert check_calls(tight) == 0 and not list_runs(tight)  # no check run, no query run
    roomy = tight.model_copy(update={"max_cost": 1.0})
    result = self_join(priced, roomy).execute()
    assert result.factorization_check.calls > 0 and 0 < result.factorization_check.dollars < result.usage.dollars <= 1.0


def test_two_reads_of_one_table_are_asked_once_two_tables_on_both_sides(tickets: Tickets, settings: Settings) -> None:
    """A self-join is recognised by structure, not by the object: SQL's ``FROM t a JOIN t b``, one
    table under two names, two reads in the builder each ask every row once (the cache is off); a
    different table on one side is asked on both sides."""
    same = "{l.text} and {r.text} have the same topic"
    match = f"SEM_MATCH('{same}')"
    every = true_pairs(tickets)
    sql = f"SELECT a.ticket_id, b.ticket_id FROM t a JOIN t b ON {match}"
    by_names = f"SELECT a.ticket_id, b.ticket_id FROM t a JOIN u b ON {match}"
    table = tickets.table
    first = semray.from_arrow(table, "t", settings=settings).with_serving(tickets.serving)
    second = semray.from_arrow(table, "u", settings=settings).with_serving(tickets.serving)
    queries = (
        semray.sql(sql, {"t": table}, settings=settings).with_serving(tickets.serving),
        semray.sql(by_names, {"t": table, "u": table}, settings=settings).with_serving(tickets.serving),
        first.sem_join(second, same),
    )
    for query in queries:
        result = query.execute()
        assert the_join_ran_factorized(result) and pairs_of(result.table) == every
        assert result.usage.calls - result.factorization_check.calls == ROWS  # each row asked once
    fewer = table.slice(0, ROWS // 2)
    other = semray.from_arrow(fewer, "t", settings=settings).with_serving(tickets.serving)
    result = first.sem_join(other, same).execute()
    assert result.usage.calls - result.factorization_check.calls == ROWS + ROWS // 2  # both sides asked


def test_a_stream_counts_the_check_it_paid_and_its_run(tickets: Tickets, settings: Settings, tmp_path: Path) -> None:
    """``iter_batches`` has no ``Result``: its stream says what the check paid from the start, and
    once read to the end what the whole query paid (the check and the run), as ``execute`` would."""
    from semray.transactions import show_run

    fresh = settings.model_copy(update={"state_dir": tmp_path / "state"})
    stream = self_join(tickets, fresh).iter_batches()
    paid = stream.factorization_check
    assert paid.calls == check_calls(fresh) > 0 and stream.usage is None and stream.run_id is None
    batches = list(stream)
    assert "_rowid" not in batches[0].column_names
    found = {
        (a, b)
        for batch in batches
        for a, b in zip(batch["ticket_id"].to_pylist(), batch["ticket_id_right"].to_pylist(), strict=True)
    }
    assert found == true_pairs(tickets)
    assert stream.run_id is not None and stream.usage is not None
    ran = show_run(fresh, stream.run_id).usage
    assert ran.calls == ROWS  # a self-join's one side question per row
    assert stream.usage == ran + paid
