"""Commit-or-retry units: isolation of failed attempts, durable traces and resume, confidence signals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from agent_fixtures import QUESTION, accepts, catalog_of, choose, gold_document, outline, plan, recorded

from semray.planner.agents import ListMemory, PlanIssue, StepRunner, plan_question
from semray.planner.agents.ask_journal import (
    AskFinished,
    StepJournaled,
    UnitCommitted,
    UnitVerdictJournaled,
    open_ask_trace,
    read_ask_trace,
    render_ask_trace,
)
from semray.planner.agents.confidence import HFScorer, confidence, decision_divergence
from semray.planner.agents.errors import PlanningFailedError, RetryLimitError
from semray.planner.agents.loop import LoopConfig
from semray.planner.agents.models import AgentCall
from semray.planner.agents.recorded import RecordedModel
from semray.planner.agents.units import StagedMemory, UnitAttempt, UnitFailedError, UnitPolicy, UnitRunner, Verdict
from semray.serving.contract import ModelResponse

OPS = ("scan", "join", "aggregate")
BAD = PlanIssue("plan", "the draft reads no dataset", "table")


def test_a_failed_attempt_leaves_no_memory_write_and_no_file_and_reaches_the_retry_only_as_feedback(
    tmp_path: Path,
) -> None:
    store = ListMemory()
    staged = StagedMemory(store)
    trace = open_ask_trace(tmp_path, "q", "m")
    units = UnitRunner(StepRunner(None), UnitPolicy(max_retries=2), trace, staged)
    seen: list[tuple[PlanIssue, ...]] = []

    def attempt(current: UnitAttempt) -> str:
        seen.append(current.feedback)
        value = "bad" if current.number == 1 else "good"
        staged.remember("q", f"memory of the {value} attempt", "knowledge")
        current.write_file("fragment.txt", value.encode())
        return value

    outcome = units.run("fragment", attempt, lambda value, _: Verdict(() if value == "good" else (BAD,)))
    trace.close()
    assert (outcome.value, outcome.attempts, outcome.forced) == ("good", 2, False)
    assert seen == [(), (BAD,)]
    assert [record.memory for record in store.recall("q", 10)] == ["memory of the good attempt"]
    assert (trace.workspace / "fragment.txt").read_bytes() == b"good"
    assert not any((trace.folder / "staging").iterdir())


def test_a_unit_that_keeps_failing_raises_and_commits_nothing(tmp_path: Path) -> None:
    store = ListMemory()
    staged = StagedMemory(store)
    trace = open_ask_trace(tmp_path, "q", "m")
    units = UnitRunner(StepRunner(None), UnitPolicy(max_retries=1), trace, staged)

    def attempt(current: UnitAttempt) -> str:
        staged.remember("q", "never", "knowledge")
        return "bad"

    with pytest.raises(UnitFailedError) as failed:
        units.run("fragment", attempt, lambda _value, _attempt: Verdict((BAD,)))
    trace.close()
    assert failed.value.issues == (BAD,)
    assert store.recall("q", 10) == []
    assert not any(isinstance(record, UnitCommitted) for record in read_ask_trace(trace.folder))


def test_every_unit_honours_the_retry_limit_the_plan_unit_too(tmp_path: Path) -> None:
    units = UnitRunner(StepRunner(None), UnitPolicy(max_retries=2))
    tried: list[int] = []

    def attempt(current: UnitAttempt) -> str:
        tried.append(current.number)
        return "bad"

    with pytest.raises(UnitFailedError, match="3 time"):
        units.run("fragment", attempt, lambda _value, _attempt: Verdict((BAD,)))
    assert tried == [1, 2, 3]  # 2 retries: 3 attempts
    with pytest.raises(RetryLimitError, match=r"outside 1\.\.3"):
        units.run("fragment", attempt, lambda _value, _attempt: Verdict(), max_attempts=4)
    with pytest.raises(RetryLimitError, match="agent_max_retries"):
        LoopConfig(max_iterations=4)
    assert LoopConfig().drafts == 3 and LoopConfig(units=UnitPolicy(max_retries=4)).drafts == 5

    # The plan unit with default settings stops after 3 drafts, every one journaled as an attempt of one unit.
    catalog = catalog_of(tmp_path)
    wrong = plan(gold_document(catalog, "avg(ratng)"))
    model = recorded(
        profiling_choose=[choose("reviews", "products")] * 4,
        planning_outline=[outline(*OPS)],
        manipulation_fill=[wrong] * 4,
    )
    trace = open_ask_trace(tmp_path / "asks", QUESTION, "m")
    with pytest.raises(PlanningFailedError, match="after 3 drafts"):
        plan_question(QUESTION, catalog=catalog, model=model, config=LoopConfig(semantic=False), trace=trace)
    trace.close()
    assert model.remaining()["manipulation/fill"] == 1
    verdicts = [
        record.unit_attempt
        for record in read_ask_trace(trace.folder)
        if isinstance(record, UnitVerdictJournaled) and record.unit_name == "plan"
    ]
    assert verdicts == [1, 2, 3]


class Crash(Exception):
    """Stands for a SIGKILL between units: nothing below the loop catches it."""


class CrashingModel:
    """A recorded model that dies on the first call of one step."""

    def __init__(self, inner: RecordedModel, step: str) -> None:
        self.inner, self.step = inner, step
        self.profile, self.name, self.structured_output = inner.profile, inner.name, inner.structured_output

    def answer(self, call: AgentCall) -> ModelResponse:
        if f"{call.agent}/{call.step}" == self.step:
            raise Crash(self.step)
        return self.inner.answer(call)


def test_an_ask_killed_between_units_resumes_without_paying_again_for_its_committed_units(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    state = tmp_path / "state"
    first = recorded(profiling_choose=[choose("reviews", "products")], planning_outline=[outline(*OPS)])
    trace = open_ask_trace(state, QUESTION, "recorded")
    with pytest.raises(Crash):
        plan_question(QUESTION, catalog=catalog, model=CrashingModel(first, "manipulation/fill"), trace=trace)
    trace.close()
    paid_before = sum(r.dollars for r in read_ask_trace(trace.folder) if isinstance(r, StepJournaled))
    assert paid_before > 0

    # The resumed ask has no answers for choose or outline: asking for them would raise RecordingExhaustedError.
    second = recorded(manipulation_fill=[plan(gold_document(catalog))], semantic_judge=accepts())
    resumed = open_ask_trace(state, QUESTION, "recorded")
    # recall, profile, outline committed; the plan unit (3) did not, so only that prefix is replayed
    assert resumed.folder == trace.folder and {0, 1, 2} <= set(resumed.committed) and 3 not in resumed.committed
    result = plan_question(QUESTION, catalog=catalog, model=second, trace=resumed)
    resumed.close()
    replayed = [step for step in result.trace.steps if step.replayed]
    assert [f"{s.agent}/{s.kind}" for s in replayed] == ["profiling/choose", "planning/outline"]
    assert all(step.dollars == 0.0 for step in replayed)
    assert all(count == 0 for count in second.remaining().values())

    fresh = recorded(
        profiling_choose=[choose("reviews", "products")],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
        semantic_judge=accepts(),
    )
    assert result.plan == plan_question(QUESTION, catalog=catalog, model=fresh).plan
    records = read_ask_trace(resumed.folder)
    assert isinstance(records[-1], AskFinished) and records[-1].status == "succeeded"
    assert (resumed.workspace / "plan.json").read_text() == result.plan_json
    shown = render_ask_trace(resumed.folder)
    assert "u3 plan committed after 1 attempt(s)" in shown and "replayed" in shown
    assert open_ask_trace(state, QUESTION, "recorded").folder != trace.folder  # a finished ask starts afresh


class FixedScorer:
    """Deterministic scorer: each continuation's tokens get the logprob its first word is given."""

    def __init__(self, logprobs: dict[str, float]) -> None:
        self.logprobs = logprobs
        self.calls: list[str] = []

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        self.calls.append(continuation)
        word = continuation.strip().split(",")[0]
        return (self.logprobs[word],) * len(continuation.split())


