"""``semray mcp``'s tools through the mcp package's in-memory client: user errors come back as tool
errors that carry semray's own message, ask plans from recorded answers, and (with Ray) SQL and a
JSON plan run on the simulated tiers."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from semray.mcp_server import MAX_ROWS, ask_tool, build_server
from semray.settings import Settings

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'semray[mcp]')")

QUESTION = "What is the total of the orders per region?"


@pytest.fixture()
def orders(tmp_path: Path) -> Path:
    path = tmp_path / "orders.csv"
    path.write_text("order_id,region,total\n1,north,10.5\n2,south,3.0\n3,north,7.25\n", encoding="utf-8")
    return path


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state")


def call(settings: Settings, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """One tool call through an in-memory client: (is_error, the text of its first content block)."""
    from mcp import Client

    async def round_trip() -> tuple[bool, str]:
        async with Client(build_server(settings)) as client:
            result = await client.call_tool(tool, arguments)
            return bool(result.is_error), result.content[0].text  # type: ignore[union-attr]

    return asyncio.run(round_trip())


def scan(path: Path) -> dict[str, Any]:
    columns = [{"name": "order_id", "type": "BIGINT"}, {"name": "region", "type": "VARCHAR"}]
    return {
        "op": "scan",
        "source": {"kind": "csv", "path": str(path), "options": {}},
        "source_schema": {"columns": [*columns, {"name": "total", "type": "DOUBLE"}]},
    }


def test_the_tools_and_their_arguments_are_listed(settings: Settings) -> None:
    from mcp import Client

    async def listed() -> dict[str, dict[str, Any]]:
        async with Client(build_server(settings)) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    schemas = asyncio.run(listed())
    assert set(schemas) == {"search_catalog", "describe_dataset", "run_sql", "run_plan", "ask"}
    assert schemas["run_sql"]["required"] == ["query", "tables"]
    assert schemas["run_plan"]["required"] == ["plan_json"]
    assert schemas["ask"]["required"] == ["question"]
    assert {"dry_run", "tables", "max_cost"} <= set(schemas["ask"]["properties"])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELEC region FROM orders", r"SqlSyntaxError: syntax error at line 1, column 14"),
        ("SELECT region FROM nope", r"TableNotFoundError: table 'nope' not found \(tables: orders\)"),
        ("SELECT regio FROM orders", r"ColumnNotFoundError: column 'regio' not found .*did you mean 'region'\?"),
    ],
)
def test_bad_sql_is_a_tool_error_that_says_what_is_wrong(
    settings: Settings, orders: Path, query: str, expected: str
) -> None:
    failed, text = call(settings, "run_sql", {"query": query, "tables": {"orders": str(orders)}})
    assert failed
    assert text.startswith("Error executing tool run_sql: ")
    assert re.search(expected, text), text


def test_a_missing_file_is_a_tool_error_naming_the_path(settings: Settings, tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    failed, text = call(settings, "run_sql", {"query": "SELECT * FROM t", "tables": {"t": str(missing)}})
    assert failed and "SourceError" in text and str(missing) in text and "check the path" in text


@pytest.mark.parametrize(
    ("plan_json", "expected"),
    [
        ("{not json", "PlanFormatError: plan is not valid JSON"),
        (json.dumps({"version": 1, "plan": {"op": "scan"}}), "PlanFormatError: invalid plan at plan.scan.source"),
    ],
)
def test_an_invalid_plan_is_a_tool_error(settings: Settings, plan_json: str, expected: str) -> None:
    failed, text = call(settings, "run_plan", {"plan_json": plan_json})
    assert failed and expected in text, text


def test_an_unknown_dataset_and_an_empty_catalog(settings: Settings) -> None:
    failed, text = call(settings, "describe_dataset", {"name": "orders"})
    assert failed and "CatalogError: dataset 'orders' not found in the catalog" in text
    failed, text = call(settings, "search_catalog", {"query": "orders"})
    assert not failed and json.loads(text) == {"datasets": [], "segments": []}


def test_ask_on_simulated_tiers_says_how_to_configure_a_model(settings: Settings, orders: Path) -> None:
    failed, text = call(settings, "ask", {"question": QUESTION, "dry_run": True, "tables": {"orders": str(orders)}})
    assert failed and "PlanningNeedsModelError: planning needs a real LLM tier" in text
    assert "semray models" in text


def test_ask_plans_over_named_tables_from_recorded_answers(settings: Settings, orders: Path, tmp_path: Path) -> None:
    plan = {
        "version": 1,
        "plan": {"op": "aggregate", "keys": ["region"], "aggs": [{"name": "total", "expr": "sum(total)"}]},
    }
    plan["plan"]["input"] = scan(orders)
    accept = {"json": {"verdict": "accept", "mismatch": "", "correction": ""}}
    answers = {
        "profiling/choose": [{"json": {"datasets": ["orders"], "reason": "totals are in orders"}}],
        "planning/outline": [{"json": {"steps": [{"operator": "aggregate", "purpose": "sum per region"}]}}],
        "manipulation/fill": [{"json": plan}],
        "semantic/judge": [accept] * 3,
    }
    recording = tmp_path / "recording.json"
    recording.write_text(json.dumps({"version": 1, "model": "recorded", "answers": answers}), encoding="utf-8")
    answer = ask_tool(settings, QUESTION, dry_run=True, replay=str(recording), tables={"orders": str(orders)})
    assert answer["datasets"] == ["orders"] and answer["iterations"] == 1
    assert json.loads(answer["plan"])["plan"]["op"] == "aggregate"
    assert "rows" not in answer and answer["run_id"] is None  # a dry run runs nothing
    assert any("manipulation/fill" in line for line in answer["steps"])
    json.dumps(answer)  # JSON-ready


@pytest.mark.ray
def test_sql_and_a_plan_run_on_the_simulated_tiers(ray_settings: Settings, orders: Path) -> None:
    failed, text = call(
        ray_settings,
        "run_sql",
        {"query": "SELECT region, sum(total) AS total FROM orders GROUP BY region", "tables": {"orders": str(orders)}},
    )
    assert not failed, text
    answer = json.loads(text)
    assert sorted((row["region"], row["total"]) for row in answer["rows"]) == [("north", 17.75), ("south", 3.0)]
    assert answer["row_count"] == 2 and answer["truncated"] is False and "run_id" in answer and "usage" in answer
    plan = {"version": 1, "plan": {"op": "filter", "predicate": "total > 5", "input": scan(orders)}}
    failed, text = call(ray_settings, "run_plan", {"plan_json": json.dumps(plan)})
    assert not failed, text
    answer = json.loads(text)
    assert answer["columns"] == ["order_id", "region", "total"] and answer["row_count"] == 2 <= MAX_ROWS
