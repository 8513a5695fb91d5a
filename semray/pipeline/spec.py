"""The physical plan: frozen stages that materialize.py turns into a Ray Data pipeline.

A stage says *how* (a SQL statement per batch, a hash-partitioned SQL step, a Ray
join); the logical plan said *what*. Stages are plain values, snapshot-testable
without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from semray.operators.relational import SourceSpec
from semray.tasks import Question, TaskKind


@dataclass(frozen=True, slots=True)
class Stage:
    """Base of physical stages; ``inputs`` are the upstream stages; ``operators`` the keys of the
    logical operators whose output is this stage's output (their rows are counted for EXPLAIN)."""

    inputs: tuple[Stage, ...] = field(default=(), kw_only=True)
    operators: tuple[str, ...] = field(default=(), kw_only=True)

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class ReadStage(Stage):
    source: SourceSpec
    columns: tuple[str, ...] | None
    batch_rows: int

    def describe(self) -> str:
        return f"Read {self.source.describe()} (batches of {self.batch_rows})"


@dataclass(frozen=True, slots=True)
class BatchSqlStage(Stage):
    """Run ``sql`` on every batch independently; the batch is the table ``batch``."""

    sql: str
    reason: str = ""
    keeps_rows: bool = False
    """Every input row yields one output row (a projection, helper columns): a stage over it may
    fuse with it without hiding a row count."""

    def describe(self) -> str:
        return f"BatchSql[{self.reason}] {self.sql}"


@dataclass(frozen=True, slots=True)
class PartitionedSqlStage(Stage):
    """Hash-partition rows by ``partition_by`` then run ``sql`` once per partition.

    Every group (aggregate keys, distinct rows) lands in exactly one partition, so
    per-partition SQL gives exact results for any aggregate.
    """

    partition_by: tuple[str, ...]
    num_partitions: int
    sql: str
    input_columns: tuple[tuple[str, str], ...]
    """(name, DuckDB type) of the partitioned input, to evaluate ``sql`` on no rows."""
    reason: str = ""

    def describe(self) -> str:
        keys = ", ".join(self.partition_by) or "(single partition)"
        return f"PartitionedSql[{self.reason}] by {keys} into {self.num_partitions}: {self.sql}"


@dataclass(frozen=True, slots=True)
class GatherSqlStage(Stage):
    """Gather every row of the input into one task and run ``sql`` over it (table ``batch``).

    For pipeline breakers over inputs small enough for one worker: no shuffle, exact SQL,
    and an empty input still gets SQL's answer (one row for a global count).
    """

    sql: str
    input_columns: tuple[tuple[str, str], ...]
    reason: str = ""

    def describe(self) -> str:
        return f"GatherSql[{self.reason}] {self.sql}"


@dataclass(frozen=True, slots=True)
class BroadcastJoinStage(Stage):
    """Join each batch of inputs[0] with all of inputs[1] (gathered once): ``sql`` over
    tables ``batch`` (left) and ``right``. Streams the left side, so LIMIT stops early."""

    sql: str
    right_columns: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"BroadcastJoin {self.sql}"


@dataclass(frozen=True, slots=True)
class JoinStage(Stage):
    """A Ray Data hash join of inputs[0] (left) and inputs[1] (right), both pre-renamed."""

    kind: Literal["inner", "left_outer", "left_semi", "left_anti"]
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    num_partitions: int

    def describe(self) -> str:
        pairs = ", ".join(f"{a}={b}" for a, b in zip(self.left_keys, self.right_keys, strict=True))
        return f"HashJoin {self.kind} on {pairs} ({self.num_partitions} partitions)"


@dataclass(frozen=True, slots=True)
class SortStage(Stage):
    columns: tuple[str, ...]
    descending: tuple[bool, ...]

    def describe(self) -> str:
        return "Sort " + ", ".join(
            c + (" DESC" if d else "") for c, d in zip(self.columns, self.descending, strict=True)
        )


@dataclass(frozen=True, slots=True)
class LimitStage(Stage):
    count: int
    offset: int = 0

    def describe(self) -> str:
        return f"Limit {self.count}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True, slots=True)
class GrowingLimitStage(LimitStage):
    """A LIMIT over a chain of row-wise semantic stages, cascades, a pair join's verification and
    per-batch SQL between them (``limit_rounds.ROUND_STAGES``) that the driver runs in round trips
    that grow: the first over ``first_rows`` input rows, each later one
    ``growth`` times the last (at most ``max_rows``), none once ``count + offset`` rows passed.

    Its input is the chain as lowered; what lies under the chain streams as usual.
    """

    first_rows: int = 1
    growth: int = 2
    max_rows: int = 256

    def describe(self) -> str:
        return (
            f"{LimitStage.describe(self)} (semantic round trips of {self.first_rows} rows, "
            f"x{self.growth} each, at most {self.max_rows}, until enough rows passed)"
        )


@dataclass(frozen=True, slots=True)
class UnionStage(Stage):
    def describe(self) -> str:
        return f"Union of {len(self.inputs)}"


def render_stages(stage: Stage, depth: int = 0) -> str:
    """Indented text of a physical plan, root first."""
    lines = ["  " * depth + stage.describe()]
    lines.extend(render_stages(child, depth + 1) for child in stage.inputs)
    return "\n".join(lines)


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
