"""Plan time for the optimizer's code choice: price, write and validate a SemCode for each
row-wise map or extraction, and keep the function only where it met the quality target.

``choose_code(plan, ask, sample, profiles, choice)``, for every candidate of
``planner/rules/prefer_validated_code.py`` (a ``SemMap`` without a score range or a
``SemExtract`` on ``tier="auto"``):

1. **Price** both alternatives with the cost model: the per-row operator (one call per row at
   its tier, ``auto`` as the large tier) and the ``SemCode`` draft, whose generation and
   validation calls ``cost_model/code_cost.py`` prices (one to three generation calls and one
   to ``max_rows`` rounds of per-row answers, on the large tier; execution is CPU only), in the planner's
   cost (``operator_cost``). A candidate whose code could cost more than its per-row calls (the
   draft's high estimate against the per-row expected cost: small inputs) is not tried; nor is
   one whose target no sample of ``max_rows`` rows could show (``bounds.can_accept``).
2. **Trial**: the first ``max_rows`` rows of the operator's input are drawn; the large tier
   writes the function and it is validated on the first round of ``sample_rows`` rows against
   the model's own per-row answers with ``min_agreement`` = the target: the operator's own
   quality target where it has one (its level, at confidence ``1 - delta``), else
   ``choice.target`` at ``choice.confidence`` (``prefer_validated_code.agreement_target``)
   (``code_generation.try_code``: up to two retries). Then the statistical decision
   (``cost_model/bounds.py``): the function passes only when the one-sided Wilson lower bound on
   its agreement reaches the target, each look at ``1 - (1 - confidence) / looks`` (Bonferroni);
   while it is undecided the model answers one more round and the function's outputs on it are
   compared; it fails when the upper bound falls below the target or the cap is reached. Each
   round's answers are journaled under ``code_rows:<operator key>`` with their price, the trial
   under ``code_trial:<operator key>``, passed or not, so a resumed or re-run choice (the newest
   succeeded run with the same fingerprint, ``choice_run_identity``: the candidates with their
   inputs, not the whole plan, so also under another LIMIT or a filter above) reuses them and
   pays nothing again.
3. **Choose**: ``prefer_validated_code`` with the trials replaces each candidate whose function
   passed; every other candidate stays a per-row operator. The chosen SemCode carries the bound
   and the rows it was measured on (``agreement_bound``, ``checked_rows``: EXPLAIN shows them).

``choose_code_for_run`` does it on the configured tiers in one journaled run (like
``code_commit.commit_code``). The simulated tier answers from labels and cannot write code: there
the plan comes back unchanged (logged ``code_choice_unavailable``), because asking for the choice
is asking for the cheaper plan where there is one, not for code at any price.

>>> CodeChoice().target, CodeChoice().sample_rows, CodeChoice().max_rows, CodeChoice().confidence
(0.9, 20, 200, 0.95)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from semray.cost_model.bounds import agreement_lower_bound, can_accept, decide, look_confidence, looks_for
from semray.cost_model.statistics import PlanStatistics
from semray.log import get_logger
from semray.operators import Node
from semray.operators.base import transform
from semray.operators.code import SemCode
from semray.operators.keys import operator_key
from semray.operators.plan_paths import operator_paths, rewrite_at_paths
from semray.operators.semantic import SemExtract, SemMap
from semray.pipeline.runs.plan_time.code_commit import (
    CODE_TIER,
    Lookup,
    code_run,
    memory_digests,
    sample_input,
    succeeded_lookup,
)
from semray.pipeline.runs.plan_time.code_generation import (
    Ask,
    GeneratedCode,
    count_agreement,
    model_answers,
    run_code,
    try_code,
)
from semray.pipeline.workers.metering import paid_for
from semray.planner.cost_estimator import cost_model_estimator, operator_cost
from semray.planner.rules.prefer_validated_code import (
    CodeRuleContext,
    CodeTrial,
    TrialKey,
    agreement_target,
    code_candidate,
    code_draft,
    prefer_validated_code,
    trial_key,
)
from semray.serving.config import ServingConfig
from semray.serving.contract import Usage
from semray.settings import Settings
from semray.transactions import BatchLedger

log = get_logger(__name__)

GPU_SECOND_COST = 1e-5
"""``planner.cost_estimator.operator_cost``'s weight of a GPU-second (self-hosted tiers cost no dollars)."""
TRIAL_BATCH = "trial"
"""The ledger's batch key of a journaled trial (one per candidate)."""
_TRIAL_SCHEMA = pa.schema(
    [
        ("code", pa.string()),
        ("agreement", pa.float64()),
        ("target", pa.float64()),
        ("sample_rows", pa.int64()),
        ("calls", pa.int64()),
        ("dollars", pa.float64()),
        ("problem", pa.string()),
        ("lower_bound", pa.float64()),
        ("checked_rows", pa.int64()),
    ]
)
_ROUND_SCHEMA = pa.schema([("answer", pa.string())])
"""A journaled round of per-row answers: each row's answer as JSON (null: no answer)."""


