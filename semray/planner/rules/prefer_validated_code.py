"""Choice rule: a row-wise map or extraction becomes a validated ``SemCode`` when its function
agreed with the model's own per-row answers at least as often as the quality target asks.

A ``SemCode`` costs its generation and validation calls once, at plan time
(``cost_model/code_cost.py``), and CPU only per row; the per-row operator pays one model call per
row. So once a function is written and validated on a sample, it is the cheaper way to compute
the same columns, and the only question is whether it computes the *same* values: the agreement
measured on the validation sample (``pipeline/runs/plan_time/code_generation.py``) answers it. The rule knows
nothing of models: the plan-time step ``pipeline/runs/plan_time/code_choice.py`` prices the alternative, has the
large tier write and validate the function, and hands each trial to the rule through a
``CodeRuleContext``. Without trials (a plain ``RuleContext``, as the optimizer's ``RULES``
fixpoint passes) the rule returns its input, so it is opt-in.

Precondition: a ``SemMap`` without a score range or a ``SemExtract``, on ``tier="auto"``,
without diagnostics, ``on_error`` not ``skip``, whose instruction reads at least one column
(`code_candidate`); and a trial for it (`trial_key`: operator, instruction and outputs, so the
trial holds whatever input the rules gave the operator) whose function passed validation with
``agreement >= target``. The target is the operator's own quality target when it has one
(``Semantic.agreement_target``: its level, at confidence ``1 - delta``), stricter or looser than
the query's, else the query's (`agreement_target`); a trial measured against a lower target
than the operator's own does not pass.

Why results are preserved, and how far: the output columns keep their names, types and order
(the function's outputs are the operator's fields; ``_rowid`` and the input columns pass
through), and every input row gives one output row. The values are those of the function, not
the model's: on the validation sample they matched the model's per-row answers on at least
``target`` of the rows, and the choice (``pipeline/runs/plan_time/code_choice.py``) passes a trial only when
the one-sided lower confidence bound on that agreement reaches ``target``; on other rows it holds
like a cascade's target, only as far as the sample is like them. A function that did not
reach the target is never committed and the per-row operator stays. Not in ``RULES``: those
rules keep results exactly with tiers pinned (docs/optimizer.md), this one only within the
measured agreement.

Before::

    SemExtract '{raw}' -> day: date
    └─ Scan dates

After (trial: agreement 0.95, target 0.90)::

    SemCode [code 3f2a... (generated, validated, agreement 0.95 >= target 0.90); runs sandboxed,
             CPU only] '{raw}' -> day: date instead of per-row SemExtract '{raw}'
    └─ Scan dates
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from semray.operators.base import Node, transform
from semray.operators.code import SemCode
from semray.operators.semantic import ExtractField, SemExtract, SemMap
from semray.operators.templates import template_columns
from semray.planner.rules.context import EMPTY_CONTEXT, RuleContext

log = structlog.get_logger(__name__)

TrialKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(operator, instruction, (output, type) ...): what a trial was measured for."""


@dataclass(frozen=True, slots=True)
class CodeTrial:
    """What the large tier's function did on the validation sample of one operator.

    ``code`` is None when no function passed validation (``problem`` says why); ``agreement`` is
    the share of sample rows on which the function matched the model's own answers (None: the
    model answered no sample row). ``calls`` and ``dollars`` are what generation and validation
    cost, already paid.
    """

    code: str | None
    agreement: float | None
    target: float
    sample_rows: int
    calls: int = 0
    dollars: float = 0.0
    problem: str | None = None

    @property
    def meets_target(self) -> bool:
        return self.code is not None and self.agreement is not None and self.agreement >= self.target


def _no_trial(node: Node) -> CodeTrial | None:
    return None


@dataclass(frozen=True, slots=True)
class CodeRuleContext(RuleContext):
    """A ``RuleContext`` that also knows the code trials: ``code_trial(node)`` for a candidate."""

    code_trial: Callable[[Node], CodeTrial | None] = field(default=_no_trial)


