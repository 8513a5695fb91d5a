"""The cost model's figures for set-level operators against what a run on a local Ray paid and output:
a top-k whose ranks a LIMIT's chain draws from above, a blocked join's output rows, and a join of two
columns of one table (which asks each side's texts, no fewer: they are different questions).

120 labelled tickets (topic words plus unique nonsense, so embeddings follow the topic), each with a
short title of its own words; urgency a shuffled total order, independent of the topic. Error rate 0,
the response cache off, so ``Result.usage.calls`` counts model calls. Formulas without a run:
``tests/cost_model/test_topk_cost.py``, ``tests/cost_model/test_embedding_cost.py``.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from test_set_ops_ray import comparisons

import semray
from semray.api import Query
from semray.cost_model.cardinality import source_statistics
from semray.cost_model.estimates import Interval, OperatorEstimate, PlanEstimate
from semray.cost_model.plan_cost import NO_TIER, estimate_plan
from semray.cost_model.prices import profiles_from_serving
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.topk_rule import expected_comparisons
from semray.operators.keys import statistics_key
from semray.operators.semantic import SemJoin, SemTopK
from semray.serving.config import ServingConfig
from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec
from semray.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = 120
TOPICS = {
    "billing": "invoice payment refund charge billing card",
    "shipping": "parcel courier delivery tracking shipping box",
    "technical": "crash error login bug technical server",
}
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo", "gu", "hi", "jo", "be")
URGENT = "the most urgent {text}"
MORE_URGENT = "{l.text} is the most urgent when compared with {r.text}"
TITLE_TOPIC = "{l.title} and {r.text} have the same topic"


def _tickets() -> tuple[pa.Table, ServingConfig, dict[str, int]]:
    rng = random.Random(41)
    names = list(TOPICS)

    def noise(words: int) -> str:
        return " ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(words))

    topics = [names[index % len(names)] for index in range(ROWS)]
    texts = []
    for topic in topics:
        words = TOPICS[topic].split()
        rng.shuffle(words)
        texts.append(f"{' '.join(words)} {noise(10)}")
    titles = [f"re {noise(4)}" for _ in range(ROWS)]
    urgency = list(range(ROWS))
    rng.shuffle(urgency)
    ids = [f"T{index:03d}" for index in range(ROWS)]
    labelled = pa.table(
        {
            "ticket_id": ids,
            "title": titles,
            "text": texts,
            "topic": topics,
            "urgency": urgency,
            "billing": ["true" if topic == "billing" else "false" for topic in topics],
        }
    )
    simulator = SimulatorConfig.from_labels(
        labelled,
        key_column="ticket_id",
        text_columns=["text", "title"],
        dataset="tickets",
        tasks=[
            TaskSpec(
                name="urgency", kind="pair", label_column="urgency", relation="greater", keywords=("most urgent",)
            ),
            TaskSpec(name="topic", kind="label", label_column="topic", keywords=("topic",)),
            TaskSpec(
                name="billing", kind="filter", label_column="billing", true_values=("true",), keywords=("billing",)
            ),
        ],
        models={"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)},
    )
    serving = ServingConfig(simulator=simulator, cache_enabled=False)
    return labelled.select(["ticket_id", "title", "text"]), serving, dict(zip(ids, urgency, strict=True))


@pytest.fixture(scope="module")
def tickets() -> tuple[pa.Table, ServingConfig, dict[str, int]]:
    return _tickets()


@pytest.fixture(scope="module")
def settings(ray_settings: Settings) -> Settings:
    return ray_settings.model_copy(
        update={"semantic_actors": 1, "semantic_batch_size": 128, "join_factorization": None}
    )


def scan(
    tickets: tuple[pa.Table, ServingConfig, dict[str, int]], settings: Settings, rows: pa.Table | None = None
) -> Query:
    table, serving, _ = tickets
    query: Query = semray.from_arrow(table if rows is None else rows, settings=settings).with_serving(serving)
    return query


def estimated(query: Query, statistics: PlanStatistics | None = None) -> PlanEstimate:
    plan = query.optimized().plan
    return estimate_plan(plan, statistics or source_statistics(plan), profiles_from_serving(query._tiers()))


def operator_of(estimate: PlanEstimate, kind: type) -> OperatorEstimate:
    (found,) = (operator for operator in estimate.operators if operator.label.startswith(kind.__name__))
    return found


def test_a_limit_over_a_filter_above_a_top_k_is_priced_at_the_ranks_it_draws(
    tickets: tuple[pa.Table, ServingConfig, dict[str, int]], settings: Settings
) -> None:
    """LIMIT 2 over a billing filter above a top-100: the rounds draw ranks 4, then 8 at a time
    (``set_ops.ranks_in_rounds``) until two billing tickets passed; only those ranks are sorted.
    The estimate (8 ranks of the 120 candidates: 276 comparisons) against the comparisons the run's
    journal holds (361 on these tickets: 12 ranks, after unlucky pivots: the first rank alone took
    333); the whole top-100's 778, what this plan was priced at before, are more than twice them."""
    top = scan(tickets, settings).sem_topk(URGENT, k=100, output="rank")
    limited = top.sem_filter("{text} is about billing").limit(2)
    ranked = operator_of(estimated(limited), SemTopK)
    whole = operator_of(estimated(top), SemTopK)
    assert ranked.rows_in.value == pytest.approx(expected_comparisons(ROWS, 100, ranks=8))
    result = limited.execute()
    paid = comparisons(result, settings)
    assert paid / 1.5 <= ranked.rows_in.value <= 1.5 * paid, (ranked.rows_in.value, paid)
    assert whole.rows_in.value > 2 * paid
    assert result.table.num_rows == 2