@dataclass(frozen=True, slots=True)
class CodeChoice:
    """The opt-in (``Query.with_code_choice``; ``Settings.code_choice`` sets ``target``): consider a
    SemCode for every candidate, kept when the one-sided lower bound (at ``confidence``) on its
    agreement reaches ``target`` (a candidate's own quality target instead, where it has one);
    validated in rounds of ``sample_rows`` rows, up to ``max_rows``, while the bound is undecided."""

    target: float = 0.9
    sample_rows: int = 20
    max_rows: int = 200
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"CodeChoice.target is a share of agreeing rows in (0, 1], not {self.target}")
        if not 1 <= self.sample_rows <= 1000:
            raise ValueError(f"CodeChoice.sample_rows is 1 to 1000 validation rows, not {self.sample_rows}")
        if not self.sample_rows <= self.max_rows <= 1000:
            raise ValueError(
                f"CodeChoice.max_rows is sample_rows ({self.sample_rows}) to 1000 validation rows, not {self.max_rows}"
            )
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"CodeChoice.confidence is in (0.5, 1), not {self.confidence}")


@dataclass(frozen=True, slots=True)
class PricedAlternative:
    """The two ways to compute one candidate, in the planner's cost (``operator_cost``: dollars,
    GPU-seconds as tie-breaker): per-row calls, or generating and validating a function
    (``code`` expected, ``code_high`` with three generation calls)."""

    per_row: float
    code: float
    code_high: float

    @property
    def worth_trying(self) -> bool:
        return self.code_high < self.per_row


@dataclass(frozen=True, slots=True)
class CodeDecision:
    """The plan after the choice, each candidate's prices, trial (when tried) and why not otherwise."""

    plan: Node
    prices: Mapping[TrialKey, PricedAlternative] = field(default_factory=dict)
    trials: Mapping[TrialKey, CodeTrial] = field(default_factory=dict)
    not_tried: Mapping[TrialKey, str] = field(default_factory=dict)

    @property
    def chosen(self) -> tuple[SemCode, ...]:
        """The SemCode operators the choice put in the plan."""
        return tuple(node for node in operator_paths(self.plan).values() if isinstance(node, SemCode) and node.replaces)

    @property
    def calls(self) -> int:
        return sum(trial.calls for trial in self.trials.values())

    @property
    def dollars(self) -> float:
        return sum(trial.dollars for trial in self.trials.values())


def code_candidates(plan: Node) -> dict[str, SemMap | SemExtract]:
    """The candidates of ``plan`` by operator path."""
    found: dict[str, SemMap | SemExtract] = {}
    for path, node in operator_paths(plan).items():
        if code_candidate(node):
            assert isinstance(node, SemMap | SemExtract)
            found[path] = node
    return found


def price_alternatives(
    plan: Node, choice: CodeChoice, profiles: Mapping[str, Any], statistics: PlanStatistics | None = None
) -> dict[str, PricedAlternative]:
    """Each candidate's per-row and code prices, from the cost model (``estimate_plan``)."""
    candidates = code_candidates(plan)
    if not candidates:
        return {}
    estimator = cost_model_estimator(statistics, profiles)
    written = {estimate.path: estimate for estimate in estimator(plan, None).operators}
    drafts: dict[str, Callable[[Node], Node]] = {path: _drafting(choice) for path in candidates}
    drafted = {estimate.path: estimate for estimate in estimator(rewrite_at_paths(plan, drafts), None).operators}
    return {
        path: PricedAlternative(
            per_row=operator_cost(written[path]),
            code=operator_cost(drafted[path]),
            code_high=drafted[path].dollars.high + GPU_SECOND_COST * drafted[path].gpu_seconds.high,
        )
        for path in candidates
    }


