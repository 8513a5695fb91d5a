"""``semray mcp``: serve catalog search, dataset description, SQL, plan run and ask as MCP tools.

Registered on the ``semray`` parser by ``add_mcp_command(commands)``; needs ``semray[mcp]``.

    semray mcp                      # stdio, for an agent that launches it
    semray mcp --transport streamable-http
"""

from __future__ import annotations

import argparse
from typing import Any

from semray.settings import Settings


def add_mcp_command(subparsers: Any) -> None:
    """Add ``mcp`` to the ``semray`` command's subparsers."""
    mcp = subparsers.add_parser("mcp", help="serve semray's catalog, SQL, plans and ask as MCP tools")
    mcp.add_argument("--transport", default="stdio", choices=("stdio", "sse", "streamable-http"))
    mcp.set_defaults(command=run_mcp)


def run_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from semray.mcp_server import build_server

    build_server(settings).run(args.transport)
    return 0
