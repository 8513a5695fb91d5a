"""Set-level operators without a cluster: the top-k sort, aggregation chunking (every row in
exactly one leaf), blocking, journaled asking, prompt templates, lowering and the search index.

The model is the simulator answering in-process through a stand-in for ``TierHandles``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import semray
from semray.catalog.search_index import SearchIndex
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.driver import lower
from semray.pipeline.stages.base import render_stages
from semray.pipeline.stages.relational import BroadcastJoinStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.pipeline.stages.set_ops import VECTOR, BlockStage, EmbedStage
from semray.pipeline.workers.aggregate import AggregationTrace, aggregate_group, pack, record_budget
from semray.pipeline.workers.blocking import blocking_recall, candidate_pairs, nearest
from semray.pipeline.workers.journaled_questions import JournaledAsker
from semray.pipeline.workers.top_k import partial_quicksort
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.serving.prompts.set_ops import pair_template, side_template
from semray.serving.simulator import ModelProfile, Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.aggregates import partial_counts
from semray.settings import Settings
from semray.transactions import BatchLedger
from semray.transactions.journal import JOURNAL_NAME, JournalWriter

MEDICAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "medical"


class SimulatedTiers:
    """``TierHandles.generate`` answered by an in-process simulator; records every request."""

    def __init__(self, simulator: Simulator, model: str = "m") -> None:
        self.simulator = simulator
        self.model = model
        self.requests: list[ModelRequest] = []

    def generate(self, tier: str, requests: list[ModelRequest]) -> list[ModelResponse]:
        self.requests.extend(requests)
        responses = []
        for request in requests:
            outcome = self.simulator.answer(self.model, f"{request.system}\n{request.prompt}")
            text = outcome.text.strip()
            usage = Usage(input_tokens=outcome.prompt_tokens, output_tokens=outcome.completion_tokens)
            responses.append(
                ModelResponse(text=text, value=text, confidence=None, usage=usage, request_id=request.request_id)
            )
        return responses


def _words(index: int, rng: random.Random) -> str:
    syllables = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo")
    return " ".join("".join(rng.choice(syllables) for _ in range(3)) for _ in range(12)) + f" row{index}"


def _records(rows: int) -> tuple[list[str], list[str]]:
    rng = random.Random(3)
    texts = [_words(index, rng) for index in range(rows)]
    kinds = [rng.choice(("flu", "cold", "rash")) for _ in range(rows)]
    return texts, kinds


def _simulator(texts: list[str], kinds: list[str], error: float = 0.0) -> Simulator:
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts, "kind": kinds})
    tasks = [
        TaskSpec(name="kind_counts", kind="aggregate", label_column="kind", keywords=("how many", "each kind")),
        TaskSpec(
            name="common", kind="aggregate", label_column="kind", statistic="most_common", keywords=("most common",)
        ),
    ]
    config = SimulatorConfig.from_labels(
        table, key_column="id", text_columns=["text"], tasks=tasks, models={"m": ModelProfile(error_rate=error)}
    )
    return Simulator(config)


# top-k ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(0, 3), (1, 1), (5, 10), (50, 5), (400, 10), (64, 64)])
def test_partial_quicksort_returns_the_best_k_in_order(n: int, k: int) -> None:
    items = list(range(n))
    random.Random(n + k).shuffle(items)
    rounds: list[int] = []

    def better(pairs: list[tuple[int, int]]) -> list[bool]:
        rounds.append(len(pairs))
        return [a > b for a, b in pairs]

    order, asked = partial_quicksort(items, k, better)
    assert order == sorted(items, reverse=True)[:k]
    assert asked == sum(rounds)
    if n >= 50 and k < n:
        assert asked <= 3 * n + 4 * k * math.log(k), (asked, n, k)
        assert len(rounds) <= 4 * math.log2(n) + 8  # batched: a few rounds, not one call per comparison


# aggregation ------------------------------------------------------------------------------------


def test_pack_keeps_order_budget_and_puts_every_item_in_one_chunk() -> None:
    sizes = [random.Random(7).randint(1, 30) for _ in range(200)] + [500]
    chunks = pack(sizes, budget=60)
    assert [index for chunk in chunks for index in chunk] == list(range(len(sizes)))
    for chunk in chunks:
        assert sum(sizes[i] for i in chunk) <= 60 or len(chunk) == 1
    assert pack([], 10) == []


def test_hierarchical_aggregation_sends_every_row_to_exactly_one_leaf_and_answers_right() -> None:
    texts, kinds = _records(120)
    tiers = SimulatedTiers(_simulator(texts, kinds))
    asker = JournaledAsker(tiers, "large", None, "op")  # type: ignore[arg-type]
    trace = AggregationTrace()
    question = "How many records have each kind? the text"
    answer = aggregate_group("all", question, texts, 600, asker, trace)
    assert len(trace.leaves) > 2 and trace.combines >= 1
    assert sorted(i for leaf in trace.leaves for i in leaf) == list(range(len(texts)))
    leaves = [r for r in tiers.requests if ":leaf:" in r.request_id]
    assert len(leaves) == len(trace.leaves)
    for index, text in enumerate(texts):  # each record's text is in exactly one leaf prompt
        assert sum(text in request.prompt for request in leaves) == 1, index
    assert partial_counts(answer or "", ["flu", "cold", "rash"]) == Counter(kinds)
    common = aggregate_group("all", "What is the most common kind among the text?", texts, 600, asker)
    assert common == Counter(kinds).most_common(1)[0][0]


def test_combine_steps_nest_when_partial_answers_exceed_the_context() -> None:
    texts, kinds = _records(60)
    tiers = SimulatedTiers(_simulator(texts, kinds))
    asker = JournaledAsker(tiers, "large", None, "op")  # type: ignore[arg-type]
    trace = AggregationTrace()
    question = "How many records have each kind? the text"
    budget = record_budget(question, 330)
    assert budget < 40  # about one record per leaf
    answer = aggregate_group("all", question, texts, 330, asker, trace)
    assert trace.levels >= 2
    assert partial_counts(answer or "", ["flu", "cold", "rash"]) == Counter(kinds)


@pytest.mark.skipif(not MEDICAL.exists(), reason="../shared/data/medical is absent")
def test_medical_counts_and_most_common_diagnosis_from_labels() -> None:
    import pyarrow.csv as pa_csv

    texts_file = pa_csv.read_csv(MEDICAL / "text_symptoms_data.csv").slice(0, 300)
    labels_file = pa_csv.read_csv(MEDICAL / "patient_data_with_labels.csv").select(["patient_id", "text_diagnosis"])
    table = texts_file.join(labels_file, "patient_id").sort_by("symptom_id")
    texts = table.column("symptoms").to_pylist()
    labels = Counter(table.column("text_diagnosis").to_pylist())
    tasks = [
        TaskSpec(
            name="counts", kind="aggregate", label_column="text_diagnosis", keywords=("how many", "each diagnosis")
        ),
        TaskSpec(
            name="common",
            kind="aggregate",
            label_column="text_diagnosis",
            statistic="most_common",
            keywords=("most common",),
        ),
    ]
    config = SimulatorConfig.from_labels(
        table, key_column="symptom_id", text_columns=["symptoms"], tasks=tasks, models={"m": ModelProfile(error_rate=0)}
    )
    tiers = SimulatedTiers(Simulator(config))
    asker = JournaledAsker(tiers, "large", None, "op")  # type: ignore[arg-type]
    trace = AggregationTrace()
    counts = aggregate_group("all", "How many patients have each diagnosis? the symptoms", texts, 4096, asker, trace)
    got = partial_counts(counts or "", list(labels))
    assert len(trace.leaves) > 1
    # Identical and near-identical texts of different diagnoses are read as one another (the
    # simulator cannot tell them apart): allow 3% of the rows to be miscounted.
    assert sum(abs(got[name] - labels[name]) for name in labels | got) <= 0.03 * len(texts)
    common = aggregate_group("c", "What is the most common diagnosis among the symptoms?", texts, 4096, asker)
    top = max(labels.values())
    assert labels[common] >= top - 1


# blocking ---------------------------------------------------------------------------------------


def test_nearest_candidates_and_recall() -> None:
    rng = np.random.default_rng(0)
    right = rng.normal(size=(20, 8)).astype(np.float32)
    right /= np.linalg.norm(right, axis=1, keepdims=True)
    left = right[:5] + 0.01
    chosen = nearest(left, right, 3)
    assert chosen.shape == (5, 3) and chosen[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert nearest(left, right, 50).shape == (5, 20)
    assert nearest(left[:0], right, 3).shape == (0, 0)
    assert blocking_recall([("a", "b")], []) is None


def test_candidate_pairs_rename_and_combine_row_ids() -> None:
    vectors = pa.array([[1.0, 0.0], [0.0, 1.0]], pa.list_(pa.float32()))
    left = pa.table({"_rowid": ["1", "2"], "text": ["x", "y"], VECTOR: vectors})
    right = pa.table({"_rowid": ["a", "b"], "text": ["p", "q"], VECTOR: vectors})
    stage = BlockStage(
        per_row=1, left_names=("_rowid", "text"), right_names=(("text", "text_right"),), right_columns=()
    )
    pairs = candidate_pairs(left, right, stage)
    assert pairs.column_names == ["_rowid", "text", "text_right"]
    assert pairs.column("_rowid").to_pylist() == ["1*a", "2*b"]
    assert candidate_pairs(left.slice(0, 0), right, stage).num_rows == 0
    empty_right = pa.table(
        {"_rowid": pa.array([], pa.string()), "text": pa.array([], pa.string()), VECTOR: vectors[:0]}
    )
    assert candidate_pairs(left, empty_right, stage).num_rows == 0


# asking, journaled ------------------------------------------------------------------------------


def test_journaled_answers_are_not_paid_for_again(tmp_path: Path) -> None:
    texts, kinds = _records(10)
    tiers = SimulatedTiers(_simulator(texts, kinds))
    JournalWriter.create(tmp_path / JOURNAL_NAME)
    ledger = BatchLedger(tmp_path, attempt=1)
    requests = [
        ModelRequest(prompt=f"How many records have each kind? 1. {text}", request_id=f"q{i}")
        for i, text in enumerate(texts)
    ]
    first = JournaledAsker(tiers, "large", ledger, "op")  # type: ignore[arg-type]
    answers = first.ask(requests)
    assert first.usage.calls == len(texts) and all(answers.values())
    again = JournaledAsker(tiers, "large", BatchLedger(tmp_path, attempt=2), "op")  # type: ignore[arg-type]
    assert again.ask(requests) == answers and again.usage.calls == 0
    assert len(tiers.requests) == len(texts)


# templates and lowering -------------------------------------------------------------------------


def test_join_templates() -> None:
    assert pair_template("{l.a} vs {r.a} {{lit}}", {"a": "a_right"}) == "{a} vs {a_right} {{lit}}"
    template = side_template("Is {l.title} by the author of {r.book}? {{x}}", "r")
    assert template.endswith("{book}") and "{title}" not in template and "the first text" in template


def test_each_join_implementation_lowers_to_its_stages() -> None:
    settings = Settings(state_dir=Path("/tmp/sr-unused"))
    left = semray.from_arrow(pa.table({"text": ["a", "b"]}), settings=settings).plan
    right = semray.from_arrow(pa.table({"text": ["c"], "n": [1]}), settings=settings).plan
    plans = {
        name: lower(SemJoin(left=left, right=right, instruction="{l.text} ~ {r.text}", implementation=name), settings)
        for name in ("nested", "blocked", "factorized", "auto")
    }
    assert isinstance(plans["nested"], SemanticStage) and isinstance(plans["nested"].inputs[0], BroadcastJoinStage)
    assert plans["nested"].task.instruction == "{text} ~ {text_right}"
    blocked = plans["blocked"].inputs[0]
    assert isinstance(blocked, BlockStage) and all(isinstance(s, EmbedStage) for s in blocked.inputs)
    assert isinstance(plans["factorized"], BroadcastJoinStage)
    assert render_stages(plans["auto"]) == render_stages(plans["nested"])  # 2 pairs: nested


def test_a_blocked_join_of_one_relation_embeds_it_once_and_of_two_columns_embeds_each() -> None:
    """The same rows through the same cells on both sides: one EmbedStage, both sides of the
    BlockStage (its texts are the same). Two columns of one table: two texts per row, two stages."""
    settings = Settings(state_dir=Path("/tmp/sr-unused"))
    table = pa.table({"title": ["a", "b"], "text": ["c", "d"]})
    left = semray.from_arrow(table, settings=settings).plan
    right = semray.from_arrow(table, "again", settings=settings).plan  # another read of one table
    same = lower(SemJoin(left=left, right=right, instruction="{l.text} ~ {r.text}", implementation="blocked"), settings)
    (embedded,) = same.inputs[0].inputs
    assert isinstance(embedded, EmbedStage) and embedded.task.instruction == "{text}"
    columns = SemJoin(left=left, right=right, instruction="{l.title} ~ {r.text}", implementation="blocked")
    two = lower(columns, settings).inputs[0].inputs
    assert [stage.task.instruction for stage in two if isinstance(stage, EmbedStage)] == ["{title}", "{text}"]


# search index -----------------------------------------------------------------------------------


def test_search_index_modes(tmp_path: Path) -> None:
    texts = ["red apple pie", "green apple", "blue sky", "apple apple", "nothing here"]
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(5, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = SearchIndex.build(tmp_path / "idx", texts, vectors, full_text=True)
    vector_hits = index.search("vector", "", vectors[2], k=2)
    assert vector_hits[0][0] == 2 and vector_hits[0][1] == pytest.approx(1.0, abs=1e-5)
    fts_hits: list[Any] = index.search("fts", "apple", None, k=10)
    assert {position for position, _ in fts_hits} == {0, 1, 3}
    hybrid = index.search("hybrid", "apple", vectors[2], k=3)
    assert len(hybrid) == 3 and [s for _, s in hybrid] == sorted((s for _, s in hybrid), reverse=True)
    empty = SearchIndex.build(tmp_path / "none", [], None, full_text=True)
    assert empty.search("fts", "apple", None, k=3) == []


def test_agg_prompt_budget_follows_the_tiers_context_length() -> None:
    from semray.api import from_arrow
    from semray.pipeline.runs.resume_record import Job
    from semray.pipeline.stages.set_ops import AggStage
    from semray.serving.config import ServingConfig
    from semray.serving.simulator.config import ModelProfile, SimulatorConfig
    from semray.settings import Settings

    plan = from_arrow(pa.table({"t": ["a"]})).sem_agg("count the {t}").plan
    short = ServingConfig(
        simulator=SimulatorConfig(models={"sim-small": ModelProfile(), "sim-large": ModelProfile(context_length=1000)})
    )
    stage = Job.prepare(plan, Settings(), short).stages
    assert isinstance(stage, AggStage) and stage.context_tokens == 1000
    roomy = Job.prepare(plan, Settings(), ServingConfig()).stages
    assert isinstance(roomy, AggStage) and roomy.context_tokens > 1000
