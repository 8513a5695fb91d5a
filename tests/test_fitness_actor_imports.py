"""Architecture fitness: what a fresh Ray actor imports to run semantic batches.

Every actor of every run imports its UDF's module in a new process. The plan layer (the
operators' IR over sqlglot and DuckDB), the planner, the catalog (LanceDB) and the tier
deployments' module (which deploys Serve apps) are driver-side: importing them cost a fresh
actor about 0.4 CPU-s more than plain Ray Data's (benchmarks/notes/cluster_overhead.md). Each
module is imported in a fresh interpreter, as an actor would, and its ``sys.modules`` checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ACTOR_MODULES = (
    "semray.pipeline.workers.semantic_batches",  # SemanticBatchUDF: every semantic operator's actor pool
    "semray.pipeline.workers.embed_batches",  # EmbedBatchUDF: the embedding actor pool
    "semray.pipeline.runs.actor_ledger",  # CancellableLedger: unpickled by every actor that holds the run's ledger
)
DRIVER_SIDE = (
    "sqlglot",
    "duckdb",
    "lancedb",
    "semray.operators",
    "semray.planner",
    "semray.sql",
    "semray.catalog",
    "semray.cost_model",
    "semray.serving.deployments",
)


@pytest.mark.parametrize("module", ACTOR_MODULES)
def test_an_actor_module_does_not_import_the_plan_layer(module: str) -> None:
    probe = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert module in loaded
    found = sorted(name for name in DRIVER_SIDE if name in loaded)
    assert not found, f"{module} imports {found}: import them where the driver uses them, not at the top"


def test_the_row_id_column_the_actors_use_is_the_plans() -> None:
    from semray.operators.schema import ROW_ID
    from semray.transactions.batches import ROW_ID as ACTORS_ROW_ID

    assert ACTORS_ROW_ID == ROW_ID
