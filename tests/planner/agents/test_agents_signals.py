"""The agents' confidence signals past the dataset choice: span divergence of a draft, early stopping of
exploration, and the context limit of the prompts; each triggers and does not trigger as its threshold says."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, judge, outline, plan, recorded

from semray.asking import loop_config
from semray.planner.agents import StepRunner, plan_question
from semray.planner.agents.confidence import HFScorer
from semray.planner.agents.exploration import ExplorationStop
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.profiling import profile_question
from semray.planner.agents.spans import decision_spans, score_spans, span_issue
from semray.planner.agents.units import UnitPolicy
from semray.settings import Settings

OPS = ("scan", "join", "aggregate")
EVIDENCE = "What the data exploration found:"
OBSERVATIONS = "Observations of the data:"


class RuleScorer:
    """Each token of a continuation gets ``log(rule(context, continuation))``; every call is kept."""

    def __init__(self, rule: Callable[[str, str], float]) -> None:
        self.rule = rule
        self.calls: list[tuple[str, str]] = []

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        self.calls.append((context, continuation))
        return (math.log(self.rule(context, continuation)),) * max(1, len(continuation.split()))


def spans_scorer(with_evidence: float, without_evidence: float) -> RuleScorer:
    """Span confidences by whether the evidence is in the context; a clear dataset choice for the decision."""

    def rule(context: str, continuation: str) -> float:
        if "In the plan answering it" in context:
            return with_evidence if EVIDENCE in context else without_evidence
        return 0.9 if continuation.strip().startswith("reviews") else 0.05

    return RuleScorer(rule)


def test_the_decision_spans_of_a_plan_are_found_statically_with_their_paths(tmp_path: Path) -> None:
    document = {
        "op": "limit",
        "count": 5,
        "input": {
            "op": "sem_filter",
            "instruction": "{review} says the product broke",
            "input": {"op": "filter", "predicate": "city = 'Oslo' AND temperature < -2.5", "input": {"op": "scan"}},
        },
    }
    found = [(span.kind, span.path, span.text) for span in decision_spans(document)]
    assert found == [
        ("constant", "plan.limit.count", "5"),
        ("instruction key terms", "plan.limit.input.sem_filter.instruction", "review says product broke"),
        (
            "filter predicate",
            "plan.limit.input.sem_filter.input.filter.predicate",
            "city = 'Oslo' AND temperature < -2.5",
        ),
        ("filter value", "plan.limit.input.sem_filter.input.filter.predicate", "Oslo"),
        ("filter value", "plan.limit.input.sem_filter.input.filter.predicate", "-2.5"),
    ]
    gold = [span.path for span in decision_spans(gold_document(catalog_of(tmp_path))["plan"])]
    assert gold == ["plan.aggregate.keys.0", "plan.aggregate.aggs.0.expr", "plan.aggregate.input.join.on"]
    # A value the question states is grounded by the question itself: it is not scored.
    scored = score_spans(spans_scorer(0.9, 0.2), "Which rows are from Oslo?", "", decision_spans(document))
    assert [score.span.text for score in scored.scores if score.span.kind == "filter value"] == ["-2.5"]


@pytest.mark.parametrize(
    ("with_evidence", "without_evidence", "threshold", "retried"),
    [
        (0.9, 0.2, 0.50, False),  # divergence 0.7: the evidence grounds the spans
        (0.6, 0.3, 0.50, True),  # divergence 0.3 < 0.50: retried, the spans named
        (0.6, 0.3, 0.25, False),  # the same divergence passes a lower threshold
    ],
)
def test_a_draft_whose_spans_the_evidence_does_not_ground_is_retried_naming_them(
    tmp_path: Path, with_evidence: float, without_evidence: float, threshold: float, retried: bool
) -> None:
    catalog = catalog_of(tmp_path)
    scorer = spans_scorer(with_evidence, without_evidence)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog)) for _ in range(2 if retried else 1)],
    )
    # Weak spans send a draft back once: the second is not sent back for the same spans, though not the last.
    config = LoopConfig(
        max_iterations=3, semantic=False, units=UnitPolicy(span_divergence=threshold, stop_divergence=None)
    )
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, scorer=scorer)
    assert all(count == 0 for count in model.remaining().values())
    fills = [dict(step.inputs)["prompt"] for step in result.trace.steps if step.kind == "fill"]
    assert len(fills) == (2 if retried else 1) and result.iterations == len(fills)
    spans = result.trace.of("semantic")
    assert [step.kind for step in spans] == ["spans"] * len(fills)
    assert "divergence" in spans[0].output and (spans[0].error is not None) == retried
    # Each span was scored with the evidence (the chosen datasets' columns) and without it.
    span_contexts = [context for context, _ in scorer.calls if "In the plan answering it" in context]
    assert len(span_contexts) == 2 * 3 * len(fills)
    assert sum("product_id" in context for context in span_contexts) == 3 * len(fills)
    if retried:
        feedback = fills[1]
        assert "weakly grounded" in feedback and "largest span divergence 0.300, below 0.50" in feedback
        assert "plan.aggregate.keys.0" in feedback and "with the evidence" in feedback
        assert "weakly grounded" not in fills[0]


def test_the_last_draft_is_not_sent_back_for_weak_spans_and_no_scorer_means_no_check(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    model = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(1),
    )
    config = LoopConfig(max_iterations=1, judges=1, units=UnitPolicy(stop_divergence=None))
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, scorer=spans_scorer(0.3, 0.3))
    assert result.iterations == 1 and [step.kind for step in result.trace.of("semantic")] == ["spans", "judge"]

    unscored = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
    )
    result = plan_question(QUESTION, catalog=catalog, model=unscored, config=LoopConfig(semantic=False))
    assert result.trace.of("semantic") == () and not any(step.kind == "explore" for step in result.trace.steps)


def observation_scorer(with_earlier: float, without_earlier: float) -> RuleScorer:
    """An observation is predicted by earlier ones when they are in the context (after the header)."""

    def rule(context: str, continuation: str) -> float:
        earlier = context.split(OBSERVATIONS, 1)[1].strip()
        return with_earlier if earlier else without_earlier

    return RuleScorer(rule)


@pytest.mark.parametrize(
    ("with_earlier", "without_earlier", "threshold", "explored"),
    [
        (0.9, 0.3, 0.45, ("reviews",)),  # divergence 0.6 > 0.45: products adds little, exploration stops
        (0.6, 0.3, 0.45, ("reviews", "products", "weather")),  # divergence 0.3: every candidate is read
        (0.9, 0.3, 0.70, ("reviews", "products", "weather")),  # 0.6 does not pass a higher threshold
    ],
)
def test_exploration_stops_once_a_new_observation_is_predicted_by_the_earlier_ones(
    tmp_path: Path, with_earlier: float, without_earlier: float, threshold: float, explored: tuple[str, ...]
) -> None:
    catalog = catalog_of(tmp_path)
    scorer = observation_scorer(with_earlier, without_earlier)
    runner = StepRunner(recorded(profiling_choose=[choose("reviews", "products")]))
    profile = profile_question(runner, catalog, QUESTION, (), stop=ExplorationStop(scorer, threshold))
    assert profile.candidates == explored
    (step,) = [step for step in runner.trace.steps if step.kind == "explore"]
    assert step.output.startswith(f"explored {', '.join(explored)}")
    assert ("stopped before products" in step.output) == (explored == ("reviews",))
    (choice,) = [dict(step.inputs)["prompt"] for step in runner.trace.steps if step.kind == "choose"]
    assert ("dataset products" in choice) == ("products" in explored)
    assert ("dataset weather" in choice) == ("weather" in explored)
    # The first observation is never scored: there is nothing earlier to predict it.
    assert [continuation.split(":")[0] for _, continuation in scorer.calls][:2] == ["dataset products"] * 2


def test_prompts_keep_the_newest_attempts_and_summarise_older_ones(tmp_path: Path) -> None:
    def ask(limit: int) -> list[str]:
        catalog = catalog_of(tmp_path)
        rejections = [judge("reject", f"mismatch {n}", f"CORRECTION-{n}") for n in range(3)]
        model = recorded(
            profiling_choose=[choose("reviews", "products")],
            planning_outline=[outline(*OPS) for _ in range(4)],
            manipulation_fill=[plan(gold_document(catalog)) for _ in range(4)],
            semantic_judge=[*rejections, judge("accept")],
        )
        config = LoopConfig(judges=1, units=UnitPolicy(max_retries=3, context_units=limit))
        result = plan_question(QUESTION, catalog=catalog, model=model, config=config)
        assert result.iterations == 4 and all(count == 0 for count in model.remaining().values())
        return [dict(step.inputs)["prompt"] for step in result.trace.steps if step.kind == "fill"]

    kept = ask(15)[-1]
    assert all(f"CORRECTION-{n}" in kept for n in range(3)) and "summarised" not in kept
    last = ask(1)[-1]
    assert "CORRECTION-2" in last and "CORRECTION-0" not in last and "CORRECTION-1" not in last
    assert "2 earlier failed attempt(s), summarised: judge: mismatch 0 (x1); judge: mismatch 1 (x1)" in last


def test_the_limits_are_settings_with_the_designs_defaults() -> None:
    settings = Settings()
    assert (settings.agent_max_retries, settings.agent_max_units, settings.agent_context_units) == (2, 20, 15)
    assert (settings.agent_span_divergence, settings.agent_stop_divergence) == (0.50, 0.45)
    units = loop_config(Settings(agent_context_units=3, agent_span_divergence=0.4, agent_stop_divergence=None)).units
    assert (units.context_units, units.span_divergence, units.stop_divergence) == (3, 0.4, None)
    assert UnitPolicy() == loop_config(settings).units


@pytest.fixture(scope="module")
def tiny_scorer(tmp_path_factory: pytest.TempPathFactory) -> HFScorer:
    """A tiny random GPT-2 with a word-level vocabulary of the test's datasets."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("scorer")
    words = ["[PAD]", "[UNK]", "[EOS]", "Question:", "dataset", "reviews", "products", "weather", "name", "rating"]
    core = Tokenizer(models.WordLevel(vocab={token: i for i, token in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(words), n_positions=128, n_embd=16, n_layer=1, n_head=2, eos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return HFScorer(folder)


def test_the_signals_on_a_tiny_transformers_scorer_follow_their_thresholds(
    tmp_path: Path, tiny_scorer: HFScorer
) -> None:
    catalog = catalog_of(tmp_path)
    evidence = catalog.describe("reviews").describe() + "\n" + catalog.describe("products").describe()
    report = score_spans(tiny_scorer, QUESTION, evidence, decision_spans(gold_document(catalog)["plan"]))
    largest = report.largest
    assert largest is not None and -1.0 < largest < 1.0 and len(report.scores) == 3
    # The evidence runs past the model's 128 positions: its oldest tokens are left out, and it still scores.
    assert span_issue(report, largest + 0.01) is not None
    assert span_issue(report, largest - 0.01) is None

    observations = [(name, catalog.describe(name).describe(samples=1)) for name in ("reviews", "products")]
    measured = ExplorationStop(tiny_scorer, 1.0).explore(QUESTION, observations)
    (score,) = measured.scores
    assert measured.kept == ("reviews", "products") and measured.stopped_at is None
    stopped = ExplorationStop(tiny_scorer, score.divergence - 0.01).explore(QUESTION, observations)
    assert stopped.kept == ("reviews",) and stopped.stopped_at == "products"
