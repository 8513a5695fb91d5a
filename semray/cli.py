"""The ``semray`` command: demo, run, explain, schema, sql, sim."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.cli_ask import add_ask_command
from semray.cli_catalog import add_catalog_commands
from semray.cli_cluster import add_cluster_commands, attach_local_cluster
from semray.cli_mcp import add_mcp_command
from semray.cli_models import add_models_commands
from semray.cli_progress import add_budget, reporter_for, with_budget
from semray.cli_runs import add_runs_commands
from semray.errors import SemrayError
from semray.log import configure_logging, get_logger
from semray.settings import Settings

log = get_logger("semray.cli")
FORMATS = ("table", "csv", "json", "parquet")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    given = {"state_dir": args.state_dir, "ray_address": args.ray_address, "models": args.models}
    command: Callable[[argparse.Namespace, Settings], int] = args.command
    try:
        settings = Settings(**{k: v for k, v in given.items() if v is not None})
        settings = attach_local_cluster(args, settings)  # a running `semray up` cluster, instead of a new Ray
        return command(args, settings)
    except SemrayError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semray", description="Relational + semantic queries over corpora on Ray.")
    parser.add_argument("--state-dir", type=Path, help="runs, caches and Ray temp files (default .semray)")
    parser.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one on 127.0.0.1)")
    parser.add_argument(
        "--models",
        type=Path,
        help="model profile (TOML) naming the tiers (default: $SEMRAY_MODELS, else ./semray.toml, else the "
        "simulated tiers); `semray models schema` shows the format",
    )
    parser.add_argument("--log-format", default="auto", choices=("auto", "console", "json"))
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="generate the demo corpus and run example queries on it")
    demo.add_argument("--rows", type=int, default=400, help="reviews to generate (default 400)")
    _add_output(demo)
    demo.set_defaults(command=run_demo)

    run = commands.add_parser("run", help="run a JSON plan file")
    run.add_argument("plan", type=Path)
    add_budget(run)
    _add_quality(run)
    _add_planning(run)
    _add_output(run)
    run.set_defaults(command=run_plan)

    explain = commands.add_parser("explain", help="show the logical and physical plan of a JSON plan file")
    explain.add_argument("plan", type=Path)
    _add_analyze(explain)
    _add_quality(explain)
    _add_planning(explain)
    explain.set_defaults(command=explain_plan)

    schema = commands.add_parser("schema", help="print the JSON Schema of plan files")
    schema.set_defaults(command=print_schema)

    sql = commands.add_parser("sql", help="run a SQL query (with SEM_* functions) over files")
    sql.add_argument("query", help="the SELECT statement")
    sql.add_argument(
        "--table", "-t", action="append", default=[], metavar="NAME=PATH", help="a table by name (repeatable)"
    )
    sql.add_argument("--explain", action="store_true", help="show the plan instead of the rows")
    add_budget(sql)
    _add_analyze(sql)
    _add_quality(sql)
    _add_planning(sql)
    _add_output(sql)
    sql.set_defaults(command=run_sql)

    serve_parser = commands.add_parser("serve", help="long-lived model tiers on Ray Serve")
    serve_actions = serve_parser.add_subparsers(required=True, metavar="ACTION")
    up = serve_actions.add_parser("up", help="deploy the tiers and keep them up until Ctrl-C")
    up.add_argument("--config", type=Path, help="a model profile (default: --models, else ./semray.toml)")
    up.add_argument("--tier", action="append", choices=("embedding", "small", "large"), help="deploy only these")
    up.set_defaults(command=serve_tiers_up)
    down = serve_actions.add_parser("down", help="delete the tier apps (needs --ray-address for a cluster)")
    down.add_argument("--prefix", help="delete the <prefix>-* apps (default: app_prefix of the model profile)")
    down.set_defaults(command=serve_tiers_down)
    status = serve_actions.add_parser(
        "status",
        help="what is deployed on the cluster at --ray-address and whether it is healthy (from Serve's status; "
        "the models are not called), and the cache",
    )
    status.add_argument(
        "--config",
        type=Path,
        help="the model profile to compare the deployed tiers with: its app_prefix names the apps to look at, "
        "and each app's matches_profile says whether its digest is this profile's (default: --models, else "
        "./semray.toml, else the defaults)",
    )
    status.set_defaults(command=serve_tiers_status)
    plan = serve_actions.add_parser(
        "plan", help="where the tiers would go on a GPU cluster, and the Serve/ray.serve.llm configs; starts nothing"
    )
    plan.add_argument("--config", type=Path, help="a model profile (default: --models, else ./semray.toml)")
    plan.add_argument(
        "--node",
        action="append",
        metavar="SPEC",
        help="[COUNT*]GPUS[xACCELERATOR][:CPUS], e.g. 8xH200:128 or 4*8xH200 (repeatable); "
        "default: the nodes of the cluster at --ray-address / RAY_ADDRESS",
    )
    plan.add_argument("--tier", action="append", choices=("embedding", "small", "large"), help="place only these")
    plan.add_argument("--json", action="store_true", help="the placement and configs as one JSON document")
    plan.set_defaults(command=serve_tiers_plan)

    sim = commands.add_parser("sim", help="the simulated model tier").add_subparsers(required=True, metavar="ACTION")
    serve = sim.add_parser("serve", help="serve the simulator as an OpenAI-compatible endpoint on 127.0.0.1")
    serve.add_argument("--config", type=Path, help="simulator config JSON (default: built-in models, no datasets)")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765)
    serve.set_defaults(command=run_simulator)
    add_bench_command(commands)
    add_runs_commands(commands)
    add_models_commands(commands)
    add_catalog_commands(commands)
    add_cluster_commands(commands)
    add_ask_command(commands)
    add_mcp_command(commands)
    return parser


def _add_quality(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quality",
        type=_quality,
        metavar="[METRIC:]LEVEL",
        help="run tier-auto filters, classifications and scores as cascades meeting this target against "
        "the large tier, e.g. 0.9 (accuracy) or recall:0.95 (filters); delta 0.05",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse to run a plan whose quality targets cannot be certified with their calibration labels "
        "(without it they run on the large tier, with a warning)",
    )
    parser.add_argument(
        "--code-choice",
        type=_agreement,
        metavar="TARGET",
        help="let the large tier write a function for each tier-auto map or extraction whose per-row calls cost "
        "more, kept where the 95%% lower bound of its agreement with the model's per-row answers reaches TARGET "
        "(or the operator's own quality target); its trials are paid before the run (default: "
        "$SEMRAY_CODE_CHOICE, else off)",
    )


def _with_quality(query: Any, args: argparse.Namespace, explaining: bool = False) -> Any:
    """``--quality`` and ``--code-choice`` applied, then each unmeetable target said once (refused under ``--strict``):
    on standard error before a run, in the plan's text when ``explaining`` (EXPLAIN says it)."""
    from semray.operators.base import quality_warnings

    if args.quality is not None:
        query = query.with_quality(args.quality)
    if args.code_choice is not None:  # made when the query runs or is explained (Settings.code_choice)
        query = query.with_settings(query.settings.model_copy(update={"code_choice": args.code_choice}))
    warnings = quality_warnings(query.plan)
    if warnings and args.strict:
        raise SemrayError("; ".join(warnings).replace("; strict=True (--strict) refuses instead", "") + " (--strict)")
    if not explaining:
        for warning in warnings:
            _say(f"WARNING: {warning}\n")
    return query


