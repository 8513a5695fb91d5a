"""The grammar validator: each problem with its JSON path; valid plans pass; faults are found."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from agent_fixtures import catalog_of, gold_document, scan

from semray.operators.plan import OPERATORS
from semray.planner.agents import check_plan_document, check_plan_text
from semray.planner.agents.faults import FAULT_KINDS, inject
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.operator_docs import narrowed_plan_schema, operator_definitions, operator_names

DATASETS = ("reviews", "products")


def test_a_valid_plan_has_no_issues(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    report = check_plan_text(json.dumps(gold_document(catalog)), catalog, DATASETS)
    assert report.ok and report.repairs == ()


@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        (lambda d: d["plan"]["aggs"][0].update(expr="avg(ratng)"), "plan.aggregate.aggs.0.expr", "column"),
        (lambda d: d["plan"]["aggs"][0].update(expr="sum(review)"), "plan.aggregate.aggs.0.expr", "aggregate"),
        (lambda d: d["plan"]["input"].update(on="l.review = r.id"), "plan.aggregate.input.join.on", "join_key"),
        (
            lambda d: d["plan"]["input"]["left"]["source_schema"]["columns"][2].update(type="VARCHAR"),
            "plan.aggregate.input.join.left.scan.source_schema.columns.2.type",
            "type",
        ),
        (
            lambda d: d["plan"]["input"]["right"]["source"].update(path="/nowhere/products.csv"),
            "plan.aggregate.input.join.right.scan.source.path",
            "table",
        ),
        (lambda d: d["plan"].update(keys=["nme"]), "plan.aggregate.keys.0", "column"),
    ],
)
def test_each_problem_names_its_path(tmp_path: Path, change: object, path: str, code: str) -> None:
    catalog = catalog_of(tmp_path)
    document = gold_document(catalog)
    change(document)  # type: ignore[operator]
    report = check_plan_document(document, catalog, DATASETS)
    assert not report.ok
    assert (report.issues[0].path, report.issues[0].code) == (path, code)


def test_a_template_reference_to_a_missing_column_is_found(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    document = {
        "version": 1,
        "plan": {
            "op": "sem_filter",
            "instruction": "{reveiw} complains about quality",
            "input": scan(catalog.describe("reviews")),
        },
    }
    (issue,) = check_plan_document(document, catalog, ("reviews",)).issues
    assert (issue.path, issue.code) == ("plan.sem_filter.instruction", "template")
    assert "did you mean 'review'" in issue.message


def test_json_repairs_are_named_and_hopeless_text_is_refused() -> None:
    value, repairs = decode_json("```json\n{'op': 'scan', 'x': None,}\n```")
    assert value == {"op": "scan", "x": None}
    assert "removed trailing commas" in repairs and "replaced single quotes with double quotes" in repairs
    with pytest.raises(JsonRepairError):
        decode_json("no plan here")


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_grammar_fault_kind_is_detected(tmp_path: Path, kind: str) -> None:
    catalog = catalog_of(tmp_path)
    document = gold_document(catalog)
    filtered = {"op": "sem_filter", "instruction": "{review} is positive", "input": document["plan"]["input"]}
    document["plan"]["input"] = {
        "op": "project",
        "input": filtered,
        "exprs": [{"name": "name", "expr": "name"}, {"name": "stars", "expr": "rating * 1.0"}],
    }
    document["plan"]["aggs"][0]["expr"] = "avg(stars)"
    found = 0
    for seed in range(12):
        fault = inject(document, kind, random.Random(seed))  # type: ignore[arg-type]
        if fault is None or fault.detectable != "grammar":
            continue
        found += 1
        assert not check_plan_document(fault.document, catalog, DATASETS).ok, fault.description
    assert found > 0


def test_operator_definitions_come_from_every_ir_class() -> None:
    text = operator_definitions()
    for cls in OPERATORS:
        op = str(cls.model_fields["op"].default)
        assert f"\n{op}: " in "\n" + text
        for name in cls.model_fields:
            if name != "op":
                assert f"  - {name}: " in text
    schema = narrowed_plan_schema(["filter"])
    assert set(schema["properties"]["plan"]["discriminator"]["mapping"]) == {"scan", "filter"}
    assert "SemFilter" not in schema["$defs"]
    assert len(operator_names()) == len(OPERATORS)
