"""Architecture fitness: every operator lowers (or is listed as not yet executable) and has a
row-count rule; every semantic operator has a task kind, a prompt template, a cost estimator, a
lowering, a ``Query`` builder method, a JSON round trip, a SQL function and a rule fixture (or a
stated reason why not); lowering functions lower nothing themselves; imports point the way
docs/architecture.md ("Layering") says: MAY_IMPORT is that table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from semray.operators import OPERATORS
from semray.pipeline.lowering.driver import LOWERINGS
from semray.pipeline.lowering.registry import Lowering

PACKAGE = Path(__file__).resolve().parents[1] / "semray"
NOT_YET_EXECUTABLE: set[type] = set()
"""Operators that validate and EXPLAIN but do not run yet (docs/architecture.md, "Not built yet")."""


def test_every_operator_lowers_or_is_listed() -> None:
    missing = set(OPERATORS) - set(LOWERINGS) - NOT_YET_EXECUTABLE
    assert not missing, f"operators without a lowering: {sorted(o.__name__ for o in missing)}"
    assert not NOT_YET_EXECUTABLE & set(LOWERINGS), "an operator now lowers: remove it from NOT_YET_EXECUTABLE"


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (relative imports made absolute)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            # ``from semray import api`` imports semray.api: each name counts, qualified by its module
            package = path.relative_to(PACKAGE.parent).parent.parts
            base = [*package[: len(package) - node.level + 1]] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    """``semray/planner/agents/loop.py`` -> ``semray.planner.agents.loop``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layers(names: str) -> frozenset[str]:
    """The FOUNDATION and the layers named, space-separated."""
    return FOUNDATION | set(names.split())


# The layering of docs/architecture.md ("Layering"), the one place it is written as code: each
# layer and the layers it may import (its own modules aside). A layer is a subpackage or a
# top-level module of semray (all ``cli*.py`` are one, ``cli``); ``planner.agents`` and each
# subpackage of ``pipeline`` are layers of their own. ``ray`` stands for Ray itself; ``ray.data``
# only ``pipeline.ray`` and the modules in RAY_DATA_ELSEWHERE import. Every layer may import the
# leaves in FOUNDATION.
FOUNDATION = frozenset({"errors", "log", "tasks", "settings", "sql_quoting"})
MAY_IMPORT: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "log": frozenset(),
    "sql_quoting": frozenset(),  # identifier and literal quoting, shared by sources, the IR and the catalog
    "tasks": frozenset(),  # the semantic task kinds: shared by operators and serving, which may not import each other
    "settings": frozenset({"errors", "log"}),
    "sandbox": frozenset({"errors", "log"}),  # knows nothing of the engine
    "sources": FOUNDATION,
    "operators": FOUNDATION,
    "sql": layers("operators"),
    "output": layers("operators"),
    "cluster": layers("ray"),
    "transactions": FOUNDATION,
    "serving": layers("cluster ray transactions"),  # never plans; transactions: the store its cache is copied to
    "cost_model": layers("operators serving sources"),  # serving: to count tokens as the tiers bill them
    "catalog": layers("operators sources serving transactions cluster ray"),
    "planner": layers("operators cost_model"),
    "planner.agents": layers("operators cost_model planner serving catalog sources transactions"),
    "pipeline": FOUNDATION,  # the package itself; its subpackages are the layers below
    "pipeline.stages": layers("operators catalog sandbox"),  # physical plan values: no Ray
    "pipeline.lowering": layers("pipeline.stages operators cost_model planner catalog serving sandbox"),  # no Ray
    "pipeline.workers": layers("pipeline.stages operators cost_model catalog serving transactions sandbox cluster"),
    "pipeline.ray": layers("pipeline.stages pipeline.workers operators cost_model serving sources transactions ray"),
    "pipeline.runs": layers(
        "pipeline.stages pipeline.lowering pipeline.workers pipeline.ray operators cost_model planner catalog serving"
        " sources transactions cluster sandbox"
    ),
    "explaining": layers("operators cost_model planner serving transactions"),
    "query": layers("operators sql cost_model planner pipeline.runs serving explaining output catalog"),
    "readers": layers("operators sources sql catalog query"),
    "asking": layers("operators cost_model planner planner.agents serving catalog query pipeline.runs transactions"),
    "demo": layers("serving query readers"),
    "mcp_server": layers("operators planner planner.agents serving catalog output query readers asking"),
    "cli": layers(
        "operators cost_model planner planner.agents pipeline.runs serving catalog cluster transactions output"
        " readers query asking mcp_server demo ray"
    ),
    "api": frozenset({"query", "readers"}),  # the public surface: nothing inside semray imports it
    "semray": frozenset({"api"}),  # the package's lazy exports
}
EXCEPTIONS: dict[tuple[str, str], str] = {}
"""Imports the table does not allow, each with its reason: (module under semray/, layer it imports)."""
RAY_DATA_LAYER = "pipeline/ray/"
"""The modules that turn stages into Ray Data pipelines: the ones that import ``ray.data``."""
RAY_DATA_ELSEWHERE: dict[str, str] = {
    "cluster/connect.py": "sets Ray Data's global options once, when the process connects",
    "cluster/release.py": "the execution callback connect registers: kills a failed execution's actors",
    "catalog/document_pipeline.py": "ingest is not a plan (docs/architecture.md, 'The catalog')",
}
"""The modules outside ``pipeline/ray/`` that import ``ray.data``, each with its reason."""


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name: ``semray.planner.agents.loop`` -> ``planner.agents``; ``ray.data`` -> ``ray``.

    None for what is outside semray and Ray (the standard library, third parties).
    """
    if module == "ray" or module.startswith("ray."):
        return "ray"
    parts = module.split(".")
    if parts[0] != "semray":
        return None
    if len(parts) == 1:
        return "semray"
    if parts[1].startswith("cli"):
        return "cli"
    nested = ".".join(parts[1:3])
    return nested if nested in MAY_IMPORT else parts[1]


def layer_imports() -> dict[tuple[str, str], set[str]]:
    """(module under semray/, layer it imports outside its own) -> the imported modules."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer_of(module_name(path))
        for name in imports(path):
            layer = layer_of(name)
            if layer is not None and layer != own:
                found.setdefault((path.relative_to(PACKAGE).as_posix(), layer), set()).add(name)
    return found


