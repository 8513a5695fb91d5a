"""Candidate pairs of a blocked SemJoin, and the blocking recall against known matches.

>>> import numpy as np
>>> left = np.eye(2, dtype=np.float32); right = np.eye(2, dtype=np.float32)[::-1]
>>> nearest(left, right, 1).tolist()
[[1], [0]]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from semray.operators.schema import ROW_ID
from semray.pipeline.stages.set_ops import VECTOR, BlockStage


def nearest(left: npt.NDArray[np.float32], right: npt.NDArray[np.float32], per_row: int) -> npt.NDArray[np.int64]:
    """For each left vector, the indices of the ``per_row`` right vectors of highest cosine similarity
    (unit vectors: the dot product), best first; ties by lower index."""
    count = min(per_row, right.shape[0])
    if count == 0 or left.shape[0] == 0:
        return np.zeros((left.shape[0], 0), dtype=np.int64)
    similarity = left @ right.T
    if count < right.shape[0]:
        part = np.argpartition(-similarity, count - 1, axis=1)[:, :count]
    else:
        part = np.tile(np.arange(right.shape[0]), (left.shape[0], 1))
    scores = np.take_along_axis(similarity, part, axis=1)
    order = np.lexsort((part, -scores), axis=1)
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def vectors_of(table: pa.Table) -> npt.NDArray[np.float32]:
    column = table.column(VECTOR)
    if table.num_rows == 0:
        return np.zeros((0, 1), dtype=np.float32)
    return np.asarray(column.to_pylist(), dtype=np.float32)


def candidate_pairs(left: pa.Table, right: pa.Table, stage: BlockStage) -> pa.Table:
    """Pair rows (``_rowid`` = ``left*right``, left columns, renamed right columns) of the candidates."""
    chosen = nearest(vectors_of(left), vectors_of(right), stage.per_row)
    left_index = np.repeat(np.arange(left.num_rows, dtype=np.int64), chosen.shape[1])
    right_index = chosen.reshape(-1)
    left_rows = left.take(pa.array(left_index))
    right_rows = right.take(pa.array(right_index))
    row_ids = pc.binary_join_element_wise(
        left_rows.column(ROW_ID).cast(pa.string()), right_rows.column(ROW_ID).cast(pa.string()), "*"
    )
    columns: dict[str, pa.ChunkedArray | pa.Array] = {ROW_ID: row_ids}
    for name in stage.left_names:
        if name != ROW_ID:
            columns[name] = left_rows.column(name)
    for old, new in stage.right_names:
        columns[new] = right_rows.column(old)
    return pa.table(columns)


def blocking_recall(candidates: Iterable[tuple[str, str]], matches: Iterable[tuple[str, str]]) -> float | None:
    """Share of the true matching pairs that blocking kept as candidates (None without matches).

    >>> blocking_recall([("a", "x"), ("b", "y")], [("a", "x"), ("b", "z")])
    0.5
    """
    wanted = set(matches)
    if not wanted:
        return None
    return len(wanted & set(candidates)) / len(wanted)
