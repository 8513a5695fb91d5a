"""Set-level semantic operators end to end on a local Ray, against the simulator's labels.

One labelled ticket table (topic words plus unique nonsense, so embeddings follow the topic
and the simulator matches every row) and one serving configuration for the module, so the
tiers deploy once. Error rate 0 unless a test says otherwise; the response cache is off, so
``Result.usage.calls`` counts model calls.
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
from semray.pipeline.lowering import set_ops as lower_set_ops
from semray.pipeline.runs.execute import Result
from semray.pipeline.stages.set_ops import VECTOR
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings
from semray.transactions.batches import committed_table
from semray.transactions.journal import JOURNAL_NAME, read_journal
from semray.transactions.records import BatchCommitted
from semray.transactions.registry import run_dir

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # minutes on 2 cores: `make test-slow` (CI runs it)

ROWS = 24
TOPICS = {
    "billing": "invoice payment refund charge billing card",
    "shipping": "parcel courier delivery tracking shipping box",
    "technical": "crash error login bug technical server",
}
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo", "gu", "hi", "jo", "be")
TASKS = (
    TaskSpec(name="same_topic", kind="pair", label_column="topic", keywords=("same topic",)),
    TaskSpec(name="topic", kind="label", label_column="topic", keywords=("topic",)),
    TaskSpec(name="billing", kind="filter", label_column="billing", true_values=("true",), keywords=("about billing",)),
    TaskSpec(name="urgency", kind="pair", label_column="urgency", relation="greater", keywords=("most urgent",)),
    TaskSpec(name="topic_counts", kind="aggregate", label_column="topic", keywords=("how many", "each topic")),
    TaskSpec(
        name="common_topic", kind="aggregate", label_column="topic", statistic="most_common", keywords=("most common",)
    ),
)


@dataclass(frozen=True)
class Tickets:
    table: pa.Table
    labels: dict[str, dict[str, Any]]
    serving: ServingConfig


def _tickets() -> Tickets:
    rng = random.Random(5)
    names = list(TOPICS)
    ids, texts, topics, urgency = [], [], [], []
    for index in range(ROWS):
        topic = names[index % len(names)]
        words = TOPICS[topic].split()
        rng.shuffle(words)
        noise = " ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(10))
        ids.append(f"T{index:03d}")
        texts.append(f"{' '.join(words)} {noise}")
        topics.append(topic)
        urgency.append(index)  # distinct: a total order to rank by
    texts[-1] = texts[-2]  # a duplicate text (same topic? make it so)
    topics[-1] = topics[-2]
    billing = ["true" if topic == "billing" else "false" for topic in topics]
    labelled = pa.table({"ticket_id": ids, "text": texts, "topic": topics, "urgency": urgency, "billing": billing})
    simulator = SimulatorConfig.from_labels(
        labelled,
        key_column="ticket_id",
        text_columns=["text"],
        tasks=TASKS,
        dataset="tickets",
        models={"sim-small": ModelProfile(error_rate=0.2), "sim-large": ModelProfile(error_rate=0.0)},
    )
    labels = {row["ticket_id"]: row for row in labelled.to_pylist()}
    return Tickets(
        labelled.select(["ticket_id", "text"]), labels, ServingConfig(simulator=simulator, cache_enabled=False)
    )


@pytest.fixture(scope="module")
def tickets() -> Tickets:
    return _tickets()


@pytest.fixture(scope="module")
def settings(ray_settings: Settings) -> Settings:
    """One verification actor and larger batches: fewer actor starts, which dominate these tests."""
    return ray_settings.model_copy(update={"semantic_actors": 1, "semantic_batch_size": 128})


def query(tickets: Tickets, settings: Settings, table: pa.Table | None = None) -> Query:
    served: Query = semray.from_arrow(table if table is not None else tickets.table, settings=settings).with_serving(
        tickets.serving
    )
    return served


def pairs_of(table: pa.Table) -> set[tuple[str, str]]:
    return set(zip(table.column("ticket_id").to_pylist(), table.column("ticket_id_right").to_pylist(), strict=True))


def true_pairs(tickets: Tickets, left: list[str], right: list[str]) -> set[tuple[str, str]]:
    topic = {key: row["topic"] for key, row in tickets.labels.items()}
    return {(a, b) for a in left for b in right if topic[a] == topic[b]}


JOIN = "{l.text} and {r.text} have the same topic"


def embedding_calls(result: Result, settings: Settings) -> int:
    """Calls of the run's journaled commits whose table holds vectors (embeddings), all attempts."""
    folder = run_dir(settings, result.run_id or "")
    commits = [record for record in read_journal(folder / JOURNAL_NAME).records if isinstance(record, BatchCommitted)]
    return sum(commit.usage.calls for commit in commits if VECTOR in committed_table(folder, commit).column_names)


