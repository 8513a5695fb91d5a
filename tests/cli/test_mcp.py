"""``semray mcp``: the tool functions over an ingested catalog, one in-memory client round trip,
and the error naming the extra when ``mcp`` is missing."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from semray.catalog.ingest import add_server
from semray.mcp_server import McpNotInstalledError, build_server, describe_dataset_tool, search_catalog_tool
from semray.settings import Settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("mcp")
    folder = root / "shop"
    folder.mkdir()
    (folder / "orders.csv").write_text("order_id,region,total\n1,north,10.5\n2,south,3.0\n3,north,7.25\n")
    (folder / "guide.md").write_text("# Regions\n\nThe north region ships from Oslo.\n")
    settings = Settings(state_dir=root / "state")
    add_server(settings, str(folder), engine="local")
    return settings


def test_search_and_describe_read_the_catalog(settings: Settings) -> None:
    found = search_catalog_tool(settings, "order totals by region", 5)
    assert {hit["name"] for hit in found["datasets"]} == {"shop_orders", "shop"}
    assert any("Oslo" in segment["text"] for segment in found["segments"])
    described = describe_dataset_tool(settings, "shop_orders")
    assert described["row_count"] == 3 and described["scan"]["kind"] == "csv"
    assert [column["name"] for column in described["columns"]] == ["order_id", "region", "total"]
    json.dumps(described)  # JSON-ready


def test_a_client_lists_the_tools_and_calls_one_in_memory(settings: Settings) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'semray[mcp]')")
    from mcp import Client

    async def round_trip() -> tuple[set[str], str]:
        async with Client(build_server(settings)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("describe_dataset", {"name": "shop_orders"})
            assert not result.is_error
            return tools, result.content[0].text  # type: ignore[union-attr]

    tools, text = asyncio.run(round_trip())
    assert tools == {"search_catalog", "describe_dataset", "run_sql", "run_plan", "ask"}
    assert json.loads(text)["row_count"] == 3


def test_without_the_package_the_error_names_the_extra(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mcp", "mcp.server", "mcp.server.mcpserver", "mcp.server.fastmcp"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(McpNotInstalledError, match=r"semray\[mcp\]"):
        build_server(settings)


def test_the_cli_registers_mcp_and_ask_attaches_to_a_running_cluster() -> None:
    from semray.cli import build_parser
    from semray.cli_cluster import ATTACHING_COMMANDS

    args = build_parser().parse_args(["mcp", "--transport", "stdio"])
    assert args.command.__name__ == "run_mcp"
    assert "run_ask" in ATTACHING_COMMANDS