def _quality(text: str) -> Any:
    from semray.operators.semantic import QualityTarget

    metric, _, level = text.rpartition(":")
    try:
        return QualityTarget.model_validate({"metric": metric or "accuracy", "level": float(level)})
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a level in (0, 1), optionally after accuracy:, precision: or recall:"
        ) from error


def _agreement(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share of agreeing rows in (0, 1], e.g. 0.9")
    return value


def _add_planning(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        type=_policy,
        metavar="NAME:VALUE",
        help="choose the tiers of tier-auto operators with the cost model: mincost:0.9 (cheapest plan of "
        "quality >= 0.9), minlatency:0.9, or maxquality:2.5 (best plan within 2.5 dollars)",
    )
    parser.add_argument(
        "--measure",
        type=int,
        nargs="?",
        const=100,
        metavar="BUDGET",
        help="measure statistics inside the run first (BUDGET labels per semantic chain, default 100; "
        "reused at execution), then choose tiers with them (policy mincost:0.9 unless --policy)",
    )


def _policy(text: str) -> Any:
    from semray.cost_model.policies import MaxQuality, MinCost, MinLatency

    name, _, value = text.partition(":")
    kinds = {"mincost": MinCost, "minlatency": MinLatency}
    try:
        if name.lower() == "maxquality":
            return MaxQuality(budget_dollars=float(value))
        return kinds[name.lower()](quality=float(value)) if value else kinds[name.lower()]()
    except (KeyError, ValueError) as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give mincost:QUALITY, minlatency:QUALITY or maxquality:DOLLARS"
        ) from error


