"""Physical stages of the row-wise semantic operators: what a stage asks each row (``SemanticTask``),
an actor pool asking it (``SemanticStage``), and a cascade of tiers (``CascadeStage``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BatchSqlStage, BroadcastJoinStage, SelfJoinStage
from semray.tasks import Question, TaskKind


@dataclass(frozen=True, slots=True)
class SemanticTask:
    """What a row-wise semantic stage asks of each row, as plain values."""

    kind: TaskKind
    instruction: str
    tier: str
    outputs: tuple[tuple[str, str], ...] = ()
    """(column, semray value type) added to each row; empty for a filter."""
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    on_error: Literal["fail", "skip", "default"] = "default"
    diagnostics: bool = False
    """Append ``_tier``, ``_confidence`` and ``_error`` to each output row."""
    question_key: str | None = None
    """The operator's ``statistics_key`` (what it asks, wherever it sits): answers that estimation
    bought from a tier are journaled under ``estimation_key(question_key, tier)`` and reused."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", TaskKind(self.kind))  # a kind given as its string, too

    @property
    def question(self) -> Question:
        """What it asks each row, for ``serving.prompts.operators.row_request``."""
        fields = self.outputs if self.kind == TaskKind.EXTRACT else ()
        return Question(self.kind, self.instruction, choices=self.choices, lo=self.lo, hi=self.hi, fields=fields)


def estimation_key(question_key: str, tier: str) -> str:
    """The ledger key of the answers ``tier`` gave to a question during estimation.

    It names the question and the tier, not the operator's input, so the answers apply wherever
    the optimizer puts the operator, and only to execution on that same tier.

    >>> estimation_key("3f2a", "large")
    'answers:3f2a:large'
    """
    return f"answers:{question_key}:{tier}"


@dataclass(frozen=True, slots=True)
class SemanticStage(Stage):
    """A semantic operator over batches on an actor pool; each actor calls the model tiers
    through Serve handles, one round trip per batch, and commits batches to the run journal."""

    task: SemanticTask
    operator_key: str
    batch_rows: int
    actors: int

    def describe(self) -> str:
        return (
            f"Semantic[{self.task.kind} on {self.task.tier}] {self.task.instruction!r} "
            f"(actor pool of {self.actors}, batches of {self.batch_rows})"
        )


@dataclass(frozen=True, slots=True)
class CascadeStage(SemanticStage):
    """A semantic operator whose rows are routed embedding -> small -> large (cost_model/cascade_routes.py).

    The stage blocks: thresholds come from a calibration sample drawn over its whole input.
    """

    metric: Literal["accuracy", "precision", "recall"] = "accuracy"
    level: float = 0.9
    delta: float = 0.05
    labels: int = 200

    def describe(self) -> str:
        return (
            f"Cascade[{self.task.kind}: embedding -> small -> large, {self.metric} >= {self.level} "
            f"w.p. {1 - self.delta:g}, {self.labels} calibration draws] {self.task.instruction!r} "
            f"(actor pool of {self.actors}, batches of {self.batch_rows})"
        )


ROUND_STAGES = (SemanticStage, CascadeStage, BatchSqlStage)
"""Stages the driver runs in round trips under a LIMIT (``GrowingLimitStage``; exact types: an
embedding, top-k or aggregation stage subclasses ``SemanticStage`` but is no row-wise step)."""


def in_rounds(stage: Stage) -> bool:
    """Whether the driver can run ``stage`` as one step of a LIMIT's round trips over its first
    input: a `ROUND_STAGES` type, or a broadcast join whose left rows each join on their own
    (``BroadcastJoinStage.left_rounds``: a factorized join, its right side gathered once), or a
    factorized self-join (``SelfJoinStage``: each round joins with the rows of the rounds before)."""
    return (
        type(stage) in ROUND_STAGES
        or (type(stage) is BroadcastJoinStage and stage.left_rounds)
        or type(stage) is SelfJoinStage
    )