def choose_code(
    plan: Node,
    ask: Ask,
    sample: Callable[[SemCode], pa.Table],
    profiles: Mapping[str, Any],
    choice: CodeChoice = CodeChoice(),
    *,
    statistics: PlanStatistics | None = None,
    ledger: BatchLedger | None = None,
    earlier: Lookup | None = None,
) -> CodeDecision:
    """``plan`` with a validated SemCode for every candidate whose function met ``choice.target``
    (see the module doc); ``ask`` answers on the large tier, ``sample(draft)`` gives rows of a
    draft's input, ``ledger`` (optional) journals each trial, ``earlier`` (optional) finds the
    trials of a finished run."""
    candidates = code_candidates(plan)
    prices_by_path = price_alternatives(plan, choice, profiles, statistics)
    prices: dict[TrialKey, PricedAlternative] = {}
    trials: dict[TrialKey, CodeTrial] = {}
    not_tried: dict[TrialKey, str] = {}
    bounds: dict[str, _Measured] = {}
    for path, node in candidates.items():
        key, price = trial_key(node), prices_by_path[path]
        prices[key] = price
        if key in trials or key in not_tried:
            continue
        draft = _drafting(choice)(node)
        assert draft.min_agreement is not None
        if not can_accept(draft.min_agreement, choice.sample_rows, choice.max_rows, draft.confidence):
            not_tried[key] = (
                f"even a function agreeing on all {choice.max_rows} rows could not show agreement >= "
                f"{draft.min_agreement:g} at {draft.confidence:.0%}: raise max_rows or lower the target"
            )
            log.info("code_not_tried", operator=node.label(), target=draft.min_agreement, max_rows=choice.max_rows)
            continue
        if not price.worth_trying and not _journaled(draft, ledger, earlier):  # a journaled trial costs nothing
            not_tried[key] = (
                f"writing and validating a function may cost {price.code_high:.4g}, "
                f"not less than {price.per_row:.4g} for the per-row calls (dollars, GPU-seconds at 1e-5)"
            )
            log.info("code_not_tried", operator=node.label(), code_dollars=price.code_high, per_row=price.per_row)
            continue
        measured = _trial(draft, ask, sample, ledger, earlier)
        trials[key] = measured.trial
        if measured.trial.code is not None:
            bounds[measured.trial.code] = measured
    context = CodeRuleContext(code_trial=lambda node: trials.get(trial_key(node)))  # type: ignore[arg-type]
    chosen = prefer_validated_code(plan, context)
    return CodeDecision(plan=_with_bounds(chosen, bounds), prices=prices, trials=trials, not_tried=not_tried)


def choose_code_for_run(
    plan: Node,
    settings: Settings,
    serving: ServingConfig | None,
    choice: CodeChoice = CodeChoice(),
    *,
    statistics: PlanStatistics | None = None,
) -> CodeDecision:
    """`choose_code` on the configured tiers, as one journaled run (``semray runs ls``)."""
    from semray.cost_model.prices import profiles_from_serving

    candidates = code_candidates(plan)
    if not candidates:
        return CodeDecision(plan=plan)
    config = serving or ServingConfig()
    large = config.tier(CODE_TIER)
    if large.backend == "simulated":
        reason = f"the large tier is simulated ({large.model}): it answers from labels and cannot write code"
        log.info("code_choice_unavailable", reason=reason, candidates=len(candidates))
        return CodeDecision(plan=plan, not_tried={trial_key(node): reason for node in candidates.values()})
    from semray.operators import plan_to_json

    document: dict[str, Any] = json.loads(plan_to_json(plan, indent=None))
    identity = choice_run_identity(plan, config, choice)
    profiles = profiles_from_serving(config)
    earlier = succeeded_lookup(settings, identity)  # the identity holds the memory tables' digests
    if earlier is not None:
        try:  # a re-run of a choice a finished run made: its trials, no call, no tiers started
            return choose_code(
                plan, _needs_model, _needs_model, profiles, choice, statistics=statistics, earlier=earlier
            )
        except _NeedsModelError:
            pass
    with code_run(settings, config, document, identity, "code_choice") as (ask, ledger):
        return choose_code(
            plan,
            ask,
            lambda draft: sample_input(draft, settings, serving),
            profiles,
            choice,
            statistics=statistics,
            ledger=ledger,
            earlier=earlier,
        )


