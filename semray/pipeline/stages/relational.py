"""Physical stages of the relational operators: reads, per-batch SQL, gathers, shuffles, joins,
sorts, limits and unions (``pipeline/ray/relational.py`` builds each as Ray Data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from semray.pipeline.stages.base import Stage

if TYPE_CHECKING:  # annotations only: the actors that import stages need not load the plan layer
    from semray.operators.relational import SourceSpec


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


PARTITION = "_part"
"""The column a ``PartitionedSqlStage``'s input carries its hash partition in (dropped before ``sql``)."""


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
    tables ``batch`` (left) and ``right``. Streams the left side, so LIMIT stops early.

    ``left_rounds``: each left row's output depends on that row and the gathered right side alone
    (a factorized join), so under a LIMIT the join is a step of the driver's round trips over its
    left side (``stages.semantic.in_rounds``); a nested join's pairs are no such step (its rounds
    count pairs, drawn from this stage's stream).
    """

    sql: str
    right_columns: tuple[tuple[str, str], ...]
    left_rounds: bool = False

    def describe(self) -> str:
        return f"BroadcastJoin {self.sql}"


@dataclass(frozen=True, slots=True)
class SelfJoinStage(Stage):
    """A factorized join of a relation with itself: inputs[0] is the relation with each row's
    answer (asked once, not once per side); ``sql`` joins it with itself (tables ``batch`` as the
    left rows and ``right`` as all rows, the right side's columns typed by ``right_columns``).

    Without a LIMIT the answered rows are computed once and stream as the left side against
    themselves gathered; under a LIMIT (``stages.semantic.in_rounds``) each round's answered rows
    join with every row answered so far, so the rows asked grow only until the LIMIT's pairs are
    found (about ``sqrt(LIMIT / selectivity)`` rows).
    """

    sql: str
    right_columns: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"SelfJoin (each row asked once, joined with itself) {self.sql}"


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
    per-batch SQL between them, and factorized joins over their left side (``stages.semantic.in_rounds``),
    that the driver runs in round trips
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
