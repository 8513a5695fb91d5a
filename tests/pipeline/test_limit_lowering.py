"""How a LIMIT over joins, top-k and cascades lowers (no Ray): which stages run in round trips
on the driver (``GrowingLimitStage``), how many rows the first round covers, and what stays a
plain ``LimitStage``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from semray.operators.relational import Limit
from semray.operators.semantic import QualityTarget, SemJoin
from semray.pipeline.lowering.driver import lower
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BroadcastJoinStage, GrowingLimitStage, LimitStage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage
from semray.pipeline.stages.set_ops import BlockStage, TopKStage
from semray.query import Query
from semray.readers import read_parquet
from semray.settings import Settings


def scan(tmp_path: Path, name: str, rows: int) -> Query:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({name: [f"{name} {i}" for i in range(rows)]}), path)
    return read_parquet(path)


def chain(stage: Stage) -> list[type[Stage]]:
    """Stage types from ``stage`` down its first inputs."""
    types = [type(stage)]
    while stage.inputs:
        stage = stage.inputs[0]
        types.append(type(stage))
    return types


def test_a_cascade_under_a_limit_larger_than_its_calibration_calibrates_in_the_rounds(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    tickets = scan(tmp_path, "text", 2_000)
    cascaded = tickets.sem_filter("{text} is urgent").with_quality(0.9)
    # 150 rows at 0.5 need 300, more than the 200 labels: the cascade stays, its first round is 300 rows.
    big = lower(cascaded.limit(150).plan, settings)
    assert isinstance(big, GrowingLimitStage) and big.first_rows == 300 and big.max_rows == 300
    assert type(big.inputs[0]) is CascadeStage
    fewer_labels = tickets.sem_filter("{text} is urgent", quality=QualityTarget(level=0.8, labels=20))
    fifteen = lower(fewer_labels.limit(15).plan, settings)  # 30 rows > 20 labels
    assert isinstance(fifteen, GrowingLimitStage) and fifteen.first_rows == 30
    assert type(fifteen.inputs[0]) is CascadeStage
    # Within its calibration the cascade still runs on the large tier row by row.
    small = lower(cascaded.limit(5).plan, settings)
    assert isinstance(small, GrowingLimitStage) and type(small.inputs[0]) is SemanticStage
    assert small.inputs[0].task.tier == "large"


def test_a_pair_join_under_a_limit_judges_its_pairs_in_rounds(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    left, right = scan(tmp_path, "a", 40), scan(tmp_path, "b", 30)
    nested = lower(left.sem_join(right, "{l.a} matches {r.b}", implementation="nested").limit(5).plan, settings)
    assert isinstance(nested, GrowingLimitStage) and nested.first_rows == 50  # 5 / 0.1 of the pairs
    assert chain(nested)[:3] == [GrowingLimitStage, SemanticStage, BroadcastJoinStage]
    blocked = lower(left.sem_join(right, "{l.a} matches {r.b}", implementation="blocked").limit(5).plan, settings)
    assert isinstance(blocked, GrowingLimitStage)
    assert chain(blocked)[:3] == [GrowingLimitStage, SemanticStage, BlockStage]
    # A filter over the join: both run in the rounds, the first covering 5 / (0.5 x 0.1) pairs.
    filtered = left.sem_join(right, "{l.a} matches {r.b}", implementation="nested").sem_filter("{a} is late")
    over = lower(filtered.limit(5).plan, settings)
    assert isinstance(over, GrowingLimitStage) and over.first_rows == 100
    assert chain(over)[:4] == [GrowingLimitStage, SemanticStage, SemanticStage, BroadcastJoinStage]


def test_a_factorized_join_under_a_limit_asks_its_left_rows_in_rounds(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    left, right = scan(tmp_path, "a", 40), scan(tmp_path, "b", 30)
    factorized = left.sem_join(right, "{l.a} is the same colour as {r.b}", implementation="factorized")
    limited = lower(factorized.limit(5).plan, settings)
    # Each left row keeps 0.1 x 30 right rows: 5 / 3 -> 2 left rows first; the right side is asked whole.
    assert isinstance(limited, GrowingLimitStage) and limited.first_rows == 2
    assert chain(limited)[:3] == [GrowingLimitStage, BroadcastJoinStage, SemanticStage]
    join = limited.inputs[0]
    assert isinstance(join, BroadcastJoinStage) and join.left_rounds
    assert type(join.inputs[1]) is SemanticStage  # the right side's question, on its actor pool
    # A semantic filter on the left side runs in the same rounds: 5 / (3 x 0.5) -> 4 rows first.
    under = left.sem_filter("{a} is late").sem_join(right, "{l.a} is the same colour as {r.b}", "factorized")
    filtered = lower(under.limit(5).plan, settings)
    assert isinstance(filtered, GrowingLimitStage) and filtered.first_rows == 4
    assert chain(filtered)[:4] == [GrowingLimitStage, BroadcastJoinStage, SemanticStage, SemanticStage]
    # A cascade on the left side that the LIMIT needs fewer rows of than it would label runs on the
    # large tier in the rounds (a first round of 4 rows is no calibration population).
    cascaded = left.sem_filter("{a} is late").with_quality(0.9)
    cascade_join = cascaded.sem_join(
        right.sem_filter("{b} is new").with_quality(0.9), "{l.a} is the same colour as {r.b}", "factorized"
    )
    on_large = lower(cascade_join.limit(5).plan, settings)
    assert chain(on_large)[:4] == [GrowingLimitStage, BroadcastJoinStage, SemanticStage, SemanticStage]
    left_filter = on_large.inputs[0].inputs[0].inputs[0]
    assert isinstance(left_filter, SemanticStage) and left_filter.task.tier == "large"
    right_side = on_large.inputs[0].inputs[1].inputs[0]  # under the right side's question: still a cascade
    assert type(right_side) is CascadeStage
    # Classified into the right side's values: only the left rows are asked, in the rounds.
    labels = SemJoin(
        left=left.plan, right=right.plan, instruction="{l.a} is the colour {r.b}", implementation="factorized",
        labels=("red", "blue"), right_labels=True,
    )  # fmt: skip
    into = lower(Limit(input=labels, count=5), settings)
    assert isinstance(into, GrowingLimitStage) and into.first_rows == 2
    assert chain(into)[:3] == [GrowingLimitStage, BroadcastJoinStage, SemanticStage]


def test_a_nested_join_is_no_step_of_the_rounds_and_relational_plans_keep_a_plain_limit(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    left, right = scan(tmp_path, "a", 40), scan(tmp_path, "b", 30)
    nested = lower(left.sem_join(right, "{l.a} matches {r.b}", implementation="nested").plan, settings)
    assert isinstance(nested.inputs[0], BroadcastJoinStage) and not nested.inputs[0].left_rounds
    assert type(lower(left.filter("a <> ''").limit(5).plan, settings)) is LimitStage


def test_a_top_k_under_a_smaller_limit_ranks_only_the_rows_it_keeps(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    ranked = scan(tmp_path, "text", 200).sem_topk("{text} is most urgent", k=10)
    three = lower(ranked.limit(3).plan, settings)
    assert isinstance(three, LimitStage) and not isinstance(three, GrowingLimitStage)
    topk = three.inputs[0]
    assert isinstance(topk, TopKStage) and topk.k == 3
    unlimited = lower(ranked.plan, settings)
    # Runs as the top 3 would: the prefilter keeps max(4 x 3, 32) = 32 candidates, not the top 10's 40.
    alone = lower(scan(tmp_path, "text", 200).sem_topk("{text} is most urgent", k=3).plan, settings)
    assert isinstance(unlimited, TopKStage) and isinstance(alone, TopKStage)
    assert (topk.prefilter, alone.prefilter, unlimited.prefilter) == (32, 32, 40)
    assert topk.operators == unlimited.operators  # counted as the same operator
    offset = lower(ranked.limit(3, offset=2).plan, settings).inputs[0]
    assert isinstance(offset, TopKStage) and offset.k == 5
    wider = lower(ranked.limit(20).plan, settings).inputs[0]
    assert isinstance(wider, TopKStage) and wider.k == 10