def choice_run_identity(plan: Node, serving: ServingConfig, choice: CodeChoice) -> str:
    """The fingerprint of the run that makes ``plan``'s code choice: its candidates alone (each
    operator's own document, its instruction and its inputs, with the content digest of every
    in-memory table they read), the choice and the large tier's model; not the query around them,
    so the same operators under another LIMIT or under a filter find the trials journaled.

    >>> from semray.operators import Limit, Scan, SemMap, Schema, SourceSpec
    >>> scan = Scan(source=SourceSpec(kind="csv", path="/d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    >>> mapped = SemMap(input=scan, instruction="the year in {raw}", output="year")
    >>> choice_run_identity(mapped, ServingConfig(), CodeChoice()) == choice_run_identity(
    ...     Limit(input=mapped, count=5), ServingConfig(), CodeChoice())
    True
    """
    from semray.operators import plan_to_json
    from semray.transactions import fingerprint

    large = serving.tier(CODE_TIER)
    candidates = list(code_candidates(plan).values())
    documents = sorted(plan_to_json(node, indent=None) for node in candidates)
    memory: dict[str, str] = {}
    for node in candidates:
        memory.update(memory_digests(node))
    parts = {
        "choose_code": [json.loads(document) for document in documents],
        "memory": memory,
        "target": choice.target,
        "sample_rows": choice.sample_rows,
        "max_rows": choice.max_rows,
        "confidence": choice.confidence,
    }
    return fingerprint({**parts, "model": f"{large.backend}:{large.model}"})


def _drafting(choice: CodeChoice) -> Callable[[Node], SemCode]:
    """The draft of a candidate: validated in rounds up to ``max_rows``, its bound at ``confidence``,
    against the candidate's own target when it has one, else the choice's (`agreement_target`)."""

    def draft(node: Node) -> SemCode:
        assert isinstance(node, SemMap | SemExtract)
        target, confidence = agreement_target(node, choice.target, choice.confidence)
        drafted = code_draft(node, target, choice.sample_rows)
        fields = {name: getattr(drafted, name) for name in type(drafted).model_fields}
        fields.update(max_sample_rows=choice.max_rows, confidence=confidence)
        return SemCode.model_validate(fields)

    return draft


@dataclass(frozen=True, slots=True)
class _Measured:
    """A trial and what its statistical decision measured: the lower bound and the rows compared."""

    trial: CodeTrial
    lower_bound: float | None
    checked_rows: int
    confidence: float


def _with_bounds(plan: Node, measured: Mapping[str, _Measured]) -> Node:
    """``plan`` with each chosen SemCode carrying its bound and sample size (EXPLAIN shows them)."""

    def annotate(node: Node) -> Node:
        if not isinstance(node, SemCode) or node.replaces is None or node.code is None or node.code not in measured:
            return node
        found = measured[node.code]
        fields = {name: getattr(node, name) for name in type(node).model_fields}
        fields.update(
            code_sha256=None,
            agreement_bound=found.lower_bound,
            checked_rows=found.checked_rows,
            confidence=found.confidence,
        )
        return SemCode.model_validate(fields)

    return transform(plan, annotate)


class _NeedsModelError(Exception):
    """A trial the finished run did not journal: the choice needs the large tier after all."""


def _journaled(draft: SemCode, ledger: BatchLedger | None, earlier: Lookup | None) -> bool:
    """Whether ``draft``'s trial is journaled (this run's ledger or a finished run's): reused, it costs nothing."""
    key = f"code_trial:{operator_key(draft)}"
    if ledger is not None and ledger.lookup(key, TRIAL_BATCH) is not None:
        return True
    return earlier is not None and earlier(key, TRIAL_BATCH) is not None


def _needs_model(*_: Any) -> Any:
    raise _NeedsModelError


