"""Catalog segment search: RRF on hand-computed ranks, filters, hostile inputs, indexes (no Ray, no model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from semray.catalog.retrieval import RRF_K, SearchMode, fuse_rankings
from semray.catalog.search import create_segment_indexes, search_segments
from semray.catalog.segment_filter import checked_where, segment_filter
from semray.catalog.shards import Shards
from semray.catalog.tables import segments_schema
from semray.errors import SearchError

DIMENSION = 8
TEXTS = [
    ("notes", "chunk", "red apple pie with cinnamon"),
    ("notes", "chunk", "green apple: (tart) AND sweet"),
    ("notes", "paragraph", "blue sky over the harbour"),
    ("it's", "chunk", "apple orchard in autumn"),
    ("it's", "section", "nothing about fruit here"),
    ("notes", "chunk", "café crème brûlée"),
    ("world", "chunk", "我喜欢吃苹果"),
    ("world", "chunk", "Привет мир яблоко"),
]


def _vectors(count: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, DIMENSION)).astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


def _segments(folder: Path, texts: list[tuple[str, str, str]], vectors: np.ndarray, name: str = "segments") -> Any:
    rows = [
        {
            "segment_id": f"s{i}",
            "dataset": dataset,
            "document_id": f"doc{i}.md",
            "parent_id": None,
            "level": level,
            "path": ["Top", f"part {i}"],
            "ordinal": i,
            "text": text,
            "start": 0,
            "end": len(text),
            "topic": None,
            "vector": vectors[i].tolist(),
        }
        for i, (dataset, level, text) in enumerate(texts)
    ]
    database = lancedb.connect(str(folder))
    return database.create_table(name, pa.Table.from_pylist(rows, schema=segments_schema(DIMENSION)))


@pytest.fixture()
def table(tmp_path: Path) -> Any:
    segments = _segments(tmp_path, TEXTS, _vectors(len(TEXTS)))
    create_segment_indexes(segments)
    return segments


# reciprocal rank fusion ---------------------------------------------------------------------------


def test_rrf_scores_and_ranks_are_the_hand_computed_ones() -> None:
    fused = fuse_rankings(["a", "b", "c"], ["b", "d"], k=10)
    assert [(f.key, f.vector_rank, f.fts_rank) for f in fused] == [
        ("b", 2, 1),
        ("a", 1, None),
        ("d", None, 2),
        ("c", 3, None),
    ]
    assert [f.score for f in fused] == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63])
    assert RRF_K == 60


def test_rrf_breaks_ties_by_best_single_rank_then_vector_order() -> None:
    # a and c both score 1/61 + 1/63 (best rank 1 each): a came first in the vector list.
    assert [f.key for f in fuse_rankings(["a", "b", "c"], ["c", "d", "a"], k=4)] == ["a", "c", "b", "d"]
    assert [f.key for f in fuse_rankings(["a", "b"], ["c"], k=1)] == ["a"]
    with pytest.raises(ValueError, match="k must be at least 1"):
        fuse_rankings(["a"], [], k=0)


def test_hybrid_is_the_fusion_of_the_vector_and_full_text_rankings(table: Any) -> None:
    query_vector = _vectors(len(TEXTS))[3] + 0.3 * _vectors(len(TEXTS))[0]
    by_vector = search_segments(table, "apple", query_vector, k=50, mode="vector")
    by_text = search_segments(table, "apple", None, k=50, mode="fts")
    assert {hit.segment_id for hit in by_text} == {"s0", "s1", "s3"}
    hybrid = search_segments(table, "apple", query_vector, k=5, mode="hybrid")
    expected = fuse_rankings([h.segment_id for h in by_vector], [h.segment_id for h in by_text], k=5)
    assert [(h.segment_id, h.vector_rank, h.fts_rank) for h in hybrid] == [
        (f.key, f.vector_rank, f.fts_rank) for f in expected
    ]
    assert [h.score for h in hybrid] == pytest.approx([f.score for f in expected])
    top = hybrid[0]
    assert top.vector_rank is not None and top.fts_rank is not None  # in both lists, so it wins


# modes, empty tables, k -------------------------------------------------------------------------


def test_vector_search_is_cosine_and_returns_the_segment_fields(table: Any) -> None:
    vectors = _vectors(len(TEXTS))
    hits = search_segments(table, "", vectors[2] * 5.0, k=3, mode="vector")  # not unit: normalised
    assert hits[0].segment_id == "s2" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].path == ("Top", "part 2") and hits[0].level == "paragraph" and hits[0].document_id == "doc2.md"
    assert [h.vector_rank for h in hits] == [1, 2, 3] and all(h.fts_rank is None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_k_beyond_the_rows_returns_every_row_once(table: Any) -> None:
    hits = search_segments(table, "apple", _vectors(len(TEXTS))[0], k=100, mode="hybrid")
    assert sorted(h.segment_id for h in hits) == sorted(f"s{i}" for i in range(len(TEXTS)))
    assert len(search_segments(table, "", _vectors(len(TEXTS))[0], k=100, mode="vector")) == len(TEXTS)


def test_an_empty_table_finds_nothing_in_every_mode(tmp_path: Path) -> None:
    database = lancedb.connect(str(tmp_path))
    empty = database.create_table("segments", schema=segments_schema(DIMENSION))
    create_segment_indexes(empty)
    modes: tuple[SearchMode, ...] = ("vector", "fts", "hybrid")
    for mode in modes:
        assert search_segments(empty, "apple", _vectors(1)[0], k=5, mode=mode) == []


def test_bad_vectors_and_tables_are_named_errors(table: Any, tmp_path: Path) -> None:
    with pytest.raises(SearchError, match="need a query vector"):
        search_segments(table, "apple", None, k=3, mode="hybrid")
    with pytest.raises(SearchError, match="has 3 dimensions, the table's vectors 8"):
        search_segments(table, "apple", np.ones(3, np.float32), k=3, mode="vector")
    with pytest.raises(SearchError, match="zero or not finite"):
        search_segments(table, "apple", np.zeros(DIMENSION, np.float32), k=3, mode="vector")
    with pytest.raises(SearchError, match="k must be at least 1"):
        search_segments(table, "apple", None, k=0, mode="fts")
    other = lancedb.connect(str(tmp_path / "other")).create_table("rows", pa.table({"text": ["a"]}))
    with pytest.raises(SearchError, match="not a segments table"):
        search_segments(other, "a", None, k=1, mode="fts")


# full text: syntax characters, languages ----------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        '"apple',
        "apple)",
        "text:apple",
        "(apple OR",
        "apple AND NOT pie",
        "apple*",
        "a'b\"c(d)e:f*g?~^[]{}\\ apple",
        "apple; DROP TABLE segments; --",
    ],
)
def test_full_text_syntax_characters_are_words_not_syntax(table: Any, query: str) -> None:
    hits = search_segments(table, query, None, k=10, mode="fts")
    # Every query holds the term "apple" and nothing else that matches: the same three rows,
    # "NOT pie" excludes nothing (no query syntax), "text:" names no field.
    assert {h.segment_id for h in hits} == {"s0", "s1", "s3"}


@pytest.mark.parametrize("query", ["", "   ", "AND OR NOT", "the of and", "()[]{}:*?\"'", "x" * 20_000])
def test_queries_without_a_searchable_term_find_nothing_by_full_text(table: Any, query: str) -> None:
    assert search_segments(table, query, None, k=5, mode="fts") == []
    hybrid = search_segments(table, query, _vectors(len(TEXTS))[4], k=3, mode="hybrid")
    assert hybrid[0].segment_id == "s4" and all(h.fts_rank is None for h in hybrid)  # ranked by vectors alone


def test_full_text_finds_non_english_and_accented_words(table: Any) -> None:
    def found(query: str) -> set[str]:
        return {h.segment_id for h in search_segments(table, query, None, k=5, mode="fts")}

    assert found("苹果") == {"s6"}  # Chinese has no spaces between words: ICU splits them
    assert found("яблоко") == {"s7"}
    assert found("cafe") == found("café") == {"s5"}
    assert found("APPLES orchards") == {"s0", "s1", "s3"}  # lower-cased, stemmed


# filters ----------------------------------------------------------------------------------------------


def test_dataset_and_level_filters_are_pushed_down_and_quoted(table: Any) -> None:
    vectors = _vectors(len(TEXTS))
    quoted = search_segments(table, "apple", vectors[0], k=10, mode="hybrid", datasets=["it's"])
    assert {h.segment_id for h in quoted} == {"s3", "s4"} and {h.dataset for h in quoted} == {"it's"}
    chunks = search_segments(table, "apple", None, k=10, mode="fts", datasets=["notes"], levels=["chunk"])
    assert {h.segment_id for h in chunks} == {"s0", "s1"}
    # A prefilter: the k nearest among the matching rows, not the k nearest filtered afterwards.
    nearest = search_segments(table, "", vectors[0], k=1, mode="vector", levels=["section"])
    assert [h.segment_id for h in nearest] == ["s4"]
    assert search_segments(table, "apple", vectors[0], k=5, datasets=[]) == []
    where = search_segments(table, "apple", None, k=10, mode="fts", where='ordinal >= 1 AND "end" < 30')
    assert {h.segment_id for h in where} == {"s1", "s3"}


def test_unknown_levels_and_malformed_lists_are_refused_with_advice(table: Any) -> None:
    with pytest.raises(SearchError, match="did you mean 'chunk'"):
        search_segments(table, "apple", None, k=3, mode="fts", levels=["chunks"])
    with pytest.raises(SearchError, match="not one string"):
        search_segments(table, "apple", None, k=3, mode="fts", datasets="notes")


def test_a_dataset_name_cannot_break_out_of_its_literal(table: Any) -> None:
    hostile = "x') OR ('1' = '1"
    assert segment_filter(datasets=[hostile]) == "(\"dataset\" IN ('x'') OR (''1'' = ''1'))"
    assert search_segments(table, "apple", None, k=10, mode="fts", datasets=[hostile, "a\\"]) == []


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("1=1) OR (1=1", "does not parse"),  # would widen "(dataset IN ...) AND 1=1) OR (1=1"
        ("(SELECT count(*) FROM read_text('/etc/hostname')) > 0", "subquery"),
        ("read_text('/etc/passwd') IS NOT NULL", "uses Anonymous"),
        ("level = 'chunk'; DROP TABLE segments", "not one SQL expression"),
        ("level = 'chunk' -- ignore the rest", "not one SQL expression"),
        ("vector IS NULL", "not a segment column"),
        ("segments.level = 'chunk'", "not a segment column"),
        ("levle = 'chunk'", "did you mean 'level'"),
        ("current_setting('threads') = '1'", "reads the session"),
        ("level IN (SELECT 'chunk')", "subquery"),
    ],
)
def test_hostile_where_texts_are_refused(table: Any, where: str, problem: str) -> None:
    with pytest.raises(SearchError, match=problem):
        search_segments(table, "apple", None, k=3, mode="fts", datasets=["notes"], where=where)


def test_a_checked_where_is_regenerated_not_passed_through(table: Any) -> None:
    assert checked_where("level = 'chunk' /* hidden */ AND topic IS NULL") == '"level" = \'chunk\' AND "topic" IS NULL'
    assert checked_where("lower(text) LIKE '%apple%' OR ordinal BETWEEN 3 AND 4") == (
        'LOWER("text") LIKE \'%apple%\' OR "ordinal" BETWEEN 3 AND 4'
    )
    hits = search_segments(table, "apple", None, k=10, mode="fts", where="text LIKE '%orchard%' OR 1 = 1")
    assert {h.segment_id for h in hits} == {"s0", "s1", "s3"}
    restricted = search_segments(table, "apple", None, k=10, mode="fts", datasets=["it's"], where="1 = 1 OR 2 = 2")
    assert {h.segment_id for h in restricted} == {"s3"}  # OR inside the user's part cannot widen the datasets


# indexes ----------------------------------------------------------------------------------------------


def test_indexes_cover_text_filters_and_vectors_past_the_threshold(tmp_path: Path) -> None:
    count = 300
    texts = [
        ("bulk", "chunk" if i % 2 else "paragraph", f"segment number {i} about topic {i % 7}") for i in range(count)
    ]
    vectors = _vectors(count, seed=3)
    segments = _segments(tmp_path, texts, vectors)
    create_segment_indexes(segments, ann_min_rows=10_000)
    kinds = {index.columns[0]: index.index_type for index in segments.list_indices()}
    assert kinds == {"text": "FTS", "dataset": "BTree", "document_id": "BTree", "level": "Bitmap"}
    create_segment_indexes(segments, ann_min_rows=count)
    kinds = {index.columns[0]: index.index_type for index in segments.list_indices()}
    assert kinds["vector"] == "IvfHnswSq"
    hits = search_segments(segments, "topic", vectors[17], k=5, mode="vector", levels=["chunk"])
    assert hits[0].segment_id == "s17" and hits[0].score == pytest.approx(1.0, abs=0.02)
    for hit in hits:  # through the index, still the cosine similarity (the quantized distance was about twice it)
        assert hit.score == pytest.approx(float(vectors[int(hit.segment_id[1:])] @ vectors[17]), abs=1e-3)
    assert all(h.level == "chunk" for h in hits)


def test_an_indexed_shard_and_an_exact_one_merge_by_the_same_cosine_score(tmp_path: Path) -> None:
    bulk_vectors, small_vectors = _vectors(300, seed=3), _vectors(20, seed=4)
    bulk = _segments(tmp_path / "bulk", [("bulk", "chunk", f"bulk {i}") for i in range(300)], bulk_vectors)
    small = _segments(tmp_path / "small", [("small", "chunk", f"small {i}") for i in range(20)], small_vectors)
    create_segment_indexes(bulk, ann_min_rows=300)  # an HnswSq index
    create_segment_indexes(small)  # exact search
    query = _vectors(1, seed=5)[0]
    similarity = {("bulk", f"s{i}"): float(v @ query) for i, v in enumerate(bulk_vectors)}
    similarity |= {("small", f"s{i}"): float(v @ query) for i, v in enumerate(small_vectors)}
    best = sorted(similarity, key=lambda key: -similarity[key])[:5]
    hits = search_segments(Shards("segments", (bulk, small)), "q", query, k=5, mode="vector")
    assert [(hit.dataset, hit.segment_id) for hit in hits] == best
    assert [hit.score for hit in hits] == pytest.approx([similarity[key] for key in best], abs=1e-3)
