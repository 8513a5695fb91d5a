"""Ranked retrieval over one LanceDB table: vector, full-text (native FTS) and their reciprocal rank fusion.

The one place that calls LanceDB's search and fuses rankings; the run-scoped index of SemSearch
(``search_index.py``) and the catalog's segment search (``search.py``) both rank through it.

- **vector**: cosine similarity of unit vectors (``1 - cosine distance``), exact below an ANN
  index, approximate above it.
- **fts**: BM25 of LanceDB's native full-text index. The query is handed over as a
  ``MatchQuery`` (its terms, tokenized like the indexed text, OR-ed), never parsed as query
  syntax, so quotes, colons, parentheses, ``AND`` / ``OR`` or ``*`` in a user's words are just
  words (or nothing, after tokenization), and cannot change what is matched.
- **hybrid**: the best ``candidates`` of each list fused by reciprocal rank fusion (Cormack et
  al., SIGIR 2009): ``score(d) = sum over the lists holding d of 1 / (RRF_K + rank(d))`` with
  1-based ranks and ``RRF_K = 60``. Done here rather than by LanceDB's ``RRFReranker``, which
  returns only the fused score: every hit keeps its rank in each list (``None`` where absent).

Filters are SQL ``where`` strings the caller built or validated; they are pushed into LanceDB as
prefilters, so ``k`` hits are found among the matching rows.

>>> fuse_rankings(["a", "b"], ["b", "c"], k=3)[0]
Fused(key='b', score=0.0325..., vector_rank=2, fts_rank=1)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.catalog.shards import tables_of
from semray.errors import SearchError
from semray.log import get_logger

log = get_logger(__name__)

RRF_K = 60
"""The constant of reciprocal rank fusion; 60 is the value of the paper, and it is not critical."""
HYBRID_CANDIDATES = 50
"""Each list contributes at least this many candidates to a hybrid search (more when ``k`` is larger)."""
ANN_MIN_ROWS = 50_000
"""Fewer rows are searched exactly: an HNSW index costs more to build than it saves."""
ANN_EF = 150
"""Candidates an HNSW search explores (``search.HNSW_EF_CONSTRUCTION`` has the measurement); ignored by an
exact search."""
SearchMode = Literal["vector", "fts", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("vector", "fts", "hybrid")


@dataclass(frozen=True, slots=True)
class Fused:
    """One key's fused score and its 1-based rank in each list (None where it is absent)."""

    key: Hashable
    score: float
    vector_rank: int | None
    fts_rank: int | None


@dataclass(frozen=True, slots=True)
class RankedRow:
    """One hit: the selected columns of its row, its score and its ranks in the lists searched."""

    row: dict[str, Any]
    score: float
    vector_rank: int | None
    fts_rank: int | None