def test_factorized_equals_nested_at_error_rate_zero(tickets: Tickets, settings: Settings) -> None:
    left, right = tickets.table.slice(0, 9), tickets.table.slice(9, ROWS - 9)
    nested = query(tickets, settings, left).sem_join(query(tickets, settings, right), JOIN, "nested").execute()
    factorized = query(tickets, settings, left).sem_join(query(tickets, settings, right), JOIN, "factorized").execute()
    expected = true_pairs(tickets, left.column("ticket_id").to_pylist(), right.column("ticket_id").to_pylist())
    assert pairs_of(nested.table) == expected == pairs_of(factorized.table)
    # Two right rows share a text: their pairs' prompts are the same, answered once per batch.
    assert nested.usage.calls == left.num_rows * len(set(right.column("text").to_pylist()))
    assert factorized.usage.calls == left.num_rows + right.num_rows - 1
    assert nested.table.column_names == ["_rowid", "ticket_id", "text", "ticket_id_right", "text_right"]
    assert sorted(nested.table.column("_rowid").to_pylist()) == sorted(factorized.table.column("_rowid").to_pylist())


def test_a_factorized_join_under_a_limit_asks_the_right_side_and_only_the_left_rows_it_needs(
    tickets: Tickets, settings: Settings
) -> None:
    left, right = tickets.table, tickets.table.slice(0, 12)  # 4 right rows of each topic, distinct texts
    joined = query(tickets, settings, left).sem_join(query(tickets, settings, right), JOIN, "factorized")
    limited = joined.limit(3).execute()
    everything = true_pairs(tickets, left.column("ticket_id").to_pylist(), right.column("ticket_id").to_pylist())
    found = pairs_of(limited.table)
    assert len(found) == 3 and found <= everything
    # The right side once (12 calls), then a first round of 3 / (0.1 x 12) -> 3 left rows, whose
    # 12 pairs already cover the LIMIT: nothing more is asked, nothing is in flight at the stop.
    assert limited.usage.calls == right.num_rows + 3
    assert {a for a, _ in found} <= set(left.column("ticket_id").to_pylist()[:3])
    whole = joined.execute()
    assert pairs_of(whole.table) == everything and whole.usage.calls == left.num_rows - 1 + right.num_rows


def test_a_factorized_self_join_asks_each_row_once(tickets: Tickets, settings: Settings) -> None:
    """Both sides are one relation asked one question: n calls (the cache is off), not 2n, and
    under a LIMIT only the rows whose pairs the LIMIT needs."""
    everything = query(tickets, settings)
    joined = everything.sem_join(everything, JOIN, "factorized")
    ids = tickets.table.column("ticket_id").to_pylist()
    whole = joined.execute()
    assert pairs_of(whole.table) == true_pairs(tickets, ids, ids)
    assert whole.usage.calls == ROWS - 1  # the two identical texts share a batch: one call
    assert "SelfJoin" in joined.explain()
    limited = joined.limit(5).execute()
    found = pairs_of(limited.table)
    assert len(found) == 5 and found <= true_pairs(tickets, ids, ids)
    # First round sqrt(5 / 0.1) -> 8 rows: 8 rows of 3 topics hold at least 8 + 2 x 3 = 22 pairs.
    assert limited.usage.calls == 8
    assert {a for a, _ in found} | {b for _, b in found} <= set(ids[:8])