def test_decision_divergence_margin_is_the_normalised_confidence_gap() -> None:
    assert confidence((math.log(0.5), math.log(0.5))) == pytest.approx(0.5)
    even = decision_divergence(FixedScorer({"a": -1.0, "b": -1.0}), "ctx", "a", ("b",))
    assert even.margin == pytest.approx(0.0)
    clear = decision_divergence(FixedScorer({"a": math.log(0.9), "b": math.log(0.1)}), "ctx", "a", ("b",))
    assert clear.margin == pytest.approx(0.8) and clear.best_alternative == "b"
    assert decision_divergence(FixedScorer({"a": -3.0}), "ctx", "a", ()).margin == 1.0


@pytest.mark.parametrize(("chosen", "alternative", "retried"), [(-1.0, -1.0, True), (-0.01, -5.0, False)])
def test_a_weak_dataset_choice_is_retried_with_the_evidence_and_a_clear_one_is_not(
    tmp_path: Path, chosen: float, alternative: float, retried: bool
) -> None:
    catalog = catalog_of(tmp_path)
    scorer = FixedScorer({"reviews": chosen, "weather": alternative})
    model = recorded(
        profiling_choose=[choose("reviews", "products") for _ in range(2 if retried else 1)],
        planning_outline=[outline(*OPS)],
        manipulation_fill=[plan(gold_document(catalog))],
    )
    config = LoopConfig(semantic=False, units=UnitPolicy(max_retries=1, span_divergence=None, stop_divergence=None))
    result = plan_question(QUESTION, catalog=catalog, model=model, config=config, scorer=scorer)
    assert result.datasets == ("reviews", "products")
    assert scorer.calls[:2] == [" reviews, products", " weather"]
    prompts = [dict(step.inputs)["prompt"] for step in result.trace.steps if step.kind == "choose"]
    assert len(prompts) == (2 if retried else 1)
    assert all(count == 0 for count in model.remaining().values())
    if retried:
        assert "weakly supported" in prompts[1] and "margin 0.000" in prompts[1]
        assert "weakly supported" not in prompts[0]


def test_the_scorer_tier_scores_continuations_with_a_tiny_transformers_model(tmp_path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[EOS]", "question", "datasets", "reviews", "products", "weather", ":", ","]
    vocab = {token: i for i, token in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(vocab), n_positions=32, n_embd=16, n_layer=1, n_head=2, eos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(tmp_path)

    scorer = HFScorer(tmp_path)
    logprobs = scorer.token_logprobs("question : datasets :", "reviews , products")
    assert len(logprobs) == 3 and all(value < 0.0 for value in logprobs)
    assert 0.0 < confidence(logprobs) < 1.0
    assert scorer.token_logprobs("question : datasets :", "reviews , products") == logprobs  # deterministic
    score = decision_divergence(scorer, "question : datasets :", "reviews , products", ("weather",))
    assert -1.0 <= score.margin <= 1.0 and score.best_alternative == "weather"
