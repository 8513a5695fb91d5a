"""``semray mcp``: semray as MCP tools other agents call (catalog search, describe, SQL, plan run, ask).

The tool functions are plain functions of ``Settings`` that return JSON-ready dicts, so they are
tested without a client; ``build_server`` registers them on the ``mcp`` package's server (the
optional extra ``semray[mcp]``: ``MCPServer`` in mcp 2, ``FastMCP`` in mcp 1), imported only here
and only when a server is built. Answers carry at most ``MAX_ROWS`` rows. A ``SemrayError`` a tool
raises (bad SQL, an unknown table or column, an invalid plan, no planning model) reaches the client
as a tool error whose text is the error's own message (``Error executing tool run_sql:
TableNotFoundError: table 'nope' not found (tables: orders) ...``); any other exception is a crash,
logged on the server and reported without its text.

>>> search_catalog_tool(settings, "fraud schemes")["datasets"][0]["name"]  # doctest: +SKIP
'claims'
>>> build_server(settings).run("stdio")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.errors import SemrayError
from semray.log import get_logger
from semray.settings import Settings

log = get_logger(__name__)

MAX_ROWS = 200
INSTRUCTIONS = (
    "semray answers analytical questions over catalogued data. Find datasets with search_catalog, read one "
    "with describe_dataset, query with run_sql (SEM_FILTER and other SEM_* functions call models), run a JSON "
    "plan with run_plan, or ask a question in plain language with ask."
)


class McpNotInstalledError(SemrayError):
    """The ``mcp`` package (the ``semray[mcp]`` extra) is not installed."""


def search_catalog_tool(settings: Settings, query: str, k: int = 8) -> dict[str, Any]:
    """The datasets and document segments of the catalog that best match ``query``."""
    from semray.catalog.catalog_search import search_catalog
    from semray.catalog.store import Catalog
    from semray.serving.profiles import resolve_serving

    hits = search_catalog(Catalog.open(settings), query, resolve_serving(settings.models).embedding, k=k)
    return {
        "datasets": [asdict(hit) for hit in hits.datasets],
        "segments": [
            {
                "dataset": hit.dataset,
                "document_id": hit.document_id,
                "level": hit.level,
                "path": list(hit.path),
                "start": hit.start,
                "end": hit.end,
                "text": hit.text,
                "score": hit.score,
            }
            for hit in hits.segments
        ],
    }


def describe_dataset_tool(settings: Settings, name: str) -> dict[str, Any]:
    """A catalogued dataset: how to scan it, its columns with statistics, sample rows, summary."""
    from semray.catalog.store import Catalog
    from semray.planner.agents.catalog_adapter import LanceCatalogView
    from semray.serving.profiles import resolve_serving

    profile = LanceCatalogView(Catalog.open(settings), resolve_serving(settings.models).embedding).describe(name)
    return {
        "name": profile.name,
        "scan": {"kind": profile.kind, "path": profile.uri, "options": dict(profile.options)},
        "row_count": profile.row_count,
        "columns": [asdict(column) for column in profile.columns],
        "summary": profile.summary,
        "description": profile.describe(),
    }


def run_sql_tool(settings: Settings, query: str, tables: Mapping[str, str]) -> dict[str, Any]:
    """Run SQL (with ``SEM_*`` functions) over named files, as ``semray sql -t NAME=PATH`` does."""
    from semray.readers import sql

    result = sql(query, {name: Path(path) for name, path in tables.items()}, settings).execute()
    return _answer(result.table, result.run_id, result.usage_line())


def run_plan_tool(settings: Settings, plan_json: str) -> dict[str, Any]:
    """Run a JSON plan (the ``semray schema`` format), as ``semray run plan.json`` does."""
    from semray.operators import plan_from_json
    from semray.readers import plan_query

    result = plan_query(plan_from_json(plan_json), settings).execute()
    return _answer(result.table, result.run_id, result.usage_line())


def ask_tool(
    settings: Settings,
    question: str,
    dry_run: bool = False,
    replay: str | None = None,
    max_cost: float | None = None,
    tables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Plan (and unless ``dry_run`` run) a question with the planning agents, over ``tables``
    (name -> file) when given, else over the catalog."""
    from semray.asking import ask

    result = ask(
        question,
        tables={name: Path(path) for name, path in tables.items()} if tables else None,
        settings=settings,
        dry_run=dry_run,
        replay=None if replay is None else Path(replay),
        max_cost=max_cost,
    )
    answer = {} if result.answer is None else _answer(result.answer, result.run_id, result.usage_line)
    return {
        **answer,
        "plan": result.plan_json,
        "datasets": list(result.datasets),
        "iterations": result.iterations,
        "ask_id": result.ask_id,
        "run_id": result.run_id,
        "planning_tokens": result.planning_tokens,
        "planning_dollars": result.planning_dollars,
        "steps": [step.line() for step in result.steps],
        "reflection": None
        if result.reflection is None
        else {"verdict": result.reflection.verdict, "reason": result.reflection.reason},
        "warning": result.warning() or None,
    }