def test_self_join_with_duplicates_blocked_covers_all_when_blocks_are_large(
    tickets: Tickets, settings: Settings
) -> None:
    base = tickets.table.slice(ROWS - 6, 6)  # ends with two rows of identical text
    ids = base.column("ticket_id").to_pylist()
    blocked = query(tickets, settings, base).sem_join(query(tickets, settings, base), JOIN, "blocked").execute()
    assert pairs_of(blocked.table) == true_pairs(tickets, ids, ids)  # 6 <= 8 candidates per row: every pair
    assert (ids[-1], ids[-2]) in pairs_of(blocked.table) and (ids[-1], ids[-1]) in pairs_of(blocked.table)


def test_empty_and_one_row_sides(tickets: Tickets, settings: Settings) -> None:
    everything = query(tickets, settings)
    nothing = query(tickets, settings).filter("ticket_id = 'none'")
    result = nothing.sem_join(everything, JOIN, "factorized").execute()
    # The right side is still asked; its two identical texts cost one call when they share a batch.
    assert result.table.num_rows == 0 and ROWS - 1 <= result.usage.calls <= ROWS
    result = everything.sem_join(nothing, JOIN, "blocked").execute()
    # No pair to judge; the left side's embeddings are paid and counted (one call per text).
    assert result.table.num_rows == 0 and result.usage.calls == ROWS
    assert embedding_calls(result, settings) == ROWS
    one = query(tickets, settings, tickets.table.slice(0, 1))
    result = one.sem_join(everything, JOIN).execute()
    ids = tickets.table.column("ticket_id").to_pylist()
    assert pairs_of(result.table) == true_pairs(tickets, ids[:1], ids)
    assert ROWS - 1 <= result.usage.calls <= ROWS  # auto: nested for 1 x 24 pairs (two share a prompt)


def test_topk_ranks_by_pairwise_comparisons(tickets: Tickets, settings: Settings) -> None:
    k = 4
    result = query(tickets, settings).sem_topk("the most urgent {text}", k=k, output="rank").execute()
    ranked = result.table.sort_by("rank")
    expected = sorted(tickets.labels, key=lambda key: -tickets.labels[key]["urgency"])[:k]
    assert ranked.column("ticket_id").to_pylist() == expected
    assert ranked.column("rank").to_pylist() == list(range(1, k + 1))
    # Partial quicksort: about 2n + 2k ln k comparisons expected, one batch per round; beside them
    # the prefilter's embeddings (one per row) and the criterion's (one) are counted in the usage.
    assert embedding_calls(result, settings) == ROWS + 1
    assert ROWS + 1 < result.usage.calls <= 5 * ROWS + ROWS + 1


def comparisons(result: Result, settings: Settings) -> int:
    """A top-k's comparisons in a run: the calls of its operator key (the one that journaled the
    criterion's embedding, a commit of no rows) less that one embedding."""
    folder = run_dir(settings, result.run_id or "")
    commits = [record for record in read_journal(folder / JOURNAL_NAME).records if isinstance(record, BatchCommitted)]
    (key,) = {c.operator_key for c in commits if not c.row_ids and VECTOR in committed_table(folder, c).column_names}
    return sum(commit.usage.calls for commit in commits if commit.operator_key == key) - 1