def _planning(args: argparse.Namespace) -> dict[str, Any]:
    """``policy`` and ``measure`` keywords for Query.execute/collect/write_parquet."""
    from semray.pipeline.runs.measure_in_run import MeasureOptions

    measure = MeasureOptions(budget=args.measure) if args.measure is not None else False
    return {"policy": args.policy, "measure": measure}


def _run_query(query: Any, args: argparse.Namespace, publish: bool = True) -> int:
    """Run and emit; ``publish``: Parquet output is written through the run, published atomically."""
    if args.output is not None:  # a path nothing can be written to is named before the run pays for calls
        from semray.output import check_output_path

        check_output_path(args.output)
    planning = {**_planning(args), "progress": reporter_for(query.settings)}
    query = with_budget(query, args)
    if publish and args.format == "parquet" and args.output:
        written = query.publish_parquet(args.output, **planning)
        _say(f"wrote {written.rows} rows to {args.output}\n")
        _say(written.usage_line() + "\n")  # calls, tokens, dollars, run id
        _say_failed(written)  # last: a run that left rows unanswered says so at the end
        return 0
    result = query.execute(**planning)
    emit(result.table, args)
    _say(result.usage_line() + "\n")
    _say_failed(result)
    return 0


def _say_failed(result: Any) -> None:
    """The loud last line of a run whose operators left rows unanswered (below max_error_rate)."""
    if line := result.failed_line():
        _say(line + "\n")


def _add_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--analyze",
        action="store_true",
        help="with the plan: run the query (its rows are not shown) and show each operator's actual rows, "
        "model calls, tokens and dollars beside the estimates",
    )


def _explain(query: Any, args: argparse.Namespace) -> int:
    """The plan; with ``--analyze``, after running it (EXPLAIN ANALYZE)."""
    if not args.analyze:
        sys.stdout.write(query.explain() + "\n")
        return 0
    counted = query.with_settings(query.settings.model_copy(update={"count_rows": "on"}))
    result = counted.execute(**_planning(args))
    sys.stdout.write(counted.explain(result) + "\n")
    _say(result.usage_line() + "\n")
    _say_failed(result)
    return 0


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
    parser.add_argument("--output", "-o", type=Path, help="write to this file instead of standard output")
    parser.add_argument("--row-ids", action="store_true", help="include the _rowid column")


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    from semray.demo.queries import DEMO_QUERIES, demo_sources

    _say(
        "semray demo: product reviews generated into the state folder; semantic operators run on the\n"
        "SIMULATED model tier, which answers from the corpus's known labels (no LLM on this machine).\n"
    )
    reviews, products = demo_sources(settings, args.rows)
    for position, demo in enumerate(DEMO_QUERIES, start=1):
        query = demo.build(reviews, products)
        _say(f"\n[{position}/{len(DEMO_QUERIES)}] {demo.title}\n")
        result = query.execute()
        emit(result.table, args)
        _say(result.usage_line() + "\n")
        _say_failed(result)
    return 0


def run_plan(args: argparse.Namespace, settings: Settings) -> int:
    from semray.readers import load_plan

    query = load_plan(args.plan, settings)
    query = _with_quality(query, args)
    return _run_query(query, args)


def explain_plan(args: argparse.Namespace, settings: Settings) -> int:
    from semray.readers import load_plan

    query = load_plan(args.plan, settings)
    query = _with_quality(query, args, explaining=True)
    return _explain(query, args)


def print_schema(args: argparse.Namespace, settings: Settings) -> int:
    from semray.operators import plan_json_schema

    sys.stdout.write(json.dumps(plan_json_schema(), indent=2) + "\n")
    return 0


def run_sql(args: argparse.Namespace, settings: Settings) -> int:
    from semray.readers import sql

    tables = {}
    for item in args.table:
        name, equals, path = item.partition("=")
        if not equals or not name or not path:
            raise SemrayError(f"--table takes NAME=PATH, got {item!r}")
        tables[name] = Path(path)
    query = sql(args.query, tables, settings)
    query = _with_quality(query, args, explaining=args.explain or args.analyze)
    if args.explain or args.analyze:
        return _explain(query, args)
    return _run_query(query, args, publish=False)


