"""The grammar validator against injected faults: detection rate, and false alarms on valid plans.

Generates three small tables (products, reviews, customers) under the scratch folder, writes
eight valid gold plans over them (relational and semantic), and injects faults into each
(``semray.planner.agents.faults``: wrong columns, missing operators, wrong types, wrong join
keys, wrong aggregates, wrong ``{column}`` template references) with many seeds until there are
at least ``--faults`` grammar-visible ones. A fault is detected when the validator reports an
issue. Faults only a judge of meaning can see (``avg`` swapped for ``sum``, a dropped filter)
are counted apart. False alarms: issues on the gold plans and on valid variants of them
(other output names, constants and limits).

    python -m benchmarks.validator
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from semray.planner.agents import SourceCatalog, check_plan_document
from semray.planner.agents.faults import FAULT_KINDS, inject


def write_tables(folder: Path, rows: int = 60) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    words = ["bright", "broken", "fast", "slow", "sturdy", "cheap", "loud", "quiet"]
    paths = {name: folder / f"{name}.csv" for name in ("products", "reviews", "customers")}
    paths["products"].write_text(
        "id,name,price,category\n"
        + "".join(
            f"{i},item{i},{rng.uniform(5, 90):.2f},{rng.choice(['home', 'garden', 'toys'])}\n" for i in range(1, 11)
        ),
        encoding="utf-8",
    )
    paths["customers"].write_text(
        "customer_id,city,vip\n"
        + "".join(
            f"{i},{rng.choice(['Oslo', 'Lima', 'Pune'])},{rng.choice(['true', 'false'])}\n" for i in range(1, 21)
        ),
        encoding="utf-8",
    )
    paths["reviews"].write_text(
        "review_id,product_id,customer_id,review,rating\n"
        + "".join(
            f"{i},{rng.randint(1, 10)},{rng.randint(1, 20)},{' '.join(rng.sample(words, 3))},{rng.randint(1, 5)}\n"
            for i in range(rows)
        ),
        encoding="utf-8",
    )
    return paths


def gold_plans(catalog: SourceCatalog) -> list[dict[str, Any]]:
    def scan(name: str) -> dict[str, Any]:
        profile = catalog.describe(name)
        return {
            "op": "scan",
            "source": {"kind": profile.kind, "path": profile.uri, "options": {}},
            "source_schema": {"columns": [{"name": c.name, "type": c.type} for c in profile.columns]},
        }

    def join(left: dict[str, Any], right: dict[str, Any], on: str) -> dict[str, Any]:
        return {"op": "join", "left": left, "right": right, "on": on}

    reviews_products = join(scan("reviews"), scan("products"), "l.product_id = r.id")
    plans = [
        {
            "op": "aggregate",
            "keys": ["name"],
            "aggs": [{"name": "avg_rating", "expr": "avg(rating)"}],
            "input": reviews_products,
        },
        {
            "op": "limit",
            "count": 5,
            "input": {
                "op": "sort",
                "keys": [{"column": "price", "descending": True}],
                "input": {"op": "filter", "predicate": "category = 'home'", "input": scan("products")},
            },
        },
        {
            "op": "aggregate",
            "keys": ["city"],
            "aggs": [{"name": "n", "expr": "count(*)"}, {"name": "best", "expr": "max(rating)"}],
            "input": join(scan("reviews"), scan("customers"), "l.customer_id = r.customer_id"),
        },
        {
            "op": "project",
            "exprs": [{"name": "review", "expr": "review"}, {"name": "stars", "expr": "rating * 1.0"}],
            "input": {"op": "sem_filter", "instruction": "{review} complains about quality", "input": scan("reviews")},
        },
        {
            "op": "aggregate",
            "keys": ["label"],
            "aggs": [{"name": "mean_price", "expr": "avg(price)"}],
            "input": {
                "op": "sem_classify",
                "instruction": "The review {review} is about",
                "labels": ["build", "speed"],
                "input": reviews_products,
            },
        },
        {
            "op": "filter",
            "predicate": "score >= 4",
            "input": {
                "op": "sem_map",
                "instruction": "Rate how happy {review} sounds",
                "output": "score",
                "output_type": "int",
                "lo": 1.0,
                "hi": 5.0,
                "input": scan("reviews"),
            },
        },
        {
            "op": "aggregate",
            "keys": ["category"],
            "aggs": [{"name": "total", "expr": "sum(rating)"}],
            "input": {"op": "filter", "predicate": "rating >= 3", "input": reviews_products},
        },
        {
            "op": "sem_agg",
            "instruction": "Summarise the complaints in {review}",
            "keys": ["name"],
            "input": {
                "op": "sem_extract",
                "instruction": "From {review}",
                "fields": [{"name": "defect", "type": "text"}],
                "input": reviews_products,
            },
        },
    ]
    return [{"version": 1, "plan": plan} for plan in plans]


def valid_variants(document: dict[str, Any], rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Valid changes a careful model might make: other output names, constants and limits."""
    variants = []
    for number in range(count):
        variant = copy.deepcopy(document)
        text = json.dumps(variant)
        for old, new in (
            ('"avg_rating"', f'"mean_{number}"'),
            ('"total"', f'"sum_{number}"'),
            ("rating >= 3", f"rating >= {rng.randint(1, 5)}"),
            ('"count": 5', f'"count": {number + 1}'),
            ("score >= 4", f"score >= {rng.randint(1, 5)}"),
            ('"mean_price"', f'"price_{number}"'),
        ):
            text = text.replace(old, new)
        variants.append(json.loads(text))
    return variants


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    catalog = SourceCatalog.from_paths(write_tables(args.out_dir / "data"))
    names = ("products", "reviews", "customers")
    plans = gold_plans(catalog)
    rng = random.Random(args.seed)
    tally: dict[str, dict[str, int]] = defaultdict(lambda: {"injected": 0, "detected": 0})
    semantic = {"injected": 0, "flagged_by_grammar": 0}
    missed: list[str] = []
    clock = time.perf_counter()
    checks = 0
    while sum(item["injected"] for item in tally.values()) < args.faults:
        for document in plans:
            for kind in FAULT_KINDS:
                fault = inject(document, kind, rng)
                if fault is None:
                    continue
                found = not check_plan_document(fault.document, catalog, names).ok
                checks += 1
                if fault.detectable == "semantic":
                    semantic["injected"] += 1
                    semantic["flagged_by_grammar"] += found
                    continue
                tally[kind]["injected"] += 1
                tally[kind]["detected"] += found
                if not found:
                    missed.append(fault.description)
    valid = [*plans, *(v for document in plans for v in valid_variants(document, rng, args.variants))]
    alarms = [json.dumps(v)[:80] for v in valid if not check_plan_document(v, catalog, names).ok]
    checks += len(valid)
    seconds = time.perf_counter() - clock
    injected = sum(item["injected"] for item in tally.values())
    detected = sum(item["detected"] for item in tally.values())
    rows = [
        f"| {kind} | {item['injected']} | {item['detected']} | {item['detected'] / item['injected']:.1%} |"
        for kind, item in sorted(tally.items())
    ]
    markdown = "\n".join(
        [
            f"{len(plans)} valid gold plans over three generated tables (relational and semantic operators); faults "
            f"injected with seed {args.seed} (`semray/planner/agents/faults.py`), each checked by "
            "`check_plan_document` (no model). Detected = at least one issue reported.",
            "",
            "| fault kind (grammar-visible) | injected | detected | rate |",
            "| --- | --- | --- | --- |",
            *rows,
            f"| **all** | {injected} | {detected} | {detected / injected:.1%} |",
            "",
            "Faults only a judge of meaning can see (aggregate function swapped, filter dropped): "
            f"{semantic['injected']} injected, {semantic['flagged_by_grammar']} flagged by the grammar validator "
            "(expected 0: these are the semantic judges' job).",
            "",
            f"False alarms on valid plans: {len(alarms)} of {len(valid)} ({len(plans)} gold plans and "
            f"{len(valid) - len(plans)} valid variants). {checks} checks in {seconds:.2f} s "
            f"({1000 * seconds / checks:.2f} ms each).",
            *(["", "Missed: " + "; ".join(missed[:10])] if missed else []),
        ]
    )
    return BenchmarkResult(
        name="validator",
        title="Plan validator: injected faults detected, false alarms on valid plans",
        command=command,
        parameters={"faults": args.faults, "variants": args.variants, "seed": args.seed},
        figures={
            "kinds": dict(tally),
            "injected": injected,
            "detected": detected,
            "semantic": semantic,
            "valid_plans": len(valid),
            "false_alarms": len(alarms),
            "missed": missed,
            "seconds": seconds,
        },
        markdown=markdown,
        started_at=started,
        load_before=load,
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("validator", "Detection rate and false alarms of the plan validator.")
    parser.add_argument("--faults", type=int, default=240, help="grammar-visible faults to inject (at least)")
    parser.add_argument("--variants", type=int, default=10, help="valid variants per gold plan")
    parser.add_argument("--seed", type=int, default=0)
    return run_benchmark("validator", parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
