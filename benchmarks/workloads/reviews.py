"""Reviews (issue 19's acceptance workload): LIMIT queries, a cascade, a factorized self-join, a
category join and SQL with semantic functions in CASE, aggregates and GROUP BY, on generated data.

    .venv/bin/python -m benchmarks.workloads.reviews [--systems semray,lotus,palimpzest] [--rows 1000]

The data are product reviews made by a seeded generator (`reviews_data.py`: unique nonsense texts
with labels drawn per row), and the instructions are this workload's own multi-sentence wording.
Every system runs the same steps against one simulator served on 127.0.0.1 whose truth is the
labels, and is charged per step by the simulator's ``/stats`` (calls, tokens, dollars):

1. ``filter_limit``: a semantic filter (the customer complains, ~60% of rows) under ``LIMIT k``;
2. ``cascade_limit``: the same filter with a quality target (a cascade) under a larger LIMIT;
3. ``chain_limit``: that filter then a second one (the parcel delivery, ~36% pass both) under LIMIT;
4. ``self_join``: pairs of reviews of the same device family (8 families) over ``--join-rows``
   reviews, asked in a multi-sentence wording; semray factorizes it after verifying the rewrite;
5. ``self_join_limit``: the same join under ``LIMIT k``;
6. ``category_join``: each of ``--category-rows`` reviews against 5 topic descriptions;
7. ``sql_aggregate``: ``avg(CASE WHEN SEM_FILTER(..) ..)`` and ``avg(SEM_SCORE(..))`` per brand;
8. ``sql_group_by``: ``GROUP BY`` over a ``SEM_CLASSIFY`` item (mood), with ``count(*)``.

Quality: for a LIMIT query the share of returned rows that are right (precision) and whether k
came back; join F1 over unordered pairs; mean absolute error of the per-brand shares and stars;
relative L1 error of the mood counts. The LIMIT queries are held to issue 19's bound
``3 x k / selectivity + one batch`` model calls (a factorized join: ``m + 3 x k / s + one batch``,
``m`` its right rows, ``s`` the pairs each left row keeps).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import BenchmarkResult, run_benchmark
from benchmarks.workloads.cli import rerendered, run_workload, skip_steps, start, workload_parser
from benchmarks.workloads.report import cost_table, fmt, gaps_section, missing_reason, usage_of, versions_line
from benchmarks.workloads.reviews_data import CATEGORIES, prepare_reviews
from benchmarks.workloads.scoring import count_error, pairs, precision_recall

NAME = "reviews"
STEPS = (
    "filter_limit",
    "cascade_limit",
    "chain_limit",
    "self_join",
    "self_join_limit",
    "category_join",
    "sql_aggregate",
    "sql_group_by",
)
LIMIT_STEPS = {
    "filter_limit": "complaint",
    "cascade_limit": "complaint",
    "chain_limit": "complaint_and_shipping",
}
"""LIMIT step -> the truth its returned rows are checked against."""
BATCH_ROWS = 32
"""One batch of the bound: ``Settings.semantic_batch_size`` (the runner's settings leave it at its default)."""
CASCADE_QUALITY = 0.9
NAMES_OF_DESCRIPTIONS = {description: name for name, description in CATEGORIES.items()}


def bound(k: int, selectivity: float, batch_rows: int = BATCH_ROWS, right_rows: int = 0) -> float:
    """Issue 19's most model calls for a LIMIT ``k``: ``right_rows + 3 x k / selectivity + one batch``.

    >>> bound(10, 0.5)
    92.0
    """
    return right_rows + 3 * k / selectivity + batch_rows


def limit_bounds(truth: dict[str, Any], limits: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per LIMIT step: k, the true selectivity and the bound on its calls."""
    rows = truth["rows"]
    bounds = {}
    for step, key in LIMIT_STEPS.items():
        selectivity = len(truth[key]) / rows
        bounds[step] = {
            "k": limits[step],
            "selectivity": round(selectivity, 4),
            "bound": round(bound(limits[step], selectivity), 1),
        }
    n = truth["join_rows"]
    kept_per_left = (2 * len(truth["same_family_pairs"]) + n) / n  # ordered pairs, self-pairs included
    k = limits["self_join_limit"]
    bounds["self_join_limit"] = {
        "k": k,
        "selectivity": round(kept_per_left / n, 4),
        "bound": round(bound(k, kept_per_left, right_rows=n), 1),
    }
    return bounds


def score(steps: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Per-step quality of a runner's answer; a step that did not run has no entry."""
    quality: dict[str, Any] = {}
    for step, key in LIMIT_STEPS.items():
        if step in steps:
            kept = [str(v) for v in steps[step].get("kept", [])]
            right = set(truth[key])
            quality[step] = {
                "precision": round(sum(v in right for v in kept) / len(kept), 4) if kept else None,
                "returned": len(kept),
            }
    same = {tuple(p) for p in truth["same_family_pairs"]}
    if "self_join" in steps:
        quality["self_join"] = precision_recall(pairs(steps["self_join"].get("pairs", [])), same).to_dict()
    if "self_join_limit" in steps:
        found = pairs(steps["self_join_limit"].get("pairs", []))
        quality["self_join_limit"] = {
            "precision": round(len(found & same) / len(found), 4) if found else None,
            "returned": len(steps["self_join_limit"].get("pairs", [])),
        }
    if "category_join" in steps:
        found_pairs = {
            (str(a), NAMES_OF_DESCRIPTIONS.get(b, str(b))) for a, b in steps["category_join"].get("pairs", [])
        }
        expected = {(a, NAMES_OF_DESCRIPTIONS[b]) for a, b in truth["category_pairs"]}
        quality["category_join"] = precision_recall(found_pairs, expected).to_dict()
    if "sql_aggregate" in steps:
        answer = steps["sql_aggregate"]
        quality["sql_aggregate"] = {
            "share_mae": _mae(answer.get("complaint_share", {}), truth["brand_complaint_share"]),
            "stars_mae": _mae(answer.get("stars", {}), truth["brand_stars"]),
        }
    if "sql_group_by" in steps:
        counts = {str(k): int(v) for k, v in steps["sql_group_by"].get("mood_counts", {}).items()}
        quality["sql_group_by"] = count_error(counts, truth["mood_counts"])
    return quality


def _mae(found: dict[str, float], truth: dict[str, float]) -> float | None:
    """Mean absolute error over the truth's keys; a missing key counts as a full miss of its value."""
    if not truth:
        return None
    return round(sum(abs(found.get(key, 0.0) - value) for key, value in truth.items()) / len(truth), 4)


def quality_cell(step: str, quality: dict[str, Any] | None) -> str:
    """One step's quality in words.

    >>> quality_cell("filter_limit", {"precision": 1.0, "returned": 10})
    'precision 1.000 (10 rows)'
    """
    if not quality:
        return "–"
    if step in LIMIT_STEPS or step == "self_join_limit":
        return f"precision {fmt(quality['precision'])} ({quality['returned']} rows)"
    if step in ("self_join", "category_join"):
        return f"F1 {fmt(quality['f1'])} (P {fmt(quality['precision'])}, R {fmt(quality['recall'])})"
    if step == "sql_aggregate":
        return f"share MAE {fmt(quality['share_mae'])}, stars MAE {fmt(quality['stars_mae'])}"
    return f"counts L1 {fmt(quality['relative_l1'])}"


def step_table(rows: Sequence[dict[str, Any]], bounds: dict[str, dict[str, float]]) -> str:
    """Per query and system: calls (per tier), tokens, dollars, wall time, quality, and the LIMIT bound."""
    lines = [
        "| query | system | calls (small + large) | query's own calls | tokens | sim. $ | wall s | quality "
        "| k / selectivity / bound | within bound | how semray ran it |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for step in STEPS:
        for row in rows:
            label = f"{row['system']} ({row['config']})"
            usage = usage_of(row, step)
            limit = bounds.get(step)
            limits = f"{limit['k']:g} / {limit['selectivity']:.3f} / {limit['bound']:g}" if limit else ""
            if not usage:
                reason = missing_reason(row, step, row.get("error", "did not run"))
                lines.append(f"| {step} | {label} | {reason} | | | | | | {limits} | | |")
                continue
            tiers = usage["tiers"]
            calls = " + ".join(str(tiers.get(t, {}).get("calls", 0)) for t in ("small", "large"))
            own = (row.get("semray_usage") or {}).get(step, {}).get("calls")
            within = ""
            if limit:
                within = "yes" if usage["calls"] <= limit["bound"] else "no"
                if own is not None and own != usage["calls"]:
                    within += f" ({'yes' if own <= limit['bound'] else 'no'} for its own calls)"
            seconds = row.get("seconds", {}).get(step)
            how = (row.get("implementation") or {}).get(step) or ""
            lines.append(
                f"| {step} | {label} | {usage['calls']} ({calls}) | {fmt(own)} | {usage['tokens']:,} | "
                f"{usage['cost_usd']:.4f} | "
                f"{fmt(seconds, 1)} | {quality_cell(step, (row.get('quality') or {}).get(step))} | {limits} | "
                f"{within} | {how} |"
            )
    return "\n".join(lines)


def _overall(row: dict[str, Any]) -> str:
    quality = row.get("quality") or {}
    return f"{len(quality)} of {len(STEPS)} queries answered"


def markdown(rows: list[dict[str, Any]], parameters: dict[str, Any], bounds: dict[str, dict[str, float]]) -> str:
    limits = parameters["limits"]
    parts = [
        f"{parameters['rows']:,} generated product reviews (seed {parameters['seed']}; labels drawn per row: a "
        "complaint ~60%, a delivery mention ~60%, one of 8 device families, one of 5 topics, a mood and stars), "
        "asked in this workload's own wording. Queries: a complaint filter under `LIMIT "
        f"{limits['filter_limit']}`; the same filter as a cascade (`quality={CASCADE_QUALITY}`) under `LIMIT "
        f"{limits['cascade_limit']}`; complaint then delivery under `LIMIT {limits['chain_limit']}`; a same-device-"
        f"family self-join of {parameters['join_rows']} reviews in a multi-sentence wording, whole and under `LIMIT "
        f"{limits['self_join_limit']}`; {parameters['category_rows']} reviews joined with 5 topic descriptions; and, "
        f"over {parameters['sql_rows']} reviews, SQL with `avg(CASE WHEN SEM_FILTER(..) THEN 1.0 ELSE 0.0 END)` and "
        "`avg(SEM_SCORE(..))` per brand, and `GROUP BY` a `SEM_CLASSIFY` alias. Same simulated tiers for every "
        f"system over HTTP on 127.0.0.1 (latency scale {parameters['latency_scale']:g}); calls, tokens and dollars "
        "per query are the simulator's counts between the runner's snapshots (a semray join's factorization check "
        "and a cascade's calibration included). The bound of a LIMIT query: `3 x k / selectivity + one batch` "
        f"({BATCH_ROWS} rows); of the factorized join under LIMIT: `m + 3 x k / s + one batch` (`m` = its "
        f"{parameters['join_rows']} right rows, `s` = pairs each left row keeps; the selectivity column shows "
        "`s / m`). "
        "\"query's own calls\" is semray's `Result.usage` of the query; the endpoint's count beside it also holds "
        "what the plan-time checks paid (a join's factorization verification, journaled in a run of its own). The "
        "first query's wall time includes deploying semray's tiers.",
        "",
        versions_line(rows),
        "",
        "Whole runs (all queries; start-up included in wall time):",
        "",
        cost_table(rows, _overall, "answered"),
        "",
        "Per query:",
        "",
        step_table(rows, bounds),
        "",
    ]
    parts += gaps_section(rows, "query")
    return "\n".join(parts)


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    run = start(NAME, command)
    workload = prepare_reviews(
        args.out_dir, args.seed, args.latency_scale, args.rows, args.join_rows, args.category_rows, args.sql_rows
    )
    limits = {
        "filter_limit": args.filter_limit,
        "cascade_limit": args.cascade_limit,
        "chain_limit": args.chain_limit,
        "self_join_limit": args.join_limit,
    }
    extra = {"limits": limits, "cascade_quality": CASCADE_QUALITY, "skip_steps": skip_steps(args)}
    rows = run_workload(args, NAME, workload, score, extra)
    for row in rows:
        if "implementation" not in row:  # rows merged from an earlier run keep theirs
            answer = _answer_steps(row)
            row["implementation"] = {
                step: got["implementation"] for step, got in answer.items() if got.get("implementation")
            }
    bounds = limit_bounds(workload.truth, limits)
    parameters = {
        "systems": args.systems,
        "seed": args.seed,
        "latency_scale": args.latency_scale,
        "rows": args.rows,
        "join_rows": args.join_rows,
        "category_rows": args.category_rows,
        "sql_rows": args.sql_rows,
        "limits": limits,
        "skip": args.skip,
    }
    return run.result(
        "Reviews (issue 19): LIMIT queries, a cascade, factorized and category joins, SQL with SEM_* in "
        "aggregates — semray vs peers",
        parameters,
        {"rows": rows, "bounds": bounds},
        markdown(rows, parameters, bounds),
    )


def _answer_steps(row: dict[str, Any]) -> dict[str, Any]:
    """The runner's per-step answers, read back from the answer file the comparison wrote."""
    import json
    from pathlib import Path

    log = row.get("log")
    if not log:
        return {}
    path = Path(log).parent / "answer.json"
    if not path.exists():
        return {}
    steps: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")).get("steps", {})
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = workload_parser(NAME, __doc__ or NAME, systems="semray:default,lotus,palimpzest", seed=19, timeout=1200.0)
    parser.add_argument("--rows", type=int, default=1000, help="generated reviews (the LIMIT queries' input)")
    parser.add_argument("--join-rows", type=int, default=256, help="reviews in the self-join (n x n pairs)")
    parser.add_argument("--category-rows", type=int, default=320, help="reviews joined with the 5 topics")
    parser.add_argument("--sql-rows", type=int, default=200, help="reviews the SQL queries read")
    parser.add_argument("--filter-limit", type=int, default=10, help="k of the filter's LIMIT")
    parser.add_argument("--cascade-limit", type=int, default=150, help="k of the cascade's LIMIT")
    parser.add_argument("--chain-limit", type=int, default=10, help="k of the two-filter chain's LIMIT")
    parser.add_argument("--join-limit", type=int, default=20, help="k of the self-join's LIMIT")
    parser.add_argument("--skip", default="", help="comma-separated queries to leave out")
    done = rerendered(
        NAME,
        parser,
        argv,
        lambda data: markdown(data["figures"]["rows"], data["parameters"], data["figures"]["bounds"]),
    )
    return run_benchmark(NAME, parser, body, argv) if done is None else done


if __name__ == "__main__":
    sys.exit(main())