def test_a_limit_ranks_only_the_top_k_rows_it_needs(tickets: Tickets, settings: Settings) -> None:
    """LIMIT m < k over a top-k runs as the top m (same calls); a LIMIT over a filter above a top-k
    ranks only the ranks the filter reads, and returns the first passing rows of the full ranking."""
    urgent = "the most urgent {text}"
    ten = query(tickets, settings).sem_topk(urgent, k=10, output="rank")
    limited = ten.limit(2).execute()
    two = query(tickets, settings).sem_topk(urgent, k=2, output="rank").execute()
    whole = ten.execute()
    assert (
        limited.table.sort_by("rank").column("ticket_id").to_pylist()
        == two.table.sort_by("rank").column("ticket_id").to_pylist()
        == whole.table.sort_by("rank").column("ticket_id").to_pylist()[:2]
    )
    assert comparisons(limited, settings) == comparisons(two, settings) < comparisons(whole, settings)

    filtered = query(tickets, settings).sem_topk(urgent, k=12, output="rank").sem_filter("{text} is about billing")
    full = filtered.execute()
    first = filtered.limit(1).execute()
    expected = full.table.sort_by("rank").column("ticket_id").to_pylist()[:1]
    assert first.table.column("ticket_id").to_pylist() == expected  # exact: the full ranking's first passing row
    assert comparisons(first, settings) < comparisons(full, settings)


def comparison_usage(result: Result, settings: Settings) -> tuple[int, int]:
    """(calls, prompt tokens) of a top-k's comparisons in a run: its operator key's commits less
    the criterion's embedding (the commit of no rows)."""
    folder = run_dir(settings, result.run_id or "")
    commits = [record for record in read_journal(folder / JOURNAL_NAME).records if isinstance(record, BatchCommitted)]
    (criterion,) = [c for c in commits if not c.row_ids and VECTOR in committed_table(folder, c).column_names]
    compared = [c for c in commits if c.operator_key == criterion.operator_key and c is not criterion]
    return sum(c.usage.calls for c in compared), sum(c.usage.tokens_in for c in compared)


