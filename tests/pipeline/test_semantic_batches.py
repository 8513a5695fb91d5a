"""How many rows a semantic operator sends per model round trip (lowering only, no Ray)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import semray
from semray.operators.semantic import QualityTarget
from semray.pipeline.lowering.driver import lower
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import GrowingLimitStage, LimitStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.pipeline.workers.limit_rounds import limited_rows, next_round
from semray.settings import Settings


def semantic_batches(stage: Stage) -> list[int]:
    found = [stage.batch_rows] if isinstance(stage, SemanticStage) else []
    return found + [rows for child in stage.inputs for rows in semantic_batches(child)]


def tickets(tmp_path: Path, rows: int) -> Path:
    path = tmp_path / f"t{rows}.parquet"
    pq.write_table(pa.table({"text": [f"ticket {i}" for i in range(rows)]}), path)
    return path


def test_batches_grow_with_the_input_and_stay_small_under_a_limit(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    small = semray.read_parquet(tickets(tmp_path, 500)).sem_filter("{text} is urgent")
    large = semray.read_parquet(tickets(tmp_path, 100_000)).sem_filter("{text} is urgent")
    tiny = semray.read_parquet(tickets(tmp_path, 200)).sem_filter("{text} is urgent")
    assert semantic_batches(lower(tiny.plan, settings)) == [32]  # 200 rows: 2 actors x 4 batches is 25 rows each
    assert semantic_batches(lower(small.plan, settings)) == [62]  # 500 / (2 actors x 4)
    assert semantic_batches(lower(large.plan, settings)) == [256]
    assert semantic_batches(lower(large.limit(10).plan, settings)) == [32]
    assert semantic_batches(lower(large.plan, settings.model_copy(update={"semantic_batch_max": 32}))) == [32]
    middle = semray.read_parquet(tickets(tmp_path, 1_000)).sem_filter("{text} is urgent")
    assert semantic_batches(lower(middle.plan, settings)) == [125]  # 1,000 / (2 actors x 4)


def test_the_actor_pool_has_no_actor_without_a_batch(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    for rows, actors in ((20, 1), (32, 1), (33, 2), (100_000, 2)):
        query = semray.read_parquet(tickets(tmp_path, rows)).sem_filter("{text} is urgent")
        assert semantic_pools(lower(query.plan, settings)) == [actors], rows
    four = settings.model_copy(update={"semantic_actors": 4})
    query = semray.read_parquet(tickets(tmp_path, 90)).sem_filter("{text} is urgent")
    assert semantic_pools(lower(query.plan, four)) == [3]  # 90 rows, 32-row batches


def semantic_pools(stage: Stage) -> list[int]:
    found = [stage.actors] if isinstance(stage, SemanticStage) else []
    return found + [actors for child in stage.inputs for actors in semantic_pools(child)]


def test_a_limit_over_a_semantic_chain_asks_limit_over_selectivity_rows_first(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    scan = semray.read_parquet(tickets(tmp_path, 2_000))
    one = lower(scan.sem_filter("{text} is urgent").limit(5).plan, settings)
    assert isinstance(one, GrowingLimitStage) and one.first_rows == 10  # 5 / 0.5 (unmeasured selectivity)
    assert semantic_batches(one) == [32]
    two = lower(scan.sem_filter("{text} is urgent").sem_filter("{text} is late").limit(5, offset=5).plan, settings)
    assert isinstance(two, GrowingLimitStage) and two.first_rows == 40  # 10 / (0.5 x 0.5)
    mapped = lower(scan.sem_map("{text} in one word", output="word").limit(5).plan, settings)
    assert isinstance(mapped, GrowingLimitStage) and mapped.first_rows == 5  # a map keeps every row
    relational = lower(scan.filter("text <> ''").limit(5).plan, settings)
    assert type(relational) is LimitStage


def test_a_cascade_under_a_limit_smaller_than_its_calibration_asks_the_large_tier_row_by_row(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    scan = semray.read_parquet(tickets(tmp_path, 2_000))
    cascaded = scan.sem_filter("{text} is urgent").with_quality(0.9)
    small = lower(cascaded.limit(5).plan, settings)
    assert isinstance(small, GrowingLimitStage) and small.first_rows == 10
    assert [stage.task.tier for stage in _semantic_stages(small)] == ["large"]
    # 5 rows at 0.5 need 10, fewer than the 200 labels calibration would buy; 150 rows need 300,
    # so the cascade keeps its calibration and routes in the LIMIT's rounds.
    big = lower(cascaded.limit(150).plan, settings)
    assert isinstance(big, GrowingLimitStage) and type(big.inputs[0]).__name__ == "CascadeStage"
    fewer_labels = scan.sem_filter("{text} is urgent", quality=QualityTarget(level=0.8, labels=20))
    few = lower(fewer_labels.limit(15).plan, settings)  # 30 rows > 20 labels
    assert isinstance(few, GrowingLimitStage) and type(few.inputs[0]).__name__ == "CascadeStage"
    # Only the chain right under the LIMIT changes tier; a cascade below a sort keeps its stage.
    below_sort = lower(cascaded.sort("text").sem_map("{text} in one word", output="w").limit(5).plan, settings)
    assert isinstance(below_sort, GrowingLimitStage)
    assert [stage.task.tier for stage in _semantic_stages(below_sort)] == ["large"]
    assert any(type(stage).__name__ == "CascadeStage" for stage in _stages(below_sort))


def _stages(stage: Stage) -> list[Stage]:
    return [stage, *(found for child in stage.inputs for found in _stages(child))]


def _semantic_stages(stage: Stage) -> list[SemanticStage]:
    return [found for found in _stages(stage) if type(found) is SemanticStage]


def test_round_trips_grow_and_stop_once_the_limit_is_reached() -> None:
    asked: list[int] = []

    def keep_a_quarter(batch: pa.Table) -> pa.Table:
        asked.append(batch.num_rows)
        return batch.filter(pc.equal(pc.bit_wise_and(batch["a"], 3), 0))  # a quarter of the rows

    batches = iter([pa.table({"a": list(range(start, start + 7))}) for start in range(0, 700, 7)])
    out = limited_rows(batches, [keep_a_quarter], wanted=20, first_rows=10, growth=2, max_rows=64)
    kept = [value for table in out for value in table.column("a").to_pylist()]
    assert kept[:20] == list(range(0, 80, 4))
    assert sum(asked) <= 3 * 20 * 4 and asked[0] == 10
    assert all(later <= 2 * earlier for earlier, later in itertools.pairwise(asked))
    assert next(batches).column("a")[0].as_py() < 200  # the input was not drained


def test_next_round_doubles_until_the_seen_selectivity_says_less_will_do() -> None:
    assert next_round(10, 10, 0, 5, 2, 256) == 20
    assert next_round(200, 300, 0, 5, 2, 256) == 256
    assert next_round(10, 10, 4, 5, 2, 256) == 3  # one more row at 4 in 10
