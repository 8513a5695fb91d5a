"""Architecture fitness: every operator lowers (or is listed as not yet executable), and
imports point the way docs/architecture.md says."""

from __future__ import annotations

import ast
from pathlib import Path

from semray.operators import OPERATORS
from semray.pipeline.lower import LOWERINGS

PACKAGE = Path(__file__).resolve().parents[1] / "semray"
NOT_YET_EXECUTABLE: set[type] = set()
"""Operators that validate and EXPLAIN but do not run yet (docs/architecture.md, "Not built yet")."""


def test_every_operator_lowers_or_is_listed() -> None:
    missing = set(OPERATORS) - set(LOWERINGS) - NOT_YET_EXECUTABLE
    assert not missing, f"operators without a lowering: {sorted(o.__name__ for o in missing)}"
    assert not NOT_YET_EXECUTABLE & set(LOWERINGS), "an operator now lowers: remove it from NOT_YET_EXECUTABLE"


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def test_operators_sql_and_sources_never_import_ray() -> None:
    for package in ("operators", "sql", "sources"):
        for path in modules(package):
            offending = {name for name in imports(path) if name == "ray" or name.startswith("ray.")}
            assert not offending, f"{path.relative_to(PACKAGE)} imports {offending}"


def test_only_materialize_builds_ray_data_pipelines() -> None:
    allowed = {
        PACKAGE / "pipeline" / "materialize.py",
        PACKAGE / "pipeline" / "set_ops.py",
        PACKAGE / "pipeline" / "cascade.py",
        PACKAGE / "cluster" / "connect.py",
        PACKAGE / "catalog" / "document_pipeline.py",  # ingest is not a plan: docs/architecture.md, "The catalog"
    }
    for path in PACKAGE.rglob("*.py"):
        if path in allowed or "benchmarks" in path.parts:
            continue
        offending = {name for name in imports(path) if name == "ray.data" or name.startswith("ray.data.")}
        assert not offending, f"{path.relative_to(PACKAGE)} imports {offending}"


def test_nothing_imports_api_or_cli() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and (path.name in ("api.py", "__init__.py") or path.name.startswith("cli")):
            continue
        if path.parent.name == "demo" or path in (PACKAGE / "asking.py", PACKAGE / "mcp_server.py"):
            continue  # the demo, `semray.ask` and the MCP server are applications of the public API
        bad = {name for name in imports(path) if name in ("semray.api", "semray.cli")}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_serving_does_not_know_about_plans() -> None:
    for path in modules("serving"):
        bad = {
            name for name in imports(path) if name.startswith(("semray.operators", "semray.planner", "semray.pipeline"))
        }
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_the_sandbox_knows_nothing_of_the_engine() -> None:
    for path in modules("sandbox"):
        bad = {name for name in imports(path) if name.startswith(("ray", "semray.")) and name not in _SANDBOX_IMPORTS}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"
    child = imports(PACKAGE / "sandbox" / "child.py")
    assert not {name for name in child if name.startswith("semray")}, "the sandbox child must be self-contained"


_SANDBOX_IMPORTS = {"semray.errors", "semray.log", "semray.sandbox.worker"}