def _trial(
    draft: SemCode,
    ask: Ask,
    sample: Callable[[SemCode], pa.Table],
    ledger: BatchLedger | None,
    earlier: Lookup | None = None,
) -> _Measured:
    """Write and validate ``draft``'s function, then decide on its agreement's lower bound.

    The first ``max_rows`` rows of the input are drawn once; the model answers them in rounds of
    ``sample_rows`` (each round journaled under ``code_rows:<operator key>``, with its price), the
    function is written and retried on the first round (``try_code``), and further rounds are
    answered and compared only while the bound is undecided.
    """
    key = f"code_trial:{operator_key(draft)}"
    found = ledger.lookup(key, TRIAL_BATCH) if ledger is not None else None
    if found is None and earlier is not None:
        found = earlier(key, TRIAL_BATCH)
    if found is not None:
        row = found.to_pylist()[0]
        bound, checked = row.pop("lower_bound", None), row.pop("checked_rows", 0)
        log.info("code_trial_reused", instruction=draft.instruction, agreement=row["agreement"], lower_bound=bound)
        return _Measured(CodeTrial(**row), bound, checked, draft.confidence)
    assert draft.min_agreement is not None and draft.max_sample_rows is not None
    target, confidence = draft.min_agreement, draft.confidence  # the candidate's own, else the choice's
    table = sample(draft).slice(0, draft.max_sample_rows)
    rounds = _Rounds(draft, table, ask, ledger, earlier)
    first = rounds.answers(0)
    outcome = try_code(draft, rounds.rows(0), ask, answers=first)
    rounds.pay(outcome.usage, outcome.calls)
    looks = looks_for(draft.sample_rows, draft.max_sample_rows)
    per_look = look_confidence(confidence, looks)
    lower: float | None = None
    compared = sum(1 for answer in first if answer)
    agreeing = round((outcome.agreement or 0.0) * compared)
    if isinstance(outcome, GeneratedCode):
        code: str | None = outcome.code
        verdict, look, problem = decide(agreeing, compared, target, per_look), 1, None
        produced: list[dict[str, object]] | str | None = None
        while verdict == "undecided" and look < looks and look * draft.sample_rows < table.num_rows:
            if produced is None:  # the function runs once, on every drawn row; the answers are the cost
                produced = run_code(draft, outcome.code, table)
            if isinstance(produced, str):
                problem = f"on the rows after the first round: {produced}"
                break
            start = look * draft.sample_rows
            counted = count_agreement(draft, produced[start : start + draft.sample_rows], rounds.answers(look))
            agreeing, compared, look = agreeing + counted.agreeing, compared + counted.compared, look + 1
            verdict = decide(agreeing, compared, target, per_look)
        lower = agreement_lower_bound(agreeing, compared, per_look)
        if problem is None and verdict != "accepted":
            problem = (
                f"it agrees on {agreeing} of {compared} rows; the {confidence:.0%} lower bound "
                f"{lower:.3f} is below the target {target:.2f} "
                + ("(refused: the upper bound is below it too)" if verdict == "refused" else "(undecided at the cap)")
            )
        if problem is not None:
            code = None
        agreement = agreeing / compared if compared else outcome.agreement
    else:
        code, agreement = None, outcome.agreement
        problem = "; ".join(f"attempt {i + 1}: {a.problem}" for i, a in enumerate(outcome.attempts))
    trial = CodeTrial(code, agreement, target, rounds.drawn, rounds.calls, rounds.dollars, problem=problem)
    log.info(
        "code_trial",
        instruction=draft.instruction,
        passed=trial.code is not None,
        agreement=trial.agreement,
        lower_bound=lower,
        rows=compared,
        calls=trial.calls,
        dollars=trial.dollars,
    )
    if ledger is not None:
        record = pa.Table.from_pylist(
            [
                {
                    "code": trial.code,
                    "agreement": trial.agreement,
                    "target": trial.target,
                    "sample_rows": trial.sample_rows,
                    "calls": trial.calls,
                    "dollars": trial.dollars,
                    "problem": trial.problem,
                    "lower_bound": lower,
                    "checked_rows": compared,
                }
            ],
            schema=_TRIAL_SCHEMA,
        )
        # the rounds' answers are journaled with their own price
        ledger.commit(key, TRIAL_BATCH, (), record, usage=paid_for(outcome.usage, outcome.calls))
    return _Measured(trial, lower, compared, draft.confidence)


class _Rounds:
    """The drawn rows of one trial in rounds, and the model's journaled answers on each round."""

    def __init__(
        self, draft: SemCode, table: pa.Table, ask: Ask, ledger: BatchLedger | None, earlier: Lookup | None
    ) -> None:
        self.draft, self.table, self.ask, self.ledger, self.earlier = draft, table, ask, ledger, earlier
        self.key = f"code_rows:{operator_key(draft)}"
        self.calls, self.dollars, self.drawn = 0, 0.0, 0

    def rows(self, look: int) -> pa.Table:
        size = self.draft.sample_rows
        return self.table.slice(look * size, size)

    def pay(self, usage: Usage, calls: int) -> None:
        self.calls += calls
        self.dollars += usage.dollars

    def answers(self, look: int) -> list[dict[str, object] | None]:
        rows = self.rows(look)
        self.drawn += rows.num_rows
        batch = f"round-{look}"
        found = self.ledger.lookup(self.key, batch) if self.ledger is not None else None
        if found is None and self.earlier is not None:
            found = self.earlier(self.key, batch)
        if found is not None:
            return [None if text is None else json.loads(text) for text in found.column("answer").to_pylist()]
        answers, usage, calls = model_answers(self.draft, rows, self.ask)
        self.pay(usage, calls)
        if self.ledger is not None:
            texts = [None if answer is None else json.dumps(answer, default=str) for answer in answers]
            record = pa.Table.from_pydict({"answer": texts}, schema=_ROUND_SCHEMA)
            self.ledger.commit(self.key, batch, (), record, usage=paid_for(usage, calls))
        return answers
