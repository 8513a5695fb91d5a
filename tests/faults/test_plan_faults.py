"""Fault corpus for JSON plans and SQL (issue 26): every bad input is a typed SemrayError naming
its cause, or a documented correct result; none is a raw traceback (RecursionError, ValueError).

JSON plans are made with the Python API over a small CSV in ``tmp_path`` and then mutated (a
field changed, removed, nested a thousand times, re-encoded); each case asserts the error class
and that the message names the JSON path, the value and, for limits, the limit. SQL cases are
query strings compiled against scans of the same CSV. A few cases go through ``semray`` itself
(``explain``/``run``/``sql``), which must exit 2 with the message. No Ray, no model.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from semray.api import read_csv
from semray.cli import main
from semray.errors import ColumnNotFoundError, PlanError, PlanFormatError, SemrayError, SourceError
from semray.operators import Node, Scan, Schema, SourceSpec, plan_from_json
from semray.operators.semantic import MAX_SCORE_CHOICES
from semray.operators.serialize import MAX_JSON_DEPTH, MAX_PLAN_DEPTH, MAX_VALUE_DEPTH, plan_from_file
from semray.sql import SqlLimitError, SqlSyntaxError, UnsupportedSqlError, compile_sql
from semray.sql.limits import MAX_EXPRESSION_DEPTH, MAX_PAREN_DEPTH, MAX_QUERY_CHARS

pytestmark = pytest.mark.timeout(30)

CSV = "review_id,product,rating,review\n1,lamp,4,great lamp\n2,desk,1,late delivery\n3,lamp,5,bright\n"
SCAN_UNDER_LIMIT = "plan.input.input"
"""Raw path of the Scan in the ``limit`` document (limit -> filter -> scan)."""
SCAN_PATH = r"plan\.limit\.input\.filter\.input\.scan"
"""How errors name that Scan: every operator's ``op`` is part of the path."""


