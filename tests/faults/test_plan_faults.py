"""Fault corpus for JSON plans, structure (issue 26): depth, encodings, numbers, strict types,
wrong top-level JSON and operators. Every bad input is a typed SemrayError naming its cause
(the JSON path, the value and, for limits, the limit), or a documented correct result; none is
a raw traceback. Schemas, names and score ranges are ``test_plan_schema_faults.py``; the SQL
surface is ``test_sql_faults.py``; the documents and mutations are ``plan_documents.py``. A few
cases go through ``semray`` itself (``explain``/``run``), which must exit 2. No Ray, no model.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plan_documents import (
    DIGITS,
    SCAN,
    SCAN_PATH,
    Mutation,
    PlanCase,
    check_plan_case,
    drop,
    encoded,
    nested_limits,
    nested_unions,
    nested_value,
    put,
    repeated_key,
    replace,
    text_with,
)

from semray.api import read_csv
from semray.cli import main
from semray.errors import ColumnNotFoundError, PlanError, PlanFormatError, SourceError
from semray.operators.serialize import (
    MAX_JSON_DEPTH,
    MAX_PLAN_DEPTH,
    MAX_PLAN_FILE_BYTES,
    MAX_VALUE_DEPTH,
    plan_from_file,
    plan_from_json,
)

pytestmark = pytest.mark.timeout(30)

STRUCTURE_CASES = [
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
    # a key twice in one object: JSON keeps the last value and would drop the first silently
    PlanCase(
        "key-twice-version",
        "limit",
        repeated_key('"version": 1', '"version": 1, "version": 2'),
        PlanFormatError,
        ("'version' twice", "remove one"),
    ),
    PlanCase(
        "key-twice-predicate",
        "limit",
        repeated_key('"predicate": ', '"predicate": "true", "predicate": '),
        PlanFormatError,
        ("'predicate' twice", 'in the "filter" operator'),
    ),
    PlanCase(
        "key-twice-count",
        "limit",
        repeated_key('"count": ', '"count": 1000000, "count": '),
        PlanFormatError,
        ("'count' twice", 'in the "limit" operator'),
    ),
    PlanCase(
        "key-twice-op",
        "limit",
        repeated_key('"op": "limit"', '"op": "scan", "op": "limit"'),
        PlanFormatError,
        ("'op' twice",),
    ),
    PlanCase(
        "key-twice-column-type",
        "limit",
        repeated_key('"type": "BIGINT"', '"type": "VARCHAR", "type": "BIGINT"'),
        PlanFormatError,
        ("'type' twice",),
    ),
    PlanCase(
        "key-twice-option",
        "limit",
        repeated_key('"options": {}', '"options": {"header": false, "header": true}'),
        PlanFormatError,
        ("'header' twice",),
    ),
    PlanCase(
        "key-twice-same-value",
        "limit",
        repeated_key('"version": 1', '"version": 1, "version": 1'),
        PlanFormatError,
        ("'version' twice",),
    ),
    PlanCase("same-key-in-two-objects-ok", "limit", lambda d: json.dumps(d), None),
]


@pytest.mark.parametrize("case", STRUCTURE_CASES, ids=[case.id for case in STRUCTURE_CASES])
def test_plan_fault(case: PlanCase, documents: dict[str, dict[str, Any]]) -> None:
    check_plan_case(case, documents)


def test_the_plan_corpus_is_large() -> None:
    from test_plan_schema_faults import SCHEMA_CASES

    assert len(STRUCTURE_CASES) + len(SCHEMA_CASES) >= 100


def test_plan_files_name_the_file(tmp_path: Path, documents: dict[str, dict[str, Any]]) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(json.dumps(documents["limit"]).encode("utf-16"))
    with pytest.raises(PlanFormatError, match=r"plan file '.*plan\.json' is UTF-16"):
        plan_from_file(path)
    with pytest.raises(SourceError, match="not found"):
        plan_from_file(tmp_path / "missing.json")
    with pytest.raises(SourceError, match="cannot read plan file"):
        plan_from_file(tmp_path)


def _fifo(folder: Path) -> Path:
    path = folder / "plan.json"
    os.mkfifo(path)  # reading it would wait for a writer forever
    return path


def _oversized(folder: Path) -> Path:
    path = folder / "plan.json"
    with path.open("wb") as file:
        file.truncate(MAX_PLAN_FILE_BYTES + 1)  # sparse: no disk used
    return path


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_fifo, "is a named pipe"),
        (lambda folder: Path("/dev/zero"), "is a character device"),
        (_oversized, "more than the"),
    ],
    ids=["fifo", "device", "oversized"],
)
def test_plan_files_that_would_block_or_never_end_are_refused(
    tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    with pytest.raises(SourceError, match=expected):
        plan_from_file(make(tmp_path))


def test_the_cli_refuses_a_plan_fifo_instead_of_waiting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--state-dir", str(tmp_path / "state"), "explain", str(_fifo(tmp_path))]) == 2
    assert "is a named pipe (FIFO)" in capsys.readouterr().err


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


def test_the_builder_refuses_a_plan_deeper_than_a_json_plan_may_be(reviews_csv: Path) -> None:
    query = read_csv(reviews_csv)
    with pytest.raises(PlanError, match=f"nest {MAX_PLAN_DEPTH + 1} operators deep, more than the {MAX_PLAN_DEPTH}"):
        for step in range(400):
            query = query.filter(f"rating > {-step}") if step % 2 else query.select("rating", "review")
        query.to_json()
    assert step == MAX_PLAN_DEPTH - 1  # the scan is one: the first step past the limit is refused


def test_the_builder_keeps_a_plan_as_deep_as_a_json_plan_may_be(reviews_csv: Path) -> None:
    query = read_csv(reviews_csv)
    for step in range(MAX_PLAN_DEPTH - 1):
        query = query.filter(f"rating > {-step}") if step % 2 else query.select("rating", "review")
    assert query.plan.depth == MAX_PLAN_DEPTH
    assert plan_from_json(query.to_json()) == query.plan
