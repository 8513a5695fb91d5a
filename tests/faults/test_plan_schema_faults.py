"""Fault corpus for JSON plans, content (issue 26): source schemas and options, output names,
score ranges. Each mutated plan is a typed SemrayError naming the field's JSON path and what is
wrong, or a documented correct result (``plan_documents.check_plan_case``). No Ray, no model.
"""

from __future__ import annotations

from typing import Any

import pytest
from plan_documents import (
    SCAN,
    SCAN_PATH,
    PlanCase,
    check_plan_case,
    drop,
    put,
)

from semray.errors import ColumnNotFoundError, PlanError, PlanFormatError
from semray.operators.semantic import MAX_SCORE_CHOICES

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