def test_every_module_belongs_to_a_layer_of_the_table() -> None:
    layers = {layer_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert not layers - set(MAY_IMPORT), f"layers missing from MAY_IMPORT: {sorted(map(str, layers - set(MAY_IMPORT)))}"
    named = set().union(*MAY_IMPORT.values()) - {"ray"}
    assert named <= set(MAY_IMPORT), f"MAY_IMPORT names unknown layers: {sorted(named - set(MAY_IMPORT))}"


def test_imports_point_one_way() -> None:
    """The table has no cycle: every layer sits above all the layers it may import."""
    order: list[str] = []
    remaining = {layer: set(allowed) - {"ray"} for layer, allowed in MAY_IMPORT.items()}
    while remaining:
        ready = sorted(layer for layer, allowed in remaining.items() if allowed <= set(order))
        assert ready, f"the layers {sorted(remaining)} import each other"
        order.extend(ready)
        for layer in ready:
            del remaining[layer]


def test_every_import_is_allowed_by_the_table() -> None:
    bad = [
        f"{module} imports {sorted(names)}"
        for (module, layer), names in layer_imports().items()
        if layer not in MAY_IMPORT[layer_of(module_name(PACKAGE / module)) or ""] and (module, layer) not in EXCEPTIONS
    ]
    assert not bad, "imports the layering does not allow (docs/architecture.md, 'Layering'):\n" + "\n".join(bad)
    stale = set(EXCEPTIONS) - set(layer_imports())
    assert not stale, f"exceptions no longer needed: remove {sorted(stale)} from EXCEPTIONS"


def test_only_the_ray_execution_layer_imports_ray_data() -> None:
    importing = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if any(name == "ray.data" or name.startswith("ray.data.") for name in imports(path))
    }
    elsewhere = {module for module in importing if not module.startswith(RAY_DATA_LAYER)}
    assert elsewhere == set(RAY_DATA_ELSEWHERE), (
        f"modules outside {RAY_DATA_LAYER} importing ray.data: {sorted(elsewhere)}; build Ray Data pipelines in "
        f"semray/{RAY_DATA_LAYER} (or list the module in RAY_DATA_ELSEWHERE with the reason)"
    )
    assert any(module.startswith(RAY_DATA_LAYER) for module in importing)