def test_agg_is_hierarchical_over_a_small_context_and_counts_by_group(
    tickets: Tickets, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = query(tickets, settings).sem_agg("How many records have each topic? {text}").execute()
    counts = Counter(row["topic"] for row in tickets.labels.values())
    expected = "\n".join(f"{name}: {n}" for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    assert whole.table.column("answer").to_pylist() == [expected]
    assert whole.usage.calls == 1
    monkeypatch.setattr(lower_set_ops, "AGG_CONTEXT_TOKENS", 450)
    split = query(tickets, settings).sem_agg("Which topic is the most common among {text}?").execute()
    assert split.table.column("answer").to_pylist() == [counts.most_common(1)[0][0]]
    assert split.usage.calls > 2  # leaves and at least one combine


def test_agg_by_key_and_over_no_rows(tickets: Tickets, settings: Settings) -> None:
    table = tickets.table.append_column("shard", pa.array([i % 2 for i in range(ROWS)], pa.int64()))
    result = query(tickets, settings, table).sem_agg("How many records have each topic? {text}", by="shard").execute()
    assert sorted(result.table.column("shard").to_pylist()) == [0, 1]
    assert result.usage.calls == 2
    empty = query(tickets, settings).filter("ticket_id = 'none'").sem_agg("How many records have each topic? {text}")
    table = empty.execute().table
    assert table.num_rows == 1 and table.column("answer").to_pylist() == [None]


def test_search_returns_k_rows_with_scores_in_each_mode(tickets: Tickets, settings: Settings) -> None:
    k = 5
    for mode in ("vector", "fts", "hybrid"):
        result = query(tickets, settings).sem_search("text", "courier parcel delivery", k=k, mode=mode).execute()  # type: ignore[arg-type]
        table = result.table
        assert table.num_rows == k, mode
        scores = table.column("score").to_pylist()
        assert scores == sorted(scores, reverse=True), mode
        topics = [tickets.labels[key]["topic"] for key in table.column("ticket_id").to_pylist()]
        assert topics.count("shipping") >= 4, (mode, topics)


def embedding_usage(result: Result, settings: Settings) -> tuple[int, int]:
    """(calls, tokens) of the run's journaled embeddings, all attempts."""
    folder = run_dir(settings, result.run_id or "")
    commits = [record for record in read_journal(folder / JOURNAL_NAME).records if isinstance(record, BatchCommitted)]
    embedded = [commit for commit in commits if VECTOR in committed_table(folder, commit).column_names]
    return sum(commit.usage.calls for commit in embedded), sum(commit.usage.tokens_in for commit in embedded)


def test_the_estimate_prices_what_a_blocked_join_and_a_top_k_embed(tickets: Tickets, settings: Settings) -> None:
    """EXPLAIN's embedding lines against the run's usage: the texts embedded exactly, their tokens
    (unmeasured: 100 per cell) and all calls within a factor of 10 (the same order of magnitude).
    The blocked join is a self-join: its sides' texts are the same, embedded once (24, not 48)."""
    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.plan_cost import NO_TIER, estimate_plan
    from semray.cost_model.prices import profiles_from_serving

    blocked = query(tickets, settings).sem_join(query(tickets, settings), JOIN, "blocked")
    top = query(tickets, settings).sem_topk("the most urgent {text}", k=3, output="rank")
    for built, texts in ((blocked, ROWS), (top, ROWS + 1)):
        assert "embeds the " in built.explain()
        plan = built.optimized().plan
        estimate = estimate_plan(plan, source_statistics(plan), profiles_from_serving(tickets.serving))
        parts = [part for operator in estimate.operators for part in operator.embeddings]
        calls = sum(operator.rows_in.value for operator in estimate.operators if operator.tier != NO_TIER)
        result = built.execute()
        embedded_calls, embedded_tokens = embedding_usage(result, settings)
        assert sum(part.calls.value for part in parts) == embedded_calls == texts
        tokens = sum(part.input_tokens.value for part in parts)
        assert embedded_tokens / 10 <= tokens <= 10 * embedded_tokens
        assert result.usage.calls / 10 <= calls + texts <= 10 * result.usage.calls


def test_the_estimate_prices_a_top_ks_comparisons_as_the_run_asks_them(tickets: Tickets, settings: Settings) -> None:
    """A top-k's calls are its partial quicksort's comparisons over the prefilter's candidates
    (``cost_model/topk_rule.py``), each prompt quoting two records: the estimate with measured
    prompt tokens against the run's journal. Its pivots are one draw (a hash of each segment):
    79 comparisons on these tickets against 47.6 expected for 24 rows and k=3."""
    from dataclasses import replace

    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.estimates import Interval
    from semray.cost_model.plan_cost import estimate_plan
    from semray.cost_model.prices import profiles_from_serving
    from semray.cost_model.tokens import PromptTokens
    from semray.operators.keys import statistics_key
    from semray.operators.semantic import SemTopK

    top = query(tickets, settings).sem_topk("the most urgent {text}", k=3, output="rank")
    plan = top.optimized().plan
    assert isinstance(plan, SemTopK)
    counted = PromptTokens().count_rows(plan, tickets.table.to_pylist())
    measured = replace(source_statistics(plan), tokens_per_row={statistics_key(plan): Interval.exact(counted.mean())})
    operator = estimate_plan(plan, measured, profiles_from_serving(tickets.serving)).operator("")
    result = top.execute()
    asked, tokens = comparison_usage(result, settings)
    estimated_tokens = operator.input_tokens.value - sum(part.input_tokens.value for part in operator.embeddings)
    assert asked / 2 <= operator.rows_in.value <= asked  # 47.6 against 79 (the old figure: 24 calls)
    assert 0.8 <= (estimated_tokens / operator.rows_in.value) / (tokens / asked) <= 1.25  # tokens per comparison
    embedded, _ = embedding_usage(result, settings)
    assert result.usage.calls / 1.5 <= operator.rows_in.value + embedded <= result.usage.calls * 1.5  # 72.6 of 104