def fuse_rankings(vector: Sequence[Hashable], fts: Sequence[Hashable], *, k: int, constant: int = RRF_K) -> list[Fused]:
    """Reciprocal rank fusion of two rankings (best first), the ``k`` best fused keys, best first.

    Ties in the fused score go to the key with the better single rank, then to the vector list's
    order, then the full-text list's: the result is deterministic.

    >>> [f.key for f in fuse_rankings(["a", "b", "c"], ["c", "d"], k=4)]
    ['c', 'a', 'b', 'd']
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    vector_ranks = _ranks(vector)
    fts_ranks = _ranks(fts)
    first_seen: dict[Hashable, int] = {}
    for key in [*vector_ranks, *fts_ranks]:
        first_seen.setdefault(key, len(first_seen))
    fused = []
    for key, seen in first_seen.items():
        ranks = [rank for rank in (vector_ranks.get(key), fts_ranks.get(key)) if rank is not None]
        score = sum(1.0 / (constant + rank) for rank in ranks)
        fused.append((-score, min(ranks), seen, Fused(key, score, vector_ranks.get(key), fts_ranks.get(key))))
    fused.sort(key=lambda item: item[:3])
    return [item[3] for item in fused[:k]]


def _ranks(keys: Sequence[Hashable]) -> dict[Hashable, int]:
    """1-based rank of each key; a key listed twice keeps its first (best) rank."""
    ranks: dict[Hashable, int] = {}
    for rank, key in enumerate(keys, start=1):
        ranks.setdefault(key, rank)
    return ranks


def full_text_index() -> Any:
    """The configuration of every full-text index: LanceDB's native FTS with the ICU tokenizer.

    ICU segments words of scripts written without spaces (Chinese, Japanese, Thai) as well as
    space-separated ones; tokens are lower-cased, accents folded, English stop words dropped and
    words stemmed (English rules: ``runs`` matches ``running``).

    >>> full_text_index().base_tokenizer
    'icu'
    """
    from lancedb.index import FTS

    return FTS(base_tokenizer="icu")


def rank_rows(
    table: Any,
    *,
    mode: SearchMode,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    k: int,
    key: str,
    columns: Sequence[str],
    where: str | None = None,
    text_column: str = "text",
    vector_column: str = "vector",
) -> list[RankedRow]:
    """The ``k`` best rows of a LanceDB ``table`` for ``query`` / ``query_vector``, best first; of a ``Shards``,
    each shard's best, merged by score (``shards.py``: BM25 scores are per shard).

    ``key`` names a column unique per row (it identifies a row across the two lists of a hybrid
    search); ``columns`` are returned in ``RankedRow.row``. Scores: cosine similarity (vector),
    BM25 (fts), reciprocal rank fusion (hybrid). A query with no searchable term (empty, only
    stop words or punctuation) finds nothing by full text; a hybrid search then ranks by vectors
    alone (fused scores, ``fts_rank`` None).
    """
    if mode not in SEARCH_MODES:
        raise SearchError(f"search mode {mode!r} is not one of {', '.join(SEARCH_MODES)}")
    if k < 1:
        raise SearchError(f"search k must be at least 1, not {k}")
    selected = list(dict.fromkeys([key, *columns]))
    tables = tables_of(table)

    def vector_list(limit: int) -> list[tuple[dict[str, Any], float]]:
        return _best(
            (_vector_hits(shard, query_vector, limit, where, selected, vector_column) for shard in tables), limit
        )

    def text_list(limit: int) -> list[tuple[dict[str, Any], float]]:
        return _best((_fts_hits(shard, query, limit, where, selected, text_column) for shard in tables), limit)

    if mode == "vector":
        return [RankedRow(row, score, rank, None) for rank, (row, score) in enumerate(vector_list(k), start=1)]
    if mode == "fts":
        return [RankedRow(row, score, None, rank) for rank, (row, score) in enumerate(text_list(k), start=1)]
    candidates = max(HYBRID_CANDIDATES, 2 * k)
    by_vector, by_text = vector_list(candidates), text_list(candidates)
    rows = {row[key]: row for row, _ in [*by_vector, *by_text]}
    fused = fuse_rankings([row[key] for row, _ in by_vector], [row[key] for row, _ in by_text], k=k)
    return [RankedRow(rows[hit.key], hit.score, hit.vector_rank, hit.fts_rank) for hit in fused]


def _best(lists: Iterable[list[tuple[dict[str, Any], float]]], limit: int) -> list[tuple[dict[str, Any], float]]:
    """The ``limit`` best hits of every shard's list (each its shard's best ``limit``), best score first.

    >>> _best([[({"k": "a"}, 0.9), ({"k": "b"}, 0.2)], [({"k": "c"}, 0.5)]], 2)
    [({'k': 'a'}, 0.9), ({'k': 'c'}, 0.5)]
    """
    lists = list(lists)
    if len(lists) == 1:
        return lists[0]
    return heapq.nlargest(limit, itertools.chain.from_iterable(lists), key=lambda hit: hit[1])


def _vector_hits(
    table: Any,
    query_vector: npt.NDArray[np.float32] | None,
    limit: int,
    where: str | None,
    columns: list[str],
    vector_column: str,
) -> list[tuple[dict[str, Any], float]]:
    vector = unit_query_vector(query_vector, _dimension(table, vector_column))
    builder = table.search(vector, vector_column_name=vector_column).distance_type("cosine").ef(max(ANN_EF, limit))
    # Re-ranked on the stored vectors: an HnswSq index returns its quantized distance (about twice the cosine
    # distance), which made the score not the cosine similarity and the lists of an indexed and an unindexed
    # shard incomparable (merged by it, the small exact shard won: recall@10 0.06, benchmarks/catalog_growth.py).
    builder = builder.refine_factor(1)
    if where is not None:
        builder = builder.where(where, prefilter=True)
    found = _run(builder.select([*columns, "_distance"]).limit(limit), where)
    distances = found.column("_distance").to_pylist()
    return [(row, 1.0 - float(distance)) for row, distance in zip(_rows(found, columns), distances, strict=True)]


def _fts_hits(
    table: Any, query: str, limit: int, where: str | None, columns: list[str], text_column: str
) -> list[tuple[dict[str, Any], float]]:
    from lancedb.query import FullTextOperator, MatchQuery

    if not query.strip():
        return []
    # Exact terms (no fuzziness), any of them (OR): BM25 ranks rows by how many, how rare.
    match = MatchQuery(
        query,
        text_column,
        boost=1.0,
        fuzziness=0,
        max_expansions=50,
        operator=FullTextOperator.OR,
        prefix_length=0,
        document_granularity=None,
    )
    builder = table.search(match, query_type="fts")
    if where is not None:
        builder = builder.where(where, prefilter=True)
    # _score (and _distance above) by name: Lance's implicit projection is deprecated, warning per query.
    found = _run(builder.select([*columns, "_score"]).limit(limit), where)
    scores = found.column("_score").to_pylist()
    return [(row, float(score)) for row, score in zip(_rows(found, columns), scores, strict=True)]


def unit_query_vector(query_vector: npt.NDArray[np.float32] | None, dimension: int) -> npt.NDArray[np.float32]:
    """``query_vector`` as a finite float32 vector of unit length and the table's ``dimension``.

    >>> unit_query_vector(np.array([3.0, 4.0]), 2).tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    if query_vector is None:
        raise SearchError("vector and hybrid search need a query vector; embed the query with the embedding tier")
    vector = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    if vector.shape[0] != dimension:
        raise SearchError(
            f"the query vector has {vector.shape[0]} dimensions, the table's vectors {dimension}; "
            "embed the query with the model that embedded the table"
        )
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        raise SearchError("the query vector is zero or not finite; it has no direction to search by")
    return vector / np.float32(norm)


def _dimension(table: Any, vector_column: str) -> int:
    field = table.schema.field(vector_column)
    if not pa.types.is_fixed_size_list(field.type):
        raise SearchError(f"column {vector_column!r} is {field.type}, not a fixed-size vector; it cannot be searched")
    return int(field.type.list_size)


def _run(builder: Any, where: str | None) -> pa.Table:
    """Execute a LanceDB query; a filter LanceDB refuses becomes a ``SearchError`` naming it."""
    try:
        result: pa.Table = builder.to_arrow()
    except ValueError as error:
        if where is None:
            raise
        raise SearchError(f"LanceDB refused the filter {where!r}: {str(error).splitlines()[0]}") from error
    return result


def _rows(found: pa.Table, columns: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = found.select(columns).to_pylist()
    return rows