@pytest.fixture(scope="module")
def reviews_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "reviews.csv"
    path.write_text(CSV, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def documents(reviews_csv: Path) -> dict[str, dict[str, Any]]:
    """A valid plan document per operator family, written by the Python API."""
    reviews = read_csv(reviews_csv)
    queries = {
        "limit": reviews.filter("rating >= 2").limit(5, offset=1),
        "topk": reviews.sem_topk("{review} is funny", k=2),
        "search": reviews.sem_search("review", "late delivery", k=3),
        "score": reviews.sem_score("How positive is {review}?", "stars", lo=1, hi=5),
        "map": reviews.sem_map("Summarize {review}", "gist"),
        "classify": reviews.sem_classify("Mood of {review}", "positive|negative", output="mood"),
        "extract": reviews.sem_extract("From {review} take the issue", "issue: text, severity: int"),
        "agg": reviews.sem_agg("Summarize {review}", by="product"),
        "project": reviews.select("review", doubled="rating * 2"),
        "aggregate": reviews.aggregate(by="product", n="count(*)"),
        "sort": reviews.sort("rating", descending=True),
        "union": reviews.union(reviews),
        "semfilter": reviews.sem_filter("{review} is positive", quality=0.9),
    }
    return {name: json.loads(query.to_json()) for name, query in queries.items()}


@pytest.fixture(scope="module")
def tables(reviews_csv: Path) -> dict[str, Node]:
    schema = Schema.of(("review_id", "BIGINT"), ("product", "VARCHAR"), ("rating", "BIGINT"), ("review", "VARCHAR"))
    return {"reviews": Scan(source=SourceSpec(kind="csv", path=str(reviews_csv)), source_schema=schema)}


# -- helpers that mutate a document -------------------------------------------------------

Mutation = Callable[[dict[str, Any]], Any]
"""Takes a deep copy of a document; returns the document to load (dict, text or bytes), or None
to load the (mutated in place) copy."""


def _walk(document: Any, path: str) -> tuple[Any, str | int]:
    parts: list[str | int] = [int(part) if part.isdigit() else part for part in path.split(".")]
    target = document
    for part in parts[:-1]:
        target = target[part]
    return target, parts[-1]


def put(path: str, value: Any) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target, key = _walk(document, path)
        target[key] = value

    return mutate


def drop(path: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target, key = _walk(document, path)
        del target[key]

    return mutate


def text_with(placeholder: str, literal: str, path: str) -> Mutation:
    """Put a placeholder at ``path``, dump the document, and splice raw JSON text in its place
    (for values ``json.dumps`` cannot write: 5,000 digits, NaN, bad escapes)."""

    def mutate(document: dict[str, Any]) -> str:
        put(path, placeholder)(document)
        return json.dumps(document).replace(json.dumps(placeholder), literal)

    return mutate


def replace(value: Any) -> Mutation:
    return lambda document: value


def nested_limits(depth: int) -> Mutation:
    """``depth`` Limits over the document's root, written as text (``json.dumps`` itself recurses)."""

    def mutate(document: dict[str, Any]) -> str:
        inner = json.dumps(document["plan"])
        return '{"version": 1, "plan": ' + '{"op": "limit", "count": 1, "input": ' * depth + inner + "}" * depth + "}"

    return mutate


def nested_unions(depth: int) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        scan = json.dumps(document["plan"]["input"]["input"])
        text = scan
        for _ in range(depth):
            text = '{"op": "union", "inputs": [' + text + ", " + scan + "]}"
        return '{"version": 1, "plan": ' + text + "}"

    return mutate


def encoded(encoding: str, extra: str = "") -> Mutation:
    """The document as text in ``encoding``; ``extra`` is spliced into the predicate unescaped."""

    def mutate(document: dict[str, Any]) -> bytes:
        document["plan"]["input"]["predicate"] = f"review <> '{extra or 'x'}'"
        return json.dumps(document, ensure_ascii=False).encode(encoding)

    return mutate


def nested_value(depth: int) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        value = "[" * depth + "1" + "]" * depth
        return json.dumps(document).replace('"options": {}', '"options": {"deep": ' + value + "}", 1)

    return mutate


@dataclass(frozen=True)
class PlanCase:
    id: str
    base: str
    mutate: Mutation
    error: type[SemrayError] | None
    """None: the plan loads (a documented correct result)."""
    patterns: tuple[str, ...] = ()


SCAN = SCAN_UNDER_LIMIT
DIGITS = "9" * 5000

PLAN_CASES = [
    # depth: refused past the stated limits, with the depth and the limit
    PlanCase(
        "1000-nested-limits",
        "limit",
        nested_limits(1000),
        PlanFormatError,
        (r"1\d{3} levels deep", str(MAX_JSON_DEPTH)),
    ),
    PlanCase(
        "100k-nested-limits", "limit", nested_limits(100_000), PlanFormatError, ("levels deep", str(MAX_JSON_DEPTH))
    ),
    PlanCase(
        "plan-depth-just-past",
        "limit",
        nested_limits(MAX_PLAN_DEPTH - 2),
        PlanFormatError,
        (rf"nests {MAX_PLAN_DEPTH + 1} operators deep", f"the {MAX_PLAN_DEPTH}", r"plan\.limit\.input"),
    ),
    PlanCase("plan-depth-at-limit", "limit", nested_limits(MAX_PLAN_DEPTH - 3), None),  # limit, filter, scan below
    PlanCase(
        "union-tree-too-deep",
        "limit",
        nested_unions(70),
        PlanFormatError,
        (r"nests 71 operators deep", str(MAX_PLAN_DEPTH), r"plan\.union\.inputs"),
    ),
    PlanCase(
        "deep-arrays-in-predicate",
        "limit",
        text_with("@@", "[" * 100_000 + "]" * 100_000, "plan.input.predicate"),
        PlanFormatError,
        ("10000[0-9] levels deep",),
    ),
    PlanCase(
        "deep-objects-document",
        "limit",
        replace('{"a":' * 50_000 + "1" + "}" * 50_000),
        PlanFormatError,
        ("50000 levels deep",),
    ),
    PlanCase(
        "deep-value-in-options",
        "limit",
        nested_value(40),
        PlanFormatError,
        (f"more than {MAX_VALUE_DEPTH} levels", r"scan\.source\.options"),
    ),
    # encodings: UTF-8 only (a UTF-8 byte-order mark is skipped)
    PlanCase("utf16-bom", "limit", encoded("utf-16"), PlanFormatError, ("UTF-16", "byte-order mark", "must be UTF-8")),
    PlanCase("utf16-le-no-bom", "limit", encoded("utf-16-le"), PlanFormatError, ("UTF-16 or UTF-32", "must be UTF-8")),
    PlanCase("utf32-bom", "limit", encoded("utf-32"), PlanFormatError, ("UTF-32", "must be UTF-8")),
    PlanCase("latin1", "limit", encoded("latin-1", "café"), PlanFormatError, ("not UTF-8", "0xe9", "line 1")),
    PlanCase("cp1252-quotes", "limit", encoded("cp1252", "“late”"), PlanFormatError, ("not UTF-8", "0x93")),
    PlanCase("utf8-bom-is-read", "limit", encoded("utf-8-sig", "café"), None),
    PlanCase("utf8-non-ascii-is-read", "limit", encoded("utf-8", "café ☕"), None),
    PlanCase(
        "lone-surrogate",
        "limit",
        text_with("@@", '"\\ud800x"', "plan.input.predicate"),
        PlanFormatError,
        (r"plan\.limit\.input\.filter\.predicate", "surrogate"),
    ),
    # numbers: finite, 64-bit, named by field
    PlanCase(
        "count-5000-digits",
        "limit",
        text_with("@@", DIGITS, "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "5000 digits", "64 bits"),
    ),
    PlanCase(
        "count-minus-5000-digits",
        "limit",
        text_with("@@", "-" + DIGITS, "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "5000 digits"),
    ),
    PlanCase(
        "count-2-pow-63",
        "limit",
        put("plan.count", 2**63),
        PlanFormatError,
        (r"plan\.limit\.count", "9223372036854775808", "64 bits"),
    ),
    PlanCase(
        "count-1e400",
        "limit",
        text_with("@@", "1e400", "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "1e400", "too large"),
    ),
    PlanCase(
        "count-nan",
        "limit",
        text_with("@@", "NaN", "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "NaN is not a JSON number"),
    ),
    PlanCase(
        "count-infinity",
        "limit",
        text_with("@@", "Infinity", "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "Infinity"),
    ),
    PlanCase(
        "offset-minus-infinity",
        "limit",
        text_with("@@", "-Infinity", "plan.offset"),
        PlanFormatError,
        (r"plan\.limit\.offset", "-Infinity"),
    ),
    PlanCase(
        "score-hi-1e400", "score", text_with("@@", "1e400", "plan.hi"), PlanFormatError, (r"plan\.sem_map\.hi", "1e400")
    ),
    PlanCase(
        "score-lo-nan", "score", text_with("@@", "NaN", "plan.lo"), PlanFormatError, (r"plan\.sem_map\.lo", "NaN")
    ),
    PlanCase(
        "version-5000-digits", "limit", text_with("@@", DIGITS, "version"), PlanFormatError, ("version", "5000 digits")
    ),
    PlanCase(
        "option-5000-digits",
        "limit",
        text_with("@@", DIGITS, f"{SCAN}.source.options"),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source\.options", "5000 digits"),
    ),
    PlanCase(
        "long-float-text",
        "limit",
        text_with("@@", "1." + "0" * 5000, "plan.count"),
        PlanFormatError,
        (r"plan\.limit\.count", "valid integer"),
    ),
    # strict types: no bool/float/string for an integer, no bool/string for a number
    PlanCase(
        "count-true",
        "limit",
        put("plan.count", True),
        PlanFormatError,
        (r"plan\.limit\.count", "valid integer", "got true"),
    ),
    PlanCase("count-false", "limit", put("plan.count", False), PlanFormatError, (r"plan\.limit\.count", "got false")),
    PlanCase("count-2.5", "limit", put("plan.count", 2.5), PlanFormatError, (r"plan\.limit\.count", "2.5")),
    PlanCase("count-2.0", "limit", put("plan.count", 2.0), PlanFormatError, (r"plan\.limit\.count", "2.0")),
    PlanCase("count-string", "limit", put("plan.count", "3"), PlanFormatError, (r"plan\.limit\.count", '"3"')),
    PlanCase("count-null", "limit", put("plan.count", None), PlanFormatError, (r"plan\.limit\.count", "null")),
    PlanCase("count-list", "limit", put("plan.count", [3]), PlanFormatError, (r"plan\.limit\.count", "valid integer")),
    PlanCase("offset-true", "limit", put("plan.offset", True), PlanFormatError, (r"plan\.limit\.offset", "got true")),
    PlanCase(
        "count-negative",
        "limit",
        put("plan.count", -1),
        PlanFormatError,
        (r"plan\.limit\.count", "greater than or equal to 0", "-1"),
    ),
    PlanCase("offset-negative", "limit", put("plan.offset", -3), PlanFormatError, (r"plan\.limit\.offset", "-3")),
    PlanCase("topk-k-true", "topk", put("plan.k", True), PlanFormatError, (r"plan\.sem_topk\.k", "got true")),
    PlanCase(
        "topk-k-zero", "topk", put("plan.k", 0), PlanFormatError, (r"plan\.sem_topk\.k", "greater than or equal to 1")
    ),
    PlanCase("topk-k-string", "topk", put("plan.k", "2"), PlanFormatError, (r"plan\.sem_topk\.k", '"2"')),
    PlanCase("topk-k-1.5", "topk", put("plan.k", 1.5), PlanFormatError, (r"plan\.sem_topk\.k", "1.5")),
    PlanCase("search-k-true", "search", put("plan.k", True), PlanFormatError, (r"plan\.sem_search\.k", "got true")),
    PlanCase(
        "quality-labels-true",
        "semfilter",
        put("plan.quality.labels", True),
        PlanFormatError,
        (r"plan\.sem_filter\.quality\.labels", "got true"),
    ),
    PlanCase(
        "quality-level-string",
        "semfilter",
        put("plan.quality.level", "0.9"),
        PlanFormatError,
        (r"plan\.sem_filter\.quality\.level", '"0.9"'),
    ),
    PlanCase(
        "quality-level-true",
        "semfilter",
        put("plan.quality.level", True),
        PlanFormatError,
        (r"plan\.sem_filter\.quality\.level",),
    ),
    PlanCase("score-lo-true", "score", put("plan.lo", True), PlanFormatError, (r"plan\.sem_map\.lo", "got true")),
    PlanCase("score-lo-string", "score", put("plan.lo", "1"), PlanFormatError, (r"plan\.sem_map\.lo", '"1"')),
    PlanCase(
        "diagnostics-1",
        "map",
        put("plan.diagnostics", 1),
        PlanFormatError,
        (r"plan\.sem_map\.diagnostics", "valid boolean"),
    ),
    PlanCase(
        "sort-descending-string",
        "sort",
        put("plan.keys.0.descending", "yes"),
        PlanFormatError,
        (r"plan\.sort\.keys\.0\.descending", '"yes"'),
    ),
    PlanCase(
        "sort-nulls-first-1",
        "sort",
        put("plan.keys.0.nulls_first", 1),
        PlanFormatError,
        (r"plan\.sort\.keys\.0\.nulls_first",),
    ),
    PlanCase(
        "option-value-list",
        "limit",
        put(f"{SCAN}.source.options", {"header": [True]}),
        PlanFormatError,
        (rf"{SCAN_PATH}\.source\.options\.header",),
    ),
    PlanCase("score-int-bounds-are-floats", "score", put("plan.lo", 2), None),
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
    # wrong top-level JSON and wrong operators
    PlanCase("top-list", "limit", replace("[1, 2]"), PlanFormatError, ("a plan file is an object", "got a list")),
    PlanCase("top-string", "limit", replace('"plan"'), PlanFormatError, ("got a string",)),
    PlanCase("top-null", "limit", replace("null"), PlanFormatError, ("got null",)),
    PlanCase("top-number", "limit", replace("3"), PlanFormatError, ("got a number",)),
    PlanCase("no-version", "limit", drop("version"), PlanFormatError, ('no "version"', '"version": 1')),
    PlanCase(
        "version-2", "limit", put("version", 2), PlanFormatError, ("version 2 is not supported", "reads version 1")
    ),
    PlanCase("version-string", "limit", put("version", "1"), PlanFormatError, ('version "1" is not supported',)),
    PlanCase("version-true", "limit", put("version", True), PlanFormatError, ("version true is not supported",)),
    PlanCase("version-float", "limit", put("version", 1.0), PlanFormatError, ("version 1.0 is not supported",)),
    PlanCase("no-plan", "limit", drop("plan"), PlanFormatError, ('no "plan"',)),
    PlanCase("top-extra-field", "limit", put("comment", "hi"), PlanFormatError, ("at comment", "unknown field")),
    PlanCase("plan-null", "limit", put("plan", None), PlanFormatError, ("at plan:", "got null")),
    PlanCase("plan-list", "limit", put("plan", []), PlanFormatError, ("at plan:", "got a list")),
    PlanCase("plan-string", "limit", put("plan", "scan"), PlanFormatError, ("at plan:", "got a string")),
    PlanCase("op-unknown", "limit", put("plan.op", "frob"), PlanFormatError, (r"at plan\.op", '"frob"', "sem_filter")),
    PlanCase("op-typo", "limit", put("plan.op", "limt"), PlanFormatError, (r"at plan\.op", "did you mean 'limit'")),
    PlanCase("op-missing", "limit", drop("plan.op"), PlanFormatError, ("at plan:", 'no "op"')),
    PlanCase("op-number", "limit", put("plan.op", 5), PlanFormatError, (r"at plan\.op", "unknown operator 5")),
    PlanCase(
        "nested-op-unknown",
        "limit",
        put("plan.input.op", "filtr"),
        PlanFormatError,
        (r"plan\.limit\.input\.op", "did you mean 'filter'"),
    ),
    PlanCase(
        "node-extra-field", "limit", put("plan.extra", 1), PlanFormatError, (r"plan\.limit\.extra", "Extra inputs")
    ),
    PlanCase("input-missing", "limit", drop("plan.input"), PlanFormatError, (r"plan\.limit\.input", "Field required")),
    PlanCase("input-null", "limit", put("plan.input", None), PlanFormatError, (r"plan\.limit\.input:", "got null")),
    PlanCase(
        "union-inputs-object", "union", put("plan.inputs", {"op": "scan"}), PlanFormatError, (r"plan\.union\.inputs",)
    ),
    PlanCase(
        "union-input-null",
        "union",
        put("plan.inputs.1", None),
        PlanFormatError,
        (r"plan\.union\.inputs\.1", "got null"),
    ),
    PlanCase(
        "union-one-input",
        "union",
        lambda d: d["plan"]["inputs"].pop() and None,
        PlanError,
        (r"plan\.union", "at least two inputs"),
    ),
    PlanCase("not-json", "limit", replace("{"), PlanFormatError, ("not valid JSON", "line 1")),
    PlanCase("empty-text", "limit", replace(""), PlanFormatError, ("not valid JSON",)),
    PlanCase(
        "trailing-garbage", "limit", lambda d: json.dumps(d) + " x", PlanFormatError, ("not valid JSON", "Extra data")
    ),
    PlanCase(
        "predicate-number",
        "limit",
        put("plan.input.predicate", 5),
        PlanFormatError,
        (r"plan\.limit\.input\.filter\.predicate", "valid string"),
    ),
    PlanCase(
        "predicate-unknown-column",
        "limit",
        put("plan.input.predicate", "ratin > 1"),
        ColumnNotFoundError,
        (r"plan\.limit\.input\.filter", "did you mean 'rating'"),
    ),
    PlanCase("tier-unknown", "map", put("plan.tier", "huge"), PlanFormatError, (r"plan\.sem_map\.tier", '"huge"')),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=[case.id for case in PLAN_CASES])
def test_plan_fault(case: PlanCase, documents: dict[str, dict[str, Any]]) -> None:
    document = copy.deepcopy(documents[case.base])
    produced = case.mutate(document)
    text = document if produced is None else produced
    if isinstance(text, dict):
        text = json.dumps(text)
    if case.error is None:
        assert isinstance(plan_from_json(text), Node)
        return
    with pytest.raises(case.error) as raised:
        plan_from_json(text)
    message = str(raised.value)
    for pattern in case.patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def test_the_plan_corpus_is_large() -> None:
    assert len(PLAN_CASES) >= 100


def test_plan_files_name_the_file(tmp_path: Path, documents: dict[str, dict[str, Any]]) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(json.dumps(documents["limit"]).encode("utf-16"))
    with pytest.raises(PlanFormatError, match=r"plan file '.*plan\.json' is UTF-16"):
        plan_from_file(path)
    with pytest.raises(SourceError, match="not found"):
        plan_from_file(tmp_path / "missing.json")
    with pytest.raises(SourceError, match="cannot read plan file"):
        plan_from_file(tmp_path)


def test_python_builder_checks_score_ranges(reviews_csv: Path) -> None:
    reviews = read_csv(reviews_csv)
    with pytest.raises(PlanError, match=r"10,000,000 whole numbers.*1,000"):
        reviews.sem_score("How positive is {review}?", "stars", lo=1, hi=10_000_000)
    with pytest.raises(PlanError, match="not a finite number"):
        reviews.sem_map("{review}", "s", output_type="float", lo=0, hi=float("inf"))
    with pytest.raises(PlanError, match="k"):
        reviews.sem_topk("{review} is funny", k=True)
    with pytest.raises(PlanError, match="empty output column name"):
        reviews.sem_map("{review}", "")
    with pytest.raises(PlanError, match="invalid lo"):
        reviews.sem_map("{review}", "s", output_type="int", lo=True, hi=5)  # a bool is not a bound


# -- SQL -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlCase:
    id: str
    query: str
    error: type[SemrayError] | tuple[type[SemrayError], ...] | None
    patterns: tuple[str, ...] = ()


def parens(depth: int) -> str:
    return "SELECT * FROM reviews WHERE " + "(" * depth + "rating > 1" + ")" * depth


def ors(count: int) -> str:
    return "SELECT * FROM reviews WHERE " + " OR ".join(["rating = 1"] * count)


def subqueries(depth: int) -> str:
    return "SELECT * FROM " + "(SELECT * FROM " * depth + "reviews" + ")" * depth


def score(lo: str, hi: str) -> str:
    return f"SELECT SEM_SCORE('How positive is {{review}}?', {lo}, {hi}) AS stars FROM reviews"


NESTED = rf"more than {MAX_PAREN_DEPTH} levels deep"
DEEP = rf"more than {MAX_EXPRESSION_DEPTH} levels deep"
STATEMENT = (UnsupportedSqlError, SqlSyntaxError)

SQL_CASES = [
    # nesting and length: refused with the limit, never a RecursionError
    SqlCase("parens-3000", parens(3000), SqlLimitError, (NESTED, "line 1, column")),
    SqlCase("parens-500", parens(500), SqlLimitError, (NESTED,)),
    SqlCase("parens-just-past", parens(MAX_PAREN_DEPTH + 1), SqlLimitError, (NESTED,)),
    SqlCase("parens-at-limit", parens(MAX_PAREN_DEPTH), None),
    SqlCase(
        "functions-3000",
        "SELECT " + "abs(" * 3000 + "rating" + ")" * 3000 + " AS x FROM reviews",
        SqlLimitError,
        (NESTED,),
    ),
    SqlCase("subqueries-200", subqueries(200), SqlLimitError, (NESTED, "WITH")),
    SqlCase("subqueries-at-limit", subqueries(MAX_PAREN_DEPTH - 1), None),
    SqlCase("not-3000", "SELECT * FROM reviews WHERE " + "NOT " * 3000 + "rating > 1", SqlLimitError, (NESTED, "NOT")),
    SqlCase("minus-3000", "SELECT " + "- " * 3000 + "rating AS x FROM reviews", SqlLimitError, (NESTED,)),
    SqlCase(
        "case-400",
        "SELECT " + "CASE WHEN rating > 1 THEN " * 400 + "1" + " END" * 400 + " AS x FROM reviews",
        SqlLimitError,
        (NESTED, "CASE"),
    ),
    SqlCase("or-120k", ors(120_000), SqlLimitError, ("characters long", f"{MAX_QUERY_CHARS:,}")),
    SqlCase("or-2000", ors(2000), SqlLimitError, (DEEP, "IN")),
    SqlCase("or-at-limit", ors(MAX_EXPRESSION_DEPTH - 20), None),
    SqlCase("and-3000", "SELECT * FROM reviews WHERE " + " AND ".join(["rating > 1"] * 3000), SqlLimitError, (DEEP,)),
    SqlCase("plus-5000", "SELECT " + "+".join(["rating"] * 5000) + " AS x FROM reviews", SqlLimitError, (DEEP,)),
    SqlCase("concat-3000", "SELECT " + " || ".join(["review"] * 3000) + " AS x FROM reviews", SqlLimitError, (DEEP,)),
    SqlCase("union-400", " UNION ALL ".join(["SELECT * FROM reviews"] * 400), SqlLimitError, (DEEP, "UNION")),
    SqlCase("in-list-20000", "SELECT * FROM reviews WHERE rating IN (" + ",".join(map(str, range(20_000))) + ")", None),
    SqlCase(
        "text-too-long", "SELECT '" + "x" * MAX_QUERY_CHARS + "' AS x FROM reviews", SqlLimitError, ("characters long",)
    ),
    # SEM_SCORE ranges (checked at the operator, so SQL, JSON and Python agree)
    SqlCase("score-1e308", score("-1e308", "1e308"), PlanError, (f"{MAX_SCORE_CHOICES:,}", "line 1, column 8")),
    SqlCase(
        "score-1-to-1e7", score("1", "10000000"), PlanError, ("10,000,000 whole numbers", f"{MAX_SCORE_CHOICES:,}")
    ),
    SqlCase("score-inf", score("1", "1e400"), PlanError, ("not a finite number",)),
    SqlCase("score-5000-digits", score("1", "9" * 5000), PlanError, ("not a finite number",)),
    SqlCase("score-nan", score("0", "NaN"), UnsupportedSqlError, ("non-numeric bound",)),
    SqlCase("score-equal", score("5", "5"), PlanError, ("must be below",)),
    SqlCase("score-reversed", score("-5", "-10"), PlanError, ("lo=-5 must be below hi=-10",)),
    SqlCase("score-string-bound", score("'1'", "5"), UnsupportedSqlError, ("non-numeric bound",)),
    SqlCase("score-1001-choices", score("0", "1000"), PlanError, ("1,001 whole numbers",)),
    SqlCase("score-1000-choices-ok", score("1", "1000"), None),
    SqlCase("score-free-number-ok", score("0.5", "1000000.5"), None),
    # numeric literals that Python's int() would refuse or that do not fit in 64 bits
    SqlCase(
        "limit-5000-digits", "SELECT * FROM reviews LIMIT " + "9" * 5000, UnsupportedSqlError, ("LIMIT 9999", "64 bits")
    ),
    SqlCase("limit-2-pow-64", "SELECT * FROM reviews LIMIT 18446744073709551616", UnsupportedSqlError, ("64 bits",)),
    SqlCase("limit-negative", "SELECT * FROM reviews LIMIT -1", UnsupportedSqlError, ("LIMIT -1",)),
    SqlCase("limit-fraction", "SELECT * FROM reviews LIMIT 2.5", UnsupportedSqlError, ("LIMIT 2.5",)),
    SqlCase("limit-string", "SELECT * FROM reviews LIMIT '3'", UnsupportedSqlError, ("LIMIT '3'",)),
    SqlCase(
        "offset-5000-digits",
        "SELECT * FROM reviews LIMIT 1 OFFSET " + "9" * 5000,
        UnsupportedSqlError,
        ("OFFSET 9999",),
    ),
    SqlCase("limit-int64-max-ok", "SELECT * FROM reviews LIMIT 9223372036854775807 OFFSET 5", None),
    SqlCase(
        "order-by-fraction",
        "SELECT rating FROM reviews ORDER BY 2.5",
        UnsupportedSqlError,
        ("ORDER BY 2.5", "position between 1 and 1"),
    ),
    SqlCase(
        "order-by-5000-digits",
        "SELECT rating FROM reviews ORDER BY " + "9" * 5000,
        UnsupportedSqlError,
        (r"ORDER BY 9{24}\.\.\.",),
    ),
    SqlCase("order-by-zero", "SELECT rating FROM reviews ORDER BY 0", UnsupportedSqlError, ("ORDER BY 0",)),
    SqlCase(
        "group-by-fraction",
        "SELECT rating, count(*) AS n FROM reviews GROUP BY 2.5",
        UnsupportedSqlError,
        ("GROUP BY 2.5",),
    ),
    SqlCase(
        "group-by-5000-digits",
        "SELECT rating, count(*) AS n FROM reviews GROUP BY " + "9" * 5000,
        UnsupportedSqlError,
        ("GROUP BY 9999",),
    ),
    SqlCase(
        "union-order-by-fraction",
        "SELECT rating FROM reviews UNION ALL SELECT rating FROM reviews ORDER BY 1.5",
        UnsupportedSqlError,
        ("ORDER BY",),
    ),
    # one query only: no statement that touches files, extensions, settings or the catalog
    SqlCase("empty", "", SqlSyntaxError, ("empty query",)),
    SqlCase("blank", "  \n\t ", SqlSyntaxError, ("empty query",)),
    SqlCase("semicolons", ";;", SqlSyntaxError, ("empty query",)),
    SqlCase("comment-only", "-- nothing here", SqlSyntaxError, ("empty query",)),
    SqlCase(
        "two-selects", "SELECT * FROM reviews; SELECT * FROM reviews", UnsupportedSqlError, ("several statements",)
    ),
    SqlCase(
        "select-then-drop", "SELECT * FROM reviews; DROP TABLE reviews", UnsupportedSqlError, ("several statements",)
    ),
    SqlCase(
        "select-then-attach",
        "SELECT * FROM reviews; ATTACH '/tmp/x.db' AS x",
        UnsupportedSqlError,
        ("several statements",),
    ),
    SqlCase("copy-to", "COPY reviews TO '/tmp/out.csv'", UnsupportedSqlError, ("COPY statements",)),
    SqlCase("copy-from", "COPY reviews FROM '/etc/passwd'", UnsupportedSqlError, ("COPY statements",)),
    SqlCase("attach", "ATTACH '/tmp/x.db' AS x", UnsupportedSqlError, ("ATTACH statements",)),
    SqlCase("detach", "DETACH x", UnsupportedSqlError, ("DETACH statements",)),
    SqlCase("pragma", "PRAGMA enable_profiling", UnsupportedSqlError, ("PRAGMA statements",)),
    SqlCase("set", "SET enable_external_access = true", UnsupportedSqlError, ("SET statements",)),
    SqlCase("reset", "RESET threads", UnsupportedSqlError, ("RESET statements",)),
    SqlCase("install", "INSTALL httpfs", UnsupportedSqlError, ("INSTALL statements",)),
    SqlCase("force-install", "FORCE INSTALL httpfs", UnsupportedSqlError, ("INSTALL statements",)),
    SqlCase("load", "LOAD httpfs", UnsupportedSqlError, ("LOAD statements",)),
    SqlCase("call", "CALL pragma_version()", UnsupportedSqlError, ("CALL statements",)),
    SqlCase("export", "EXPORT DATABASE '/tmp/dump'", STATEMENT, ()),
    SqlCase("import", "IMPORT DATABASE '/tmp/dump'", STATEMENT, ()),
    SqlCase("checkpoint", "CHECKPOINT", STATEMENT, ("expected SELECT",)),
    SqlCase("vacuum", "VACUUM", UnsupportedSqlError, ("VACUUM statements",)),
    SqlCase("create", "CREATE TABLE x AS SELECT * FROM reviews", UnsupportedSqlError, ("CREATE statements",)),
    SqlCase("insert", "INSERT INTO reviews VALUES (1, 'a', 2, 'b')", UnsupportedSqlError, ("INSERT statements",)),
    SqlCase("update", "UPDATE reviews SET rating = 1", UnsupportedSqlError, ("UPDATE statements",)),
    SqlCase("delete", "DELETE FROM reviews", UnsupportedSqlError, ("DELETE statements",)),
    SqlCase("drop", "DROP TABLE reviews", UnsupportedSqlError, ("DROP statements",)),
    SqlCase("alter", "ALTER TABLE reviews ADD COLUMN x INT", UnsupportedSqlError, ("ALTER statements",)),
    SqlCase("begin", "BEGIN TRANSACTION", UnsupportedSqlError, ("TRANSACTION statements",)),
    SqlCase("commit", "COMMIT", UnsupportedSqlError, ("COMMIT statements",)),
    SqlCase("rollback", "ROLLBACK", UnsupportedSqlError, ("ROLLBACK statements",)),
    SqlCase("show", "SHOW TABLES", UnsupportedSqlError, ("SHOW statements",)),
    SqlCase("describe", "DESCRIBE reviews", UnsupportedSqlError, ("DESCRIBE statements",)),
    SqlCase("summarize", "SUMMARIZE reviews", UnsupportedSqlError, ("SUMMARIZE statements",)),
    SqlCase("use", "USE other", UnsupportedSqlError, ("USE statements",)),
    SqlCase("explain", "EXPLAIN SELECT * FROM reviews", UnsupportedSqlError, ("EXPLAIN statements",)),
    SqlCase("table-function", "SELECT * FROM read_csv('/etc/passwd')", UnsupportedSqlError, ("FROM item",)),
]


@pytest.mark.parametrize("case", SQL_CASES, ids=[case.id for case in SQL_CASES])
def test_sql_fault(case: SqlCase, tables: dict[str, Node]) -> None:
    if case.error is None:
        assert isinstance(compile_sql(case.query, tables), Node)
        return
    with pytest.raises(case.error) as raised:
        compile_sql(case.query, tables)
    message = str(raised.value)
    for pattern in case.patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def test_the_sql_corpus_is_large() -> None:
    assert len(SQL_CASES) >= 60


def test_a_deep_caller_still_gets_a_typed_error(tables: dict[str, Node]) -> None:
    """At the limits, compiling works even from deep in a caller's stack; past what Python can
    recurse, the backstop turns the RecursionError into a SqlLimitError."""

    def nest(levels: int, query: str) -> Node:
        return compile_sql(query, tables) if levels == 0 else nest(levels - 1, query)

    assert isinstance(nest(250, parens(MAX_PAREN_DEPTH)), Node)
    assert isinstance(nest(250, ors(MAX_EXPRESSION_DEPTH - 20)), Node)
    frames = len(inspect.stack(context=0))
    with pytest.raises(SqlLimitError, match="too deeply nested to compile"):
        nest(sys.getrecursionlimit() - frames - 40, parens(MAX_PAREN_DEPTH))


# -- through the command line ----------------------------------------------------------------


def write_plan(tmp_path: Path, document: dict[str, Any], encoding: str = "utf-8") -> Path:
    path = tmp_path / "plan.json"
    path.write_bytes(json.dumps(document, ensure_ascii=False).encode(encoding))
    return path


@pytest.mark.parametrize("command", ["explain", "run"])
@pytest.mark.parametrize(
    ("encoding", "expected"), [("utf-16", "is UTF-16"), ("utf-32", "is UTF-32"), ("latin-1", "is not UTF-8")]
)
def test_cli_refuses_plan_files_not_in_utf8(
    tmp_path: Path,
    documents: dict[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    command: str,
    encoding: str,
    expected: str,
) -> None:
    document = copy.deepcopy(documents["limit"])
    document["plan"]["input"]["predicate"] = "review <> 'café'"
    path = write_plan(tmp_path, document, encoding)
    assert main(["--state-dir", str(tmp_path / "state"), command, str(path)]) == 2
    error = capsys.readouterr().err
    assert expected in error and str(path) in error and "must be UTF-8" in error


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (nested_limits(1000), "levels deep"),
        (put("plan.count", True), "plan.limit.count"),
        (text_with("@@", DIGITS, "plan.count"), "5000 digits"),
        (put(f"{SCAN}.source_schema.columns.0.type", "VARCHARR"), "did you mean 'VARCHAR'"),
    ],
)
def test_cli_explain_names_the_fault(
    tmp_path: Path,
    documents: dict[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    mutate: Mutation,
    expected: str,
) -> None:
    document = copy.deepcopy(documents["limit"])
    produced = mutate(document)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document) if produced is None else produced, encoding="utf-8")
    assert main(["--state-dir", str(tmp_path / "state"), "explain", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_cli_explains_a_utf8_plan_with_a_byte_order_mark(
    tmp_path: Path, documents: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_plan(tmp_path, documents["limit"], "utf-8-sig")
    assert main(["--state-dir", str(tmp_path / "state"), "explain", str(path)]) == 0
    assert "Limit 5" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("COPY reviews TO '/tmp/out.csv'", "COPY statements are not supported"),
        ("ATTACH '/tmp/x.db' AS x", "ATTACH statements are not supported"),
        ("PRAGMA version", "PRAGMA statements are not supported"),
        ("SET threads = 1", "SET statements are not supported"),
        ("INSTALL httpfs", "INSTALL statements are not supported"),
        ("LOAD httpfs", "LOAD statements are not supported"),
        (parens(3000), "levels deep"),
    ],
)
def test_cli_sql_refuses_statements(
    tmp_path: Path, reviews_csv: Path, capsys: pytest.CaptureFixture[str], query: str, expected: str
) -> None:
    argv = ["--state-dir", str(tmp_path / "state"), "sql", query, "--table", f"reviews={reviews_csv}", "--explain"]
    assert main(argv) == 2
    assert expected in capsys.readouterr().err