def test_lowering_functions_lower_nothing_themselves() -> None:
    """Only the driver lowers (inputs first, then one function per operator type); a lowering
    function is registered for one type and typed for it, so it never re-narrows its node."""
    lowering = PACKAGE / "pipeline" / "lowering"
    for path in sorted(lowering.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name != "driver.py":
            driver = [name for name in imports(path) if name.startswith("semray.pipeline.lowering.driver")]
            assert not driver, f"{path.name} imports the driver ({driver}): only the driver lowers"
        narrowing = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
            and isinstance(node.test, ast.Call)
            and getattr(node.test.func, "id", None) == "isinstance"
        ]
        assert not narrowing, f"{path.name} re-narrows with assert isinstance at lines {narrowing}"
    assert all(isinstance(entry, Lowering) and entry.operator is operator for operator, entry in LOWERINGS.items())


def test_the_sandbox_child_is_self_contained() -> None:
    child = imports(PACKAGE / "sandbox" / "child.py")
    assert not {name for name in child if name.startswith("semray")}, "the sandbox child must be self-contained"


def test_every_semantic_operator_declares_its_task_and_capabilities() -> None:
    """Each semantic node says what it asks (``question``, hence its task kind), its cascade kind,
    its tier and its capabilities on ``SemanticNode``; every task kind has a prompt template."""
    from semray.operators.plan import SEMANTIC
    from semray.operators.semantic import SemanticNode
    from semray.serving.prompts.operators import PROMPTS
    from semray.tasks import TaskKind

    for operator in SEMANTIC:
        name = operator.__name__
        assert issubclass(operator, SemanticNode), f"{name} does not derive from SemanticNode"
        undeclared = sorted(getattr(operator, "__abstractmethods__", ()))
        assert not undeclared, f"{name} does not declare {undeclared}"
        for method in ("question", "task_kind", "cascade_kind", "resolved_tier", "output_types", "columns_read"):
            assert callable(getattr(operator, method, None)), f"{name} has no {method}()"
        for capability in ("calls_llm", "calls_model", "row_wise", "row_preserving", "deterministic"):
            assert isinstance(getattr(operator, capability, None), bool), f"{name}.{capability} is not a bool"
        assert callable(operator.drops_rows_only), f"{name} has no drops_rows_only()"
    assert set(PROMPTS) == set(TaskKind), "every task kind needs a prompt template in serving/prompts/operators.py"


def test_every_semantic_operator_has_a_cost_estimator_a_lowering_and_a_builder_method() -> None:
    from semray.cost_model import code_cost, relational_cost, semantic_cost  # noqa: F401  (they register)
    from semray.cost_model.plan_cost import ESTIMATORS
    from semray.operators.plan import SEMANTIC

    names = {op.__name__ for op in SEMANTIC}
    missing = {
        "cost estimator (semray/cost_model/semantic_cost.py, ESTIMATORS)": names - {op.__name__ for op in ESTIMATORS},
        "lowering (semray/pipeline/lowering/, LOWERINGS)": names - {op.__name__ for op in LOWERINGS},
        "Query builder method (semray/query.py)": names - query_built_operators(),
    }
    assert not any(missing.values()), "semantic operators without a " + "; ".join(
        f"{what}: {sorted(operators)}" for what, operators in missing.items() if operators
    )