def build_server(settings: Settings) -> Any:
    """An MCP server with the five tools bound to ``settings``; raises McpNotInstalledError without ``mcp``."""
    server_class, tool_error = _server_classes()
    server = server_class("semray", instructions=INSTRUCTIONS)

    def reported(tool: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        # The mcp package hides the text of an exception it did not expect (a crash); a user's
        # error (bad SQL, an unknown table) must reach the calling agent, so it becomes a ToolError.
        try:
            return work()
        except SemrayError as error:
            log.info("mcp_tool_failed", tool=tool, error=type(error).__name__)
            raise tool_error(f"{type(error).__name__}: {error}") from error

    def search_catalog(query: str, k: int = 8) -> dict[str, Any]:
        """Find catalogued datasets and document segments matching a query (hybrid search)."""
        return reported("search_catalog", lambda: search_catalog_tool(settings, query, k))

    def describe_dataset(name: str) -> dict[str, Any]:
        """Describe a catalogued dataset: scan source, columns with statistics, samples, summary."""
        return reported("describe_dataset", lambda: describe_dataset_tool(settings, name))

    def run_sql(query: str, tables: dict[str, str]) -> dict[str, Any]:
        """Run SQL with SEM_* functions over tables given as {name: file path}."""
        return reported("run_sql", lambda: run_sql_tool(settings, query, tables))

    def run_plan(plan_json: str) -> dict[str, Any]:
        """Run a semray JSON plan and return its rows, run id and cost."""
        return reported("run_plan", lambda: run_plan_tool(settings, plan_json))

    def ask(
        question: str,
        dry_run: bool = False,
        tables: dict[str, str] | None = None,
        max_cost: float | None = None,
    ) -> dict[str, Any]:
        """Answer a question in plain language: plan, validate and (unless dry_run) run it; over tables
        given as {name: file path}, else over the catalog; max_cost bounds the planning dollars."""
        return reported("ask", lambda: ask_tool(settings, question, dry_run, None, max_cost, tables))

    for tool in (search_catalog, describe_dataset, run_sql, run_plan, ask):
        server.add_tool(tool)
    log.info("mcp_server_built", tools=5)
    return server


def _server_classes() -> tuple[Any, type[Exception]]:
    """The server class and the exception a tool raises to report an error, of mcp 2 or mcp 1."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError

        return MCPServer, ToolError
    except ImportError:
        pass
    try:
        version_one = importlib.import_module("mcp.server.fastmcp")  # mcp 1.x
        errors = importlib.import_module("mcp.server.fastmcp.exceptions")
    except ImportError as error:
        raise McpNotInstalledError(
            "semray mcp needs the mcp package: pip install 'semray[mcp]' (or pip install 'mcp>=1.0')"
        ) from error
    return version_one.FastMCP, errors.ToolError


def _answer(table: pa.Table, run_id: str | None, usage: str) -> dict[str, Any]:
    from semray.output import without_row_ids

    rows = without_row_ids(table)
    return {
        "columns": rows.column_names,
        "rows": rows.slice(0, MAX_ROWS).to_pylist(),
        "row_count": rows.num_rows,
        "truncated": rows.num_rows > MAX_ROWS,
        "run_id": run_id,
        "usage": usage,
    }
