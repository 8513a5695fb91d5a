"""Fault corpus for JSON plans, content (issue 26): source schemas and options, output names,
score ranges. Each mutated plan is a typed SemrayError naming the field's JSON path and what is
wrong, or a documented correct result (``plan_documents.check_plan_case``). No Ray, no model.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from plan_documents import (
    SCAN,
    SCAN_PATH,
    Mutation,
    PlanCase,
    check_plan_case,
    drop,
    put,
    write_reviews,
)

from semray.api import read_csv
from semray.errors import ColumnNotFoundError, PlanError, PlanFormatError, SourceError
from semray.operators import Scan, plan_from_json
from semray.operators.base import walk
from semray.operators.semantic import MAX_SCORE_CHOICES
from semray.readers import load_plan
from semray.sources import open_source
from semray.sources.declared import check_declared_schema

pytestmark = pytest.mark.timeout(30)

SCHEMA_CASES = [
    # source schemas and options
    PlanCase(
        "schema-empty",
        "limit",
        put(f"{SCAN}.source_schema.columns", []),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source_schema\.columns", "lists no columns"),
    ),
    PlanCase(
        "type-varcharr",
        "limit",
        put(f"{SCAN}.source_schema.columns.0.type", "VARCHARR"),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source_schema\.columns\.0\.type", "'VARCHARR'", "did you mean 'VARCHAR'"),
    ),
    PlanCase(
        "type-foo-3",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.type", "FOO(3)"),
        PlanFormatError,
        (r"columns\.1\.type", r"unknown column type 'FOO\(3\)'"),
    ),
    PlanCase(
        "type-empty",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.type", ""),
        PlanFormatError,
        (r"columns\.1\.type", "empty column type"),
    ),
    PlanCase(
        "type-bad-decimal",
        "limit",
        put(f"{SCAN}.source_schema.columns.2.type", "DECIMAL(40,3)"),
        PlanFormatError,
        (r"columns\.2\.type", r"DECIMAL\(40,3\)", "38"),
    ),
    PlanCase(
        "type-injection",
        "limit",
        put(f"{SCAN}.source_schema.columns.2.type", "INTEGER); SELECT 1; --"),
        PlanFormatError,
        (r"columns\.2\.type", "unknown column type"),
    ),
    PlanCase(
        "type-number",
        "limit",
        put(f"{SCAN}.source_schema.columns.2.type", 5),
        PlanFormatError,
        (r"columns\.2\.type", "valid string"),
    ),
    PlanCase(
        "type-extension",
        "limit",
        put(f"{SCAN}.source_schema.columns.2.type", "INET"),
        PlanFormatError,
        (r"columns\.2\.type", "extension"),
    ),
    PlanCase(
        "type-struct-is-read", "limit", put(f"{SCAN}.source_schema.columns.3.type", 'STRUCT("a;b" VARCHAR)'), None
    ),
    PlanCase("type-alias-is-read", "limit", put(f"{SCAN}.source_schema.columns.3.type", "text"), None),
    PlanCase(
        "column-duplicate",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.name", "review_id"),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source_schema", "duplicate column name 'review_id'", "columns 0 and 1"),
    ),
    PlanCase(
        "column-name-empty",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.name", ""),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source_schema\.columns\.1\.name", "empty column name"),
    ),
    PlanCase(
        "column-name-null",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.name", None),
        PlanFormatError,
        (r"columns\.1\.name", "valid string"),
    ),
    PlanCase(
        "column-missing-type",
        "limit",
        drop(f"{SCAN}.source_schema.columns.1.type"),
        PlanFormatError,
        (r"columns\.1\.type", "Field required"),
    ),
    PlanCase(
        "column-extra-key",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.nullable", True),
        PlanFormatError,
        (r"columns\.1\.nullable", "Extra inputs"),
    ),
    PlanCase(
        "columns-not-a-list",
        "limit",
        put(f"{SCAN}.source_schema.columns", "abc"),
        PlanFormatError,
        (r"source_schema\.columns", "valid tuple"),
    ),
    PlanCase(
        "scan-unknown-column", "limit", put(f"{SCAN}.columns", ["nope"]), ColumnNotFoundError, (SCAN_PATH, "'nope'")
    ),
    PlanCase(
        "scan-rowid-column",
        "limit",
        put(f"{SCAN}.source_schema.columns.1.name", "_rowid"),
        PlanError,
        (SCAN_PATH, "'_rowid'"),
    ),
    PlanCase(
        "delimiter-two-chars",
        "limit",
        put(f"{SCAN}.source.options", {"delimiter": ";;"}),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source\.options\.delimiter", "one ASCII character", "';;'"),
    ),
    PlanCase(
        "delimiter-non-ascii",
        "limit",
        put(f"{SCAN}.source.options", {"delimiter": "é"}),
        PlanFormatError,
        (r"options\.delimiter", "'é'"),
    ),
    PlanCase(
        "delimiter-newline",
        "limit",
        put(f"{SCAN}.source.options", {"delimiter": "\n"}),
        PlanFormatError,
        (r"options\.delimiter", "line break"),
    ),
    PlanCase(
        "quote-two-chars",
        "limit",
        put(f"{SCAN}.source.options", {"quote_char": "''"}),
        PlanFormatError,
        (r"options\.quote_char",),
    ),
    PlanCase("delimiter-tab-is-read", "limit", put(f"{SCAN}.source.options", {"delimiter": "\t"}), None),
    PlanCase(
        "source-kind-unknown",
        "limit",
        put(f"{SCAN}.source.kind", "csvv"),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source\.kind", '"csvv"'),
    ),
    PlanCase(
        "source-path-number", "limit", put(f"{SCAN}.source.path", 5), PlanFormatError, (rf"{SCAN_PATH}\.source\.path",)
    ),
    # output names
    PlanCase(
        "map-output-empty",
        "map",
        put("plan.output", ""),
        PlanFormatError,
        (r"plan\.sem_map\.output", "empty output column name"),
    ),
    PlanCase(
        "classify-output-empty",
        "classify",
        put("plan.output", ""),
        PlanFormatError,
        (r"plan\.sem_classify\.output", "empty output"),
    ),
    PlanCase(
        "classify-label-empty",
        "classify",
        put("plan.labels", ["", "negative"]),
        PlanFormatError,
        (r"plan\.sem_classify\.labels\.0", "empty label"),
    ),
    PlanCase(
        "extract-field-empty",
        "extract",
        put("plan.fields.0.name", ""),
        PlanFormatError,
        (r"plan\.sem_extract\.fields\.0\.name", "empty output"),
    ),
    PlanCase(
        "extract-field-duplicate",
        "extract",
        put("plan.fields.1.name", "issue"),
        PlanFormatError,
        (r"plan\.sem_extract", "duplicate column name 'issue'"),
    ),
    PlanCase(
        "topk-output-empty",
        "topk",
        put("plan.output", ""),
        PlanFormatError,
        (r"plan\.sem_topk\.output", "empty output"),
    ),
    PlanCase(
        "search-output-empty",
        "search",
        put("plan.output", ""),
        PlanFormatError,
        (r"plan\.sem_search\.output", "empty output"),
    ),
    PlanCase(
        "agg-output-empty", "agg", put("plan.output", ""), PlanFormatError, (r"plan\.sem_agg\.output", "empty output")
    ),
    PlanCase(
        "map-output-clash",
        "map",
        put("plan.output", "review"),
        PlanError,
        (r"plan\.sem_map", "'review' already exists"),
    ),
    PlanCase(
        "project-name-empty",
        "project",
        put("plan.exprs.0.name", ""),
        PlanError,
        (r"plan\.project\.exprs\.0\.name", "at least 1 character"),
    ),
    PlanCase(
        "aggregate-name-empty",
        "aggregate",
        put("plan.aggs.0.name", ""),
        PlanError,
        (r"plan\.aggregate\.aggs\.0\.name", "at least 1 character"),
    ),
    PlanCase(
        "project-duplicate-names",
        "project",
        put("plan.exprs.1.name", "review"),
        PlanError,
        (r"plan\.project", "duplicate column name 'review'"),
    ),
    # score ranges: finite, lo < hi, at most MAX_SCORE_CHOICES whole numbers
    PlanCase(
        "score-1-to-1e7",
        "score",
        put("plan.hi", 10_000_000),
        PlanFormatError,
        (r"plan\.sem_map\.hi", "10,000,000 whole numbers", f"{MAX_SCORE_CHOICES:,}"),
    ),
    PlanCase(
        "score-1e308-wide",
        "score",
        lambda d: put("plan.lo", -1e308)(d) or put("plan.hi", 1e308)(d),
        PlanFormatError,
        (r"plan\.sem_map\.hi", f"{MAX_SCORE_CHOICES:,}"),
    ),
    PlanCase(
        "score-lo-equals-hi", "score", put("plan.lo", 5), PlanFormatError, (r"plan\.sem_map\.lo", "must be below hi=5")
    ),
    PlanCase("score-lo-above-hi", "score", put("plan.lo", 9), PlanFormatError, (r"plan\.sem_map\.lo", "lo=9")),
    PlanCase(
        "score-1001-choices",
        "score",
        lambda d: put("plan.lo", 0)(d) or put("plan.hi", 1000)(d),
        PlanFormatError,
        ("1,001 whole numbers",),
    ),
    PlanCase("score-1000-choices-ok", "score", put("plan.hi", 1000), None),
    PlanCase("score-free-number-ok", "score", lambda d: put("plan.lo", 0.5)(d) or put("plan.hi", 1e9)(d), None),
    PlanCase("score-hi-missing", "score", put("plan.hi", None), PlanError, ("give both lo and hi",)),
]


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=[case.id for case in SCHEMA_CASES])
def test_plan_schema_fault(case: PlanCase, documents: dict[str, dict[str, Any]]) -> None:
    check_plan_case(case, documents)


# -- a Scan's declared source_schema against what the source holds ------------------------------
# Columns 0-3 of the reviews CSV: review_id BIGINT, product VARCHAR, rating BIGINT, review VARCHAR.

DECLARED_CASES = [
    ("column-typo", put(f"{SCAN}.source_schema.columns.3.name", "reveiw"), ("'reveiw'", "did you mean 'review'")),
    ("column-unknown", put(f"{SCAN}.source_schema.columns.1.name", "zzz"), ("'zzz'", "its columns: review_id")),
    ("column-added", lambda d: _declare(d, "extra", "VARCHAR"), ("column 'extra'", "does not have")),
    ("type-text-as-int", put(f"{SCAN}.source_schema.columns.3.type", "BIGINT"), ("as BIGINT", "reads it as VARCHAR")),
    ("type-int-as-text", put(f"{SCAN}.source_schema.columns.0.type", "VARCHAR"), ("as VARCHAR", "as BIGINT")),
    ("type-narrower-int", put(f"{SCAN}.source_schema.columns.0.type", "INTEGER"), ("as INTEGER", "as BIGINT")),
    ("type-double", put(f"{SCAN}.source_schema.columns.2.type", "DOUBLE"), ("'rating' as DOUBLE", "as BIGINT")),
    ("name-case", put(f"{SCAN}.source_schema.columns.1.name", "Product"), ("'Product'", "did you mean 'product'")),
]
DECLARED_OK = [
    ("as-exported", lambda d: None),
    ("type-alias-int8", put(f"{SCAN}.source_schema.columns.0.type", "int8")),
    ("type-lowercase", put(f"{SCAN}.source_schema.columns.1.type", "varchar")),
    ("fewer-columns", lambda d: d["plan"]["input"]["input"]["source_schema"]["columns"].pop(1) and None),
    ("reordered", lambda d: d["plan"]["input"]["input"]["source_schema"]["columns"].reverse()),
]


def _declare(document: dict[str, Any], name: str, kind: str) -> None:
    document["plan"]["input"]["input"]["source_schema"]["columns"].append({"name": name, "type": kind})


def _check_declared(document: dict[str, Any]) -> None:
    plan = plan_from_json(json.dumps(document))
    for node in walk(plan):
        if isinstance(node, Scan):
            source = open_source(node.source.kind, node.source.path, node.source.options)
            declared = [(column.name, column.type) for column in node.source_schema.columns]
            check_declared_schema(source, declared, node.source.describe())


@pytest.mark.parametrize(("name", "mutate", "patterns"), DECLARED_CASES, ids=[case[0] for case in DECLARED_CASES])
def test_a_declared_column_the_source_lacks_or_types_otherwise_is_refused(
    name: str, mutate: Mutation, patterns: tuple[str, ...], documents: dict[str, dict[str, Any]]
) -> None:
    document = copy.deepcopy(documents["limit"])
    mutate(document)
    with pytest.raises(SourceError) as raised:
        _check_declared(document)
    message = str(raised.value)
    assert "reviews.csv" in message and "source_schema" in message
    for pattern in patterns:
        assert pattern in message, f"{pattern!r} not in {message!r}"


@pytest.mark.parametrize(("name", "mutate"), DECLARED_OK, ids=[case[0] for case in DECLARED_OK])
def test_a_declared_schema_the_source_agrees_with_loads(
    name: str, mutate: Mutation, documents: dict[str, dict[str, Any]]
) -> None:
    document = copy.deepcopy(documents["limit"])
    mutate(document)
    _check_declared(document)


def test_data_that_changed_since_the_plan_was_exported_is_refused(tmp_path: Path) -> None:
    path = write_reviews(tmp_path)
    document = json.loads(read_csv(path).filter("rating >= 2").to_json())
    path.write_text("review_id,product,rating,review\n1,lamp,four,great\n", encoding="utf-8")
    with pytest.raises(SourceError, match="declares column 'rating' as BIGINT, but the source reads it as VARCHAR"):
        _check_declared(document)


def test_load_plan_refuses_a_declared_column_the_source_lacks(
    tmp_path: Path, documents: dict[str, dict[str, Any]]
) -> None:
    document = copy.deepcopy(documents["limit"])
    _declare(document, "extra", "VARCHAR")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(SourceError, match="declares column 'extra'"):
        load_plan(plan)


def test_the_mcp_plan_tool_refuses_a_declared_column_the_source_lacks(
    tmp_path: Path, documents: dict[str, dict[str, Any]]
) -> None:
    from semray.mcp_server import run_plan_tool
    from semray.settings import Settings

    document = copy.deepcopy(documents["limit"])
    _declare(document, "extra", "VARCHAR")
    with pytest.raises(SourceError, match="declares column 'extra'"):  # before the run starts: no cluster here
        run_plan_tool(Settings(state_dir=tmp_path / "state"), json.dumps(document))


@pytest.mark.parametrize("build", ["select", "aggregate"])
def test_the_builder_names_an_empty_output_name(reviews_csv: Path, build: str) -> None:
    reviews = read_csv(reviews_csv)
    with pytest.raises(PlanError, match=r"invalid (exprs|aggs)\.0\.name: String should have at least 1 character"):
        if build == "select":
            reviews.select(**{"": "rating"})
        else:
            reviews.aggregate(by="product", **{"": "count(*)"})


@pytest.mark.parametrize("build", ["select", "aggregate", "sem_map"])
def test_output_names_that_differ_only_in_case_are_refused(reviews_csv: Path, build: str) -> None:
    # DuckDB folds identifier case: with columns 'rating' and 'Rating', the expression "Rating" reads 'rating'.
    reviews = read_csv(reviews_csv)
    with pytest.raises(PlanError, match=r"'rating' and 'Rating' .* differ only in case.*rename one"):
        if build == "select":
            reviews.select("rating", Rating="rating + 1")
        elif build == "aggregate":
            reviews.aggregate(by="product", rating="count(*)", Rating="avg(rating)")
        else:
            reviews.sem_map("How many stars does {review} give?", output="Rating")


def test_the_builder_refuses_a_limit_past_64_bits(reviews_csv: Path) -> None:
    with pytest.raises(PlanError, match="count 10000000000000000000 does not fit in 64 bits"):
        read_csv(reviews_csv).limit(10**19)
    with pytest.raises(PlanError, match="offset 9223372036854775808 does not fit in 64 bits"):
        read_csv(reviews_csv).limit(5, offset=2**63)
    largest = read_csv(reviews_csv).limit(2**63 - 1)
    assert plan_from_json(largest.to_json()) == largest.plan