def query_built_operators() -> set[str]:
    """Names of the classes a public method of ``semray.query.Query`` names (the operators it builds)."""
    tree = ast.parse((PACKAGE / "query.py").read_text(encoding="utf-8"))
    (query,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Query"]
    return {
        name.id
        for method in query.body
        if isinstance(method, ast.FunctionDef) and not method.name.startswith("_")
        for name in ast.walk(method)
        if isinstance(name, ast.Name)
    }


def test_every_semantic_operator_round_trips_through_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tests/operators/test_serialize.py`` builds one of each operator; each semantic one is a JSON
    document of the plan schema that reads back as the same node."""
    import json

    import jsonschema

    from semray.operators import Scan, Schema, SourceSpec, plan_from_json, plan_json_schema, plan_to_json
    from semray.operators.plan import SEMANTIC

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "operators"))
    from test_serialize import one_of_each

    columns = (("review_id", "VARCHAR"), ("product", "VARCHAR"), ("rating", "BIGINT"), ("review", "VARCHAR"))
    reviews = Scan(source=SourceSpec(kind="csv", path="/data/reviews.csv"), source_schema=Schema.of(*columns))
    products = Scan(
        source=SourceSpec(kind="csv", path="/data/products.csv"),
        source_schema=Schema.of(("product", "VARCHAR"), ("category", "VARCHAR"), ("list_price", "DOUBLE")),
    )
    examples = {type(node): node for node in one_of_each(reviews, products)}
    missing = sorted(op.__name__ for op in SEMANTIC if op not in examples)
    assert not missing, f"no example of {missing} in one_of_each (tests/operators/test_serialize.py): add one"
    schema = plan_json_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    for operator in SEMANTIC:
        text = plan_to_json(examples[operator])
        validator.validate(json.loads(text))
        assert plan_from_json(text) == examples[operator], f"{operator.__name__} does not round-trip through JSON"


def test_every_operator_has_a_row_count_rule() -> None:
    """Lowering, join ordering and the cost model read an operator's rows from one rule."""
    from semray.cost_model.cardinality import ROW_RULES

    missing = sorted(operator.__name__ for operator in OPERATORS if operator not in ROW_RULES)
    assert not missing, (
        f"operators without a row-count rule: {missing}; add a RowRule (bound, default, estimate: how its "
        "inputs' rows become its own) to ROW_RULES in semray/cost_model/cardinality.py"
    )


NO_SQL_FUNCTION: dict[type, str] = {}
"""Semantic operators no SQL function builds, each with the reason (docs/sql.md lists the functions)."""


def sql_built_operators() -> set[str]:
    """Names of the classes some module of semray/sql/ calls (the operators a SQL function builds)."""
    called: set[str] = set()
    for path in (PACKAGE / "sql").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.add(node.func.id)
    return called


def test_every_semantic_operator_has_a_sql_function_or_a_reason() -> None:
    from semray.operators.plan import SEMANTIC

    built = sql_built_operators()
    missing = sorted(op.__name__ for op in SEMANTIC if op.__name__ not in built and op not in NO_SQL_FUNCTION)
    assert not missing, (
        f"semantic operators no SQL function builds: {missing}; add a SEM_... function "
        "(semray/sql/semantic_calls.py, or semray/sql/table_functions.py for one in FROM, and docs/sql.md), "
        "or list the operator in NO_SQL_FUNCTION in tests/test_fitness.py with the reason"
    )
    stale = sorted(op.__name__ for op in NO_SQL_FUNCTION if op.__name__ in built)
    assert not stale, f"a SQL function now builds {stale}: remove them from NO_SQL_FUNCTION"


NO_RULE_FIXTURE: dict[type, str] = {}
"""Semantic operators in no rule fixture (tests/planner/planner_fixtures.py), each with the reason."""


def test_every_semantic_operator_has_a_rule_fixture_or_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule applies to semantic operators (prune_columns to all of them), so each has a
    before/after fixture with it in the plan before the rule."""
    from semray.operators import walk
    from semray.operators.plan import SEMANTIC

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "planner"))
    from planner_fixtures import FIXTURES

    covered = {type(node) for fixture in FIXTURES for node in walk(fixture.before)}
    missing = sorted(op.__name__ for op in SEMANTIC if op not in covered and op not in NO_RULE_FIXTURE)
    assert not missing, (
        f"semantic operators in no rule fixture: {missing}; add a Fixture with the operator in its plan before "
        "the rule to FIXTURES in tests/planner/planner_fixtures.py (and the operator to the reference "
        "evaluator, tests/planner/planner_reference.py), or list it in NO_RULE_FIXTURE with the reason"
    )
    stale = sorted(op.__name__ for op in NO_RULE_FIXTURE if op in covered)
    assert not stale, f"{stale} now have a rule fixture: remove them from NO_RULE_FIXTURE"
