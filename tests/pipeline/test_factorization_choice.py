"""Plan-time join factorization: candidates from free-form wording, a recorded proposal or a
small right side, verified against the pairwise answers of the in-process simulator (no Ray),
journaled, and refused when the per-row answers disagree with the pairwise ones."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from semray import from_arrow
from semray.operators import Node
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.driver import lower
from semray.pipeline.lowering.set_ops import factor_task
from semray.pipeline.runs.plan_time.join_factor_check import Ask, agreement_lower_bound
from semray.pipeline.runs.plan_time.join_factorization import choose_factorization, parse_proposal
from semray.pipeline.stages.relational import BroadcastJoinStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.serving.backends.simulated import SimulatedBackend
from semray.serving.config import TierConfig
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.serving.prompts.set_ops import PROPOSE_SYSTEM
from semray.serving.simulator import Simulator, SimulatorConfig, TaskSpec
from semray.serving.simulator.config import ModelProfile
from semray.serving.tier import ModelTier
from semray.settings import Settings
from semray.tasks import TaskKind
from semray.transactions import begin_run

WORDS = [
    "harbor",
    "lantern",
    "copper",
    "meadow",
    "violet",
    "summit",
    "pebble",
    "orchard",
    "falcon",
    "canyon",
    "ember",
    "willow",
    "marble",
    "thistle",
    "saddle",
    "glacier",
    "biscuit",
    "tundra",
    "parcel",
    "velvet",
    "quarry",
    "nectar",
    "bramble",
    "cobalt",
    "dagger",
    "fennel",
]
ROWS = 48
SENTIMENTS = ("positive", "negative", "neutral")


def corpus() -> pa.Table:
    rng = random.Random(7)
    texts = [" ".join(rng.sample(WORDS, 12)) + f" note {i}" for i in range(ROWS)]
    return pa.table(
        {
            "key": list(range(ROWS)),
            "text": texts,
            "sentiment": [SENTIMENTS[i % 3] for i in range(ROWS)],
            "mood": [SENTIMENTS[(i * 7 // 3) % 3] for i in range(ROWS)],  # another property
            "urgency": [float(1 + (i * 5) % 10) for i in range(ROWS)],
        }
    )


def simulator_ask(per_row_column: str = "sentiment") -> tuple[Ask, list[int]]:
    """The large tier on the simulator: pairs answered from ``sentiment`` (and ``urgency``), the
    per-row property from ``per_row_column``; the second value counts model calls."""
    tasks = [
        TaskSpec(name="sentiment", kind="label", label_column=per_row_column, keywords=("sentiment",)),
        TaskSpec(name="urgency", kind="score", label_column="urgency", keywords=("urgent",), score_range=(1, 10)),
        TaskSpec(name="same", kind="pair", label_column="sentiment", keywords=("same sentiment", "one heading")),
        TaskSpec(
            name="different",
            kind="pair",
            label_column="sentiment",
            relation="not_equal",
            keywords=("differ in sentiment",),
        ),
        TaskSpec(
            name="more_urgent", kind="pair", label_column="urgency", relation="greater", keywords=("more urgent",)
        ),
    ]
    config = SimulatorConfig.from_labels(
        corpus(),
        key_column="key",
        text_columns=["text"],
        dataset="notes",
        tasks=tasks,
        models={"sim-large": ModelProfile(error_rate=0.0)},
    )
    tier_config = TierConfig(backend="simulated", model="sim-large")
    tier = ModelTier("large", tier_config, SimulatedBackend(tier_config, Simulator(config)))
    calls = [0]

    def ask(tier_name: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        assert tier_name == "large"
        responses = asyncio.run(tier.generate(list(requests)))
        calls[0] += sum(response.calls for response in responses)
        return responses

    return ask, calls


NOTES = from_arrow(corpus().select(["text"]), "notes").plan
CATEGORIES = from_arrow(pa.table({"category": list(SENTIMENTS)}), "categories").plan


def notes() -> Node:
    return NOTES


def self_join(instruction: str) -> SemJoin:
    return SemJoin(left=notes(), right=notes(), instruction=instruction)


def sample(_: Node, rows: int) -> pa.Table:
    return corpus().select(["text"]).slice(0, rows)


SAME = (
    "Here is one customer note: {l.text}. Here is another one: {r.text}. "
    "Answer yes if both notes express the same sentiment, and no otherwise."
)


def test_a_free_form_same_property_join_is_verified_and_factorized() -> None:
    ask, calls = simulator_ask()
    decision = choose_factorization(self_join(SAME), ask, sample, propose=False)
    join = decision.plan
    assert isinstance(join, SemJoin) and join.implementation == "factorized"
    assert (join.factor, join.relation, join.agreement) == ("sentiment", "=", 1.0)
    (trial,) = decision.trials.values()
    # Every pair agrees: the first look of 100 pairs decides (its bound at 1 - 0.05 / 4).
    assert trial.origin == "detected" and trial.accepted and trial.pairs == 100
    assert 0 < calls[0] == trial.calls <= 100 + 2 * ROWS  # distinct pairs + each sampled row once
    assert "factorized; detected factorization sentiment =" in decision.explain()
    assert "verified: agreement 1.000" in join.label()


def test_per_row_answers_that_disagree_with_the_pairwise_ones_are_rejected() -> None:
    ask, _ = simulator_ask(per_row_column="mood")  # the side question answers another property
    decision = choose_factorization(self_join(SAME), ask, sample, propose=False)
    assert decision.plan == self_join(SAME)
    (trial,) = decision.trials.values()
    assert not trial.accepted and trial.agreement < 0.9 and trial.lower_bound < 0.9
    assert trial.pairs == 100  # clearly below the target after the first look: no more pairs asked
    assert "pairwise; detected factorization" in decision.explain() and "< target 0.9" in decision.explain()


def test_a_different_property_and_an_ordered_comparison_factorize() -> None:
    ask, _ = simulator_ask()
    cases = (
        ("Is {l.text} more urgent than {r.text}?", ">", TaskKind.SCORE),
        ("Is {r.text} more urgent than {l.text}?", "<", TaskKind.SCORE),
        ("Read {l.text}, then {r.text}. Do the two notes differ in sentiment? Yes or no.", "<>", TaskKind.MAP),
    )
    for instruction, relation, kind in cases:
        decision = choose_factorization(self_join(instruction), ask, sample, propose=False)
        join = decision.plan
        assert isinstance(join, SemJoin) and join.implementation == "factorized", decision.explain()
        assert join.relation == relation and factor_task(join, "l").kind == kind


class Recorded:
    """The large tier with recorded proposal replies; everything else goes to ``ask``."""

    def __init__(self, ask: Ask, replies: Sequence[dict[str, object]]) -> None:
        self.inner, self.replies, self.proposals = ask, list(replies), 0

    def ask(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        if requests and requests[0].system == PROPOSE_SYSTEM:
            self.proposals += 1
            value = self.replies.pop(0)
            return [ModelResponse(text=str(value), value=value, confidence=None, usage=Usage(dollars=0.01))]
        return self.inner(tier, requests)


HEADING = "Would an editor file {l.text} and {r.text} under one heading?"
PROPOSAL = {"factorizes": True, "property": "sentiment", "relation": "same", "labels": list(SENTIMENTS)}


def test_a_proposed_factorization_is_verified_and_uses_its_labels() -> None:
    ask, _ = simulator_ask()
    model = Recorded(ask, [PROPOSAL])
    decision = choose_factorization(self_join(HEADING), model.ask, sample)
    join = decision.plan
    assert model.proposals == 1 and isinstance(join, SemJoin) and join.labels == SENTIMENTS
    assert (
        factor_task(join, "r").kind == TaskKind.CLASSIFY and next(iter(decision.trials.values())).origin == "proposed"
    )


def test_a_proposal_that_does_not_factorize_or_a_wrong_one_keeps_the_join_pairwise() -> None:
    ask, calls = simulator_ask()
    refused = Recorded(ask, [{"factorizes": False, "property": "", "relation": "same", "labels": []}])
    assert choose_factorization(self_join(HEADING), refused.ask, sample).plan == self_join(HEADING)
    assert calls[0] == 0  # nothing to verify
    wrong = Recorded(ask, [{**PROPOSAL, "relation": "different"}])
    assert choose_factorization(self_join(HEADING), wrong.ask, sample).plan == self_join(HEADING)


def test_similar_topic_is_not_a_candidate_and_costs_nothing() -> None:
    ask, calls = simulator_ask()
    decision = choose_factorization(
        self_join("Are {l.text} and {r.text} about a similar topic?"), ask, sample, propose=False
    )
    assert decision.plan == self_join("Are {l.text} and {r.text} about a similar topic?") and calls[0] == 0
    assert "pairwise (no form detected" in decision.explain()


def test_journaled_trials_are_reused_without_calls(tmp_path: Path) -> None:
    run = begin_run(Settings(state_dir=tmp_path), {"plan": "test"}, None)
    ask, calls = simulator_ask()
    model = Recorded(ask, [PROPOSAL])
    first = choose_factorization(self_join(HEADING), model.ask, sample, ledger=run.ledger)
    paid = calls[0]

    def refuse(*_: object) -> list[ModelResponse]:
        raise AssertionError("a journaled trial needs no call")

    second = choose_factorization(self_join(HEADING), refuse, sample, ledger=run.ledger)
    assert second.plan == first.plan and second.trials == first.trials
    assert run.state().usage.calls == paid + 1  # the verification's calls and the proposal
    run.finish("succeeded")


def categories() -> Node:
    return CATEGORIES


class Truth:
    """Pairs and classifications answered from a truth table (a left text's categories)."""

    def __init__(self, truth: dict[str, set[str]]) -> None:
        self.truth = truth

    def ask(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        answers: list[ModelResponse] = []
        for request in requests:
            text = next(text for text in self.truth if text in request.prompt)
            value: object
            if request.constraint.choices == ("Yes", "No"):
                value = any(f"is about {c}" in request.prompt for c in self.truth[text])
            else:
                value = sorted(self.truth[text])[0]
            answers.append(ModelResponse(text=str(value), value=value, confidence=None))  # type: ignore[arg-type]
        return answers


def test_a_small_right_side_becomes_the_labels_left_rows_are_classified_into() -> None:
    texts = corpus().column("text").to_pylist()
    one = Truth({text: {SENTIMENTS[i % 3]} for i, text in enumerate(texts)})
    join = SemJoin(left=notes(), right=categories(), instruction="{l.text} is about {r.category}")
    right = pa.table({"category": list(SENTIMENTS)})

    def rows(side: Node, count: int) -> pa.Table:
        return right if side == categories() else sample(side, count)

    def many(side: Node) -> int:
        return 1000  # as if the left side were large: worth verifying

    decision = choose_factorization(join, one.ask, rows, propose=False, row_counts=many)
    chosen = decision.plan
    assert isinstance(chosen, SemJoin) and chosen.right_labels and chosen.labels == SENTIMENTS
    stage = lower(chosen, Settings())
    assert isinstance(stage, BroadcastJoinStage) and isinstance(stage.inputs[0], SemanticStage)
    assert not isinstance(stage.inputs[1], SemanticStage)  # the right side is not asked: n calls
    # A left row about two categories at once: one label per row cannot express it.
    two = Truth({text: {SENTIMENTS[i % 3], SENTIMENTS[(i + 1) % 3]} for i, text in enumerate(texts)})
    assert choose_factorization(join, two.ask, rows, propose=False, row_counts=many).plan == join


def test_a_join_too_small_to_gain_is_not_tried() -> None:
    tiny = from_arrow(corpus().select(["text"]).slice(0, 8), "tiny").plan
    join = SemJoin(left=tiny, right=tiny, instruction=SAME)
    ask, calls = simulator_ask()
    decision = choose_factorization(join, ask, sample, propose=False)
    assert decision.plan == join and calls[0] == 0 and "cost no more than verifying" in decision.explain()


def test_proposal_replies_are_parsed_strictly() -> None:
    assert parse_proposal({**PROPOSAL, "relation": "bigger"}) is None
    assert parse_proposal({**PROPOSAL, "labels": [1, 2]}) is None
    assert parse_proposal("sentiment") is None
    greater = parse_proposal({**PROPOSAL, "relation": "greater"})
    assert greater is not None and greater.relation == ">" and greater.labels == ()


@pytest.mark.parametrize(
    ("agreeing", "pairs", "kept"), [(64, 64, True), (61, 64, False), (30, 30, True), (20, 20, False)]
)
def test_the_bound_needs_enough_agreeing_pairs(agreeing: int, pairs: int, kept: bool) -> None:
    assert (agreement_lower_bound(agreeing, pairs, 0.95) >= 0.9) is kept


def test_for_a_run_a_join_without_a_candidate_opens_no_run_and_starts_no_tier(tmp_path: Path) -> None:
    from semray.pipeline.runs.plan_time.join_factorization_run import choose_factorization_for_run
    from semray.serving.config import ServingConfig

    wide = from_arrow(pa.table({"text": [f"text {i}" for i in range(40)]}), "wide").plan
    similar = SemJoin(left=wide, right=wide, instruction="Are {l.text} and {r.text} about a similar topic?")
    decision = choose_factorization_for_run(similar, Settings(state_dir=tmp_path), ServingConfig())
    assert decision.plan == similar and not (tmp_path / "runs").exists()
    assert "pairwise (no form detected" in decision.explain()


def test_the_check_is_on_by_default_and_the_environment_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().join_factorization == 0.9
    monkeypatch.setenv("SEMRAY_JOIN_FACTORIZATION", "0.95")
    assert Settings().join_factorization == 0.95
    for off in ("off", "none", ""):
        monkeypatch.setenv("SEMRAY_JOIN_FACTORIZATION", off)
        assert Settings().join_factorization is None
    with pytest.raises(ValueError, match="join_factorization"):
        Settings(join_factorization=0.0)


def test_a_check_is_keyed_by_its_join_not_by_the_query_around_it() -> None:
    from semray.operators import Filter, Limit
    from semray.pipeline.runs.plan_time.join_factorization import FactorizationChoice
    from semray.pipeline.runs.plan_time.join_factorization_run import join_identity
    from semray.serving.config import ServingConfig

    join, serving, tiers = self_join(SAME), ServingConfig(), ["large"]
    identity = join_identity(join, serving, FactorizationChoice(0.9), tiers)
    above = (Limit(input=join, count=5), Filter(input=join, predicate="text <> 'x'"))
    for plan in above:
        (found,) = factor_candidates_of(plan)
        assert join_identity(found, serving, FactorizationChoice(0.9), tiers) == identity
    assert join_identity(join, serving, FactorizationChoice(0.95), tiers) != identity  # another target
    assert join_identity(join, serving, FactorizationChoice(0.9), ["large", "small"]) != identity
    other = SemJoin(left=notes(), right=categories(), instruction=SAME.replace("{r.text}", "{r.category}"))
    assert join_identity(other, serving, FactorizationChoice(0.9), tiers) != identity
    # The same name over other content is another join: a verdict is never reused for it.
    changed = from_arrow(corpus().select(["text"]).slice(1), "notes").plan
    moved = SemJoin(left=changed, right=changed, instruction=SAME)
    assert join_identity(moved, serving, FactorizationChoice(0.9), tiers) != identity


def factor_candidates_of(plan: Node) -> list[SemJoin]:
    from semray.pipeline.runs.plan_time.join_factorization import factor_candidates

    return list(factor_candidates(plan).values())


def test_a_check_that_would_pass_the_budget_is_not_started(tmp_path: Path) -> None:
    from semray.pipeline.runs.budget import BudgetError
    from semray.pipeline.runs.plan_time.join_factorization import FactorizationChoice
    from semray.pipeline.runs.plan_time.join_factorization_run import check_worst_case, choose_factorization_for_run
    from semray.serving.config import ServingConfig

    join, serving = self_join(SAME), ServingConfig()
    worst = check_worst_case(join, serving, FactorizationChoice(), propose=False)
    assert worst is not None
    calls, dollars = worst
    assert calls == 800 + 48 + 48 and dollars > 0  # every pair it may draw and every sampled row
    tight = Settings(state_dir=tmp_path, max_cost=dollars / 2)
    with pytest.raises(BudgetError, match=r"join factorization check .* over the budget"):
        choose_factorization_for_run(join, tight, serving)
    assert not (tmp_path / "runs").exists()  # stopped before the check's run opened: no call