def run_simulator(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.simulator.server import serve

    _say(
        f"serving the SIMULATED model tier on http://{args.host}:{args.port}/v1 "
        "(answers come from labels, not a model)\n"
    )
    serve(args.config, host=args.host, port=args.port)
    return 0


def _serving_config(path: Path | None, settings: Settings) -> Any:
    """``--config FILE`` when given, else the model profile every command uses."""
    from semray.serving.profiles import load_profile, resolve_serving

    if path is not None:
        if not path.is_file():
            raise SemrayError(f"model profile {str(path)!r} not found")
        return load_profile(path)
    return resolve_serving(settings.models)


def serve_tiers_up(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.lifecycle import hold_tiers, serve_up

    config = _serving_config(args.config, settings)
    tiers = tuple(args.tier or ("embedding", "small", "large"))
    _say(f"deploying tiers {', '.join(tiers)} on Ray Serve\n")
    handles = serve_up(settings, config, tiers)  # raises when a tier fails its probe call
    _say(f"ready: {', '.join(handles.apps.values())} (each answered a probe call); Ctrl-C takes them down\n")
    hold_tiers(config.app_prefix)
    return 0


def serve_tiers_down(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.lifecycle import serve_down

    removed = serve_down(settings, args.prefix or _serving_config(None, settings).app_prefix)
    _say(f"removed: {', '.join(removed) or 'nothing was running'}\n")
    return 0


def serve_tiers_status(args: argparse.Namespace, settings: Settings) -> int:
    from semray.serving.lifecycle import serve_status

    status = serve_status(settings, _serving_config(args.config, settings))
    sys.stdout.write(json.dumps(status, indent=2, default=str) + "\n")
    return 0


def serve_tiers_plan(args: argparse.Namespace, settings: Settings) -> int:
    """Place the profile's tiers on ``--node`` shapes or the connected cluster's nodes; exit 2 when they do not fit."""
    import dataclasses
    import os

    from semray.serving.placement import nodes_from_ray, parse_nodes, plan_placement, render_placement, serve_configs

    config = _serving_config(args.config, settings)
    tiers = tuple(args.tier or ("embedding", "small", "large"))
    if args.node:
        nodes = parse_nodes(args.node)
    elif settings.ray_address or os.environ.get("RAY_ADDRESS"):
        import ray

        from semray.cluster.connect import connect

        connect(settings)
        nodes = nodes_from_ray(ray.nodes())  # type: ignore[no-untyped-call]
    else:
        raise SemrayError(
            "no cluster to plan for: give its nodes (--node 8xH200:128, repeatable) or its address "
            "(semray --ray-address auto serve plan on a node of the cluster)"
        )
    placement = plan_placement(config, nodes, tiers)
    configs = serve_configs(config, tiers)
    if args.json:
        document = {"placement": dataclasses.asdict(placement), "configs": configs}
        sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
        return 0
    sys.stdout.write(render_placement(placement))
    sys.stdout.write("\nconfigs (nothing was started):\n" + json.dumps(configs, indent=2, default=str) + "\n")
    return 0


def add_bench_command(commands: Any) -> None:
    """``semray bench [--repo DIR] NAME [OPTIONS...]``: run a benchmark of a source checkout (benchmarks/README.md)."""
    bench = commands.add_parser("bench", help="run a benchmark from a source checkout (benchmarks/)")
    bench.add_argument("name", help="e.g. relational, semantic_ops, enron, medical, scaling")
    bench.add_argument("options", nargs=argparse.REMAINDER, help="passed on to the benchmark (see its --help)")
    bench.add_argument("--repo", type=Path, default=Path.cwd(), help="the checkout holding benchmarks/ (default: .)")
    bench.set_defaults(command=run_bench)


def run_bench(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``python -m benchmarks[.workloads].NAME`` in the checkout; benchmarks are not part of the package."""
    import subprocess

    root = args.repo.resolve()
    folder = root / "benchmarks"
    # A benchmark is a module that hands its body to the harness; the rest are its helpers.
    files = [*(folder / "workloads").glob("*.py"), *folder.glob("*.py")]
    modules = {
        path.stem: ".".join(path.relative_to(root).with_suffix("").parts)
        for path in files
        if "run_benchmark(" in path.read_text(encoding="utf-8")
    }
    known = sorted(modules)
    if args.name not in known:
        where = f"; known: {', '.join(known)}" if known else f"; {folder} not found (run from a source checkout)"
        raise SemrayError(f"no benchmark named {args.name!r}{where}")
    return subprocess.call([sys.executable, "-m", modules[args.name], *args.options], cwd=root)


def emit(table: pa.Table, args: argparse.Namespace) -> None:
    """Write a result in the chosen format, atomically when it goes to a file."""
    from semray.output import render, without_row_ids

    render(table if args.row_ids else without_row_ids(table), args.format, args.output)


def _say(text: str) -> None:
    sys.stderr.write(text)


if __name__ == "__main__":
    raise SystemExit(main())