def test_a_blocked_joins_output_rows_are_a_share_of_the_pairs_it_judges(
    tickets: tuple[pa.Table, ServingConfig, dict[str, int]], settings: Settings
) -> None:
    """10 left tickets against all 120, blocked: 44 candidates per left row (by topic similarity,
    which says nothing of urgency), 440 pairs judged. With the predicate's share of all pairs known
    (from the labels), the estimate of the rows out is that share of the pairs judged; of every
    pair it would be 2.7 times as many (723), more than the 440 pairs the run can output."""
    table, _, urgency = tickets
    left = table.slice(40, 10)
    joined = scan(tickets, settings, left).sem_join(scan(tickets, settings), MORE_URGENT, "blocked")
    ids = table.column("ticket_id").to_pylist()
    share = sum(urgency[a] > urgency[b] for a in left.column("ticket_id").to_pylist() for b in ids) / (10 * ROWS)
    plan = joined.optimized().plan
    assert isinstance(plan, SemJoin)
    statistics = source_statistics(plan).merged(
        PlanStatistics(selectivity={statistics_key(plan): Interval.exact(share)})
    )
    join = operator_of(estimated(joined, statistics), SemJoin)
    result = joined.execute()
    out = result.table.num_rows
    assert join.rows_in.value == 10 * 44
    assert out / 1.3 <= join.rows_out.value <= 1.3 * out, (join.rows_out.value, out)  # 265.5 against 263
    assert 10 * ROWS * share > 2 * out  # the old figure: a share of every pair


def test_a_join_of_two_columns_of_one_table_asks_each_sides_texts(
    tickets: tuple[pa.Table, ServingConfig, dict[str, int]], settings: Settings
) -> None:
    """``t.title`` against ``t.text`` of one table, factorized: each side question quotes one cell,
    so a row's title and its text are two different prompts (nothing to share); each is asked once.
    The calls are exactly the distinct side prompts (120 titles and 120 texts, all distinct), as
    estimated; reading the same column on both sides is the self-join, one question per row."""
    table, _, _ = tickets
    assert not set(table.column("title").to_pylist()) & set(table.column("text").to_pylist())
    everything = scan(tickets, settings)
    by_columns = everything.sem_join(everything, TITLE_TOPIC, "factorized")
    estimate = estimated(by_columns)
    result = by_columns.execute()
    distinct = len(set(table.column("title").to_pylist())) + len(set(table.column("text").to_pylist()))
    assert result.usage.calls == distinct == 2 * ROWS
    assert sum(op.rows_in.value for op in estimate.operators if op.tier != NO_TIER) == distinct
    assert result.table.num_rows == 3 * (ROWS // 3) ** 2  # same-topic pairs: the topics are exact
    same_column = everything.sem_join(everything, "{l.text} and {r.text} have the same topic", "factorized")
    assert same_column.execute().usage.calls == ROWS