def code_candidate(node: Node) -> bool:
    """Whether ``node`` is a row-wise map or extraction whose work a function could do (see the
    module's precondition)."""
    if not isinstance(node, SemMap | SemExtract):
        return False
    if node.tier != "auto" or node.diagnostics or node.on_error == "skip":
        return False
    if isinstance(node, SemMap) and node.lo is not None:
        return False  # a score is a judgement with a range; it cascades instead
    return bool(template_columns(node.instruction, type(node).__name__))


def agreement_target(node: SemMap | SemExtract, target: float, confidence: float) -> tuple[float, float]:
    """The (target, confidence) ``node``'s function must reach: its own quality target's level at
    ``1 - delta`` when it has one (it wins over the query's, stricter or looser), else the query's.

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> from semray.operators.semantic import QualityTarget
    >>> scan = Scan(source=SourceSpec(kind="csv", path="d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    >>> def day(**own: object) -> SemMap:
    ...     return SemMap(input=scan, instruction="{raw} as a date", output="day", output_type="date", **own)
    >>> strict = day(quality=QualityTarget(level=0.97, delta=0.01))
    >>> agreement_target(day(), 0.9, 0.95), agreement_target(strict, 0.9, 0.95)
    ((0.9, 0.95), (0.97, 0.99))
    """
    own = node.agreement_target()
    if own is None:
        return target, confidence
    return own.level, round(1.0 - own.delta, 12)


def code_outputs(node: SemMap | SemExtract) -> tuple[ExtractField, ...]:
    """The typed columns the per-row operator adds, as SemCode outputs."""
    if isinstance(node, SemMap):
        return (ExtractField(name=node.output, type=node.output_type),)
    return node.fields


def trial_key(node: SemMap | SemExtract) -> TrialKey:
    """What identifies a trial: the operator, its instruction and its typed outputs.

    >>> from semray.operators import Scan, Schema, SourceSpec
    >>> scan = Scan(source=SourceSpec(kind="csv", path="d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
    >>> trial_key(SemMap(input=scan, instruction="{raw} as a date", output="day", output_type="date"))
    ('sem_map', '{raw} as a date', (('day', 'date'),))
    """
    return (node.op, node.instruction, tuple((output.name, output.type) for output in code_outputs(node)))


def code_draft(node: SemMap | SemExtract, target: float, sample_rows: int) -> SemCode:
    """The SemCode that would do ``node``'s work: same input, instruction and outputs, no code yet,
    validated against the model's per-row answers at ``target``."""
    return SemCode(
        input=node.input,
        instruction=node.instruction,
        inputs=template_columns(node.instruction, type(node).__name__),
        outputs=code_outputs(node),
        min_agreement=target,
        sample_rows=sample_rows,
        replaces=node.label(),
    )


def prefer_validated_code(plan: Node, context: RuleContext = EMPTY_CONTEXT) -> Node:
    """Replace each candidate whose trial met its target by the validated SemCode."""
    trial_of = getattr(context, "code_trial", None)
    if trial_of is None:
        return plan

    def choose(node: Node) -> Node:
        if not code_candidate(node):
            return node
        assert isinstance(node, SemMap | SemExtract)
        trial = trial_of(node)
        if trial is None:
            return node
        own = node.agreement_target()
        if not trial.meets_target or trial.code is None or (own is not None and trial.target < own.level):
            problem = trial.problem
            if own is not None and trial.target < own.level:
                problem = f"the trial was measured against {trial.target:.2f}, below the operator's own {own.level:.2f}"
            log.info(
                "planner.code_not_chosen",
                operator=node.label(),
                agreement=trial.agreement,
                target=max(trial.target, own.level if own is not None else 0.0),
                problem=problem,
            )
            return node
        draft = code_draft(node, trial.target, trial.sample_rows)
        fields = {name: getattr(draft, name) for name in type(draft).model_fields}
        fields.update(code=trial.code, code_sha256=None, origin="generated", agreement=trial.agreement)
        chosen = SemCode.model_validate(fields)
        log.info("planner.code_chosen", operator=node.label(), agreement=trial.agreement, target=trial.target)
        return chosen

    return transform(plan, choose)
