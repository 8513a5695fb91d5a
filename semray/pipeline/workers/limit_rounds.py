"""A LIMIT over a chain of semantic steps, in round trips that grow (``GrowingLimitStage``).

On an actor pool a LIMIT stops the model calls only after every batch already dispatched has
come back: several batches per actor, and for a chain, whatever the first operator asked while
the second worked. Here the driver asks one round at a time, through the whole chain, and stops
as soon as enough rows passed, so the calls are about ``LIMIT / selectivity`` plus the overshoot
of the last round (at most its own size, which doubles from a first round sized for the LIMIT).

The chain may hold cascades (``cascade_rounds.CascadeRounds``: the first round is their
calibration population, later rounds are routed row by row) and end in a pair join's verification
(its pairs come in rounds from the join stage below). Lowering sizes the first round
(``cost_model/limit_chain.first_round_rows``); ``pipeline/ray/limit_rounds.py`` builds the steps and runs
``limited_rows`` over the stream under the chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from semray.log import get_logger

log = get_logger(__name__)

Step = Callable[[pa.Table], pa.Table]


def next_round(last: int, drawn: int, passed: int, wanted: int, growth: int, max_rows: int) -> int:
    """Rows of the next round trip after ``drawn`` input rows gave ``passed`` of ``wanted``:
    ``growth`` times the last round (at most ``max_rows``), or fewer where the selectivity seen so
    far says fewer will do (``(wanted - passed) / (passed / drawn)`` rows).

    >>> next_round(20, 20, 0, 5, 2, 256)  # nothing passed yet: twice as many
    40
    >>> next_round(20, 20, 4, 5, 2, 256)  # 1 more row at 1 in 5: 5 rows
    5
    """
    grown = min(last * growth, max_rows)
    if not passed:
        return grown
    return max(1, min(grown, math.ceil((wanted - passed) * drawn / passed)))


def limited_rows(
    batches: Iterator[pa.Table],
    steps: Sequence[Step],
    wanted: int,
    first_rows: int,
    growth: int = 2,
    max_rows: int = 256,
) -> list[pa.Table]:
    """Run ``steps`` (bottom first) over rounds of rows drawn from ``batches`` until ``wanted`` rows
    passed them all or the input ran out; the output tables in input order (perhaps a few rows more
    than ``wanted``: the caller trims). The first round covers ``first_rows`` rows, each later one
    `next_round`. Nothing is drawn from ``batches`` beyond what the last round needs.

    >>> keep_even = lambda t: t.filter(pa.compute.equal(pa.compute.bit_wise_and(t["a"], 1), 0))
    >>> out = limited_rows(iter([pa.table({"a": list(range(100))})]), [keep_even], 5, 4)
    >>> [table.num_rows for table in out]  # 4 rows gave 2; 3 more at 1 in 2: 6 rows
    [2, 3]
    """
    pending: list[pa.Table] = []
    buffered = passed = drawn = rounds = 0
    size = max(1, first_rows)
    outputs: list[pa.Table] = []
    exhausted = False
    while passed < wanted:
        if rounds:
            size = next_round(size, drawn, passed, wanted, growth, max_rows)
        while buffered < size and not exhausted:
            batch = next(batches, None)
            if batch is None:
                exhausted = True
            elif batch.num_rows:
                pending.append(batch)
                buffered += batch.num_rows
        if not buffered:
            break
        rows = pa.concat_tables(pending, promote_options="default") if len(pending) > 1 else pending[0]
        chunk, rest = rows.slice(0, size), rows.slice(size)
        pending, buffered = ([rest] if rest.num_rows else []), rest.num_rows
        drawn += chunk.num_rows
        for step in steps:
            if not chunk.num_rows:
                break
            chunk = step(chunk)
        if chunk.num_rows:
            outputs.append(chunk)
            passed += chunk.num_rows
        rounds += 1
    log.debug("limit_rounds_finished", rounds=rounds, passed=passed, wanted=wanted)
    return outputs
