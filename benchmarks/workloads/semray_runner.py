"""semray's side of a workload: read a spec, run each step against the simulator URL, print JSON.

    .venv/bin/python -m benchmarks.workloads.semray_runner SPEC.json

Run in a fresh process by the workload benchmarks (``measure.run_measured``), like the peers'
runners, so its Ray processes and imports are charged to it alone. Its tiers are ``openai``
backends pointed at the simulator over HTTP, so its calls are counted by the same ``/stats``
as the peers'. The response cache is off: every answer is a model call. ``config``:
``default`` runs each operator with ``tier="auto"`` (the large tier), ``small`` with
``tier="small"``, ``cascade`` makes every filter and classification a cascade at accuracy 0.9
(`Query.with_quality`), ``optimized`` lets the run measure its statistics and the optimizer choose
tiers and cascades under ``MinCost(quality=0.9)``. Each step also reports the cost model's
estimate of the plan that ran (``estimated_dollars``: low, point, high) beside what it paid.

A step semray cannot run (an operator with no lowering yet) is recorded under
``unsupported`` with the error's message; the other steps still run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.harness import MemorySampler

Step = Callable[[dict[str, Any]], dict[str, Any]]


def read_stats(base_url: str) -> dict[str, Any]:
    """The simulator's /stats now (its counters are cumulative; the benchmark takes differences per step)."""
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/stats", timeout=30) as response:  # 127.0.0.1 only
        stats: dict[str, Any] = json.loads(response.read())
    return stats


def _serving(spec: dict[str, Any]) -> Any:
    from semray.serving.config import ServingConfig, TierConfig

    if spec.get("semray_serving") == "inprocess":
        from semray.serving.simulator import SimulatorConfig

        return ServingConfig(
            small=TierConfig(backend="simulated", model=spec["models"]["small"], max_ongoing_requests=64),
            large=TierConfig(backend="simulated", model=spec["models"]["large"], max_ongoing_requests=64),
            simulator=SimulatorConfig.from_file(Path(spec["simulator_config"])),
            cache_enabled=False,
            app_prefix="semray-wl",
        )

    from semray.serving.config import Prices
    from semray.serving.simulator import SimulatorConfig

    simulated = SimulatorConfig.from_file(Path(spec["simulator_config"])).models

    def tier(model: str) -> TierConfig:
        # The simulator's price list, so semray's own accounting and its cost model count the
        # same dollars as the simulator's /stats.
        profile = simulated[model]
        prices = Prices(
            input_per_million=profile.price_in_per_million, output_per_million=profile.price_out_per_million
        )
        return TierConfig(
            backend="openai",
            model=model,
            base_url=spec["base_url"],
            max_concurrency=16,
            max_ongoing_requests=64,
            prices=prices,
        )

    return ServingConfig(
        small=tier(spec["models"]["small"]),
        large=tier(spec["models"]["large"]),
        cache_enabled=False,
        app_prefix="semray-wl",
    )


def _tier(spec: dict[str, Any]) -> Any:
    return "small" if spec["config"] == "small" else "auto"


CASCADE_QUALITY = 0.9
"""The target of the ``cascade`` config (every filter and classification a cascade at accuracy 0.9)
and the quality bound of the ``optimized`` config (``MinCost(quality=0.9)`` on measured statistics)."""


def _execute(spec: dict[str, Any], query: Any) -> tuple[Any, dict[str, Any]]:
    """Run ``query`` in the spec's config; the result and the cost model's estimate of the plan that ran.

    ``cascade``: `Query.with_quality` (extractions and joins cannot cascade and stay on the large
    tier). ``optimized``: the run measures its statistics and the optimizer chooses tiers and
    cascades under ``MinCost(quality=0.9)``. The estimate is made with what the planner knew: the
    sources' row counts, plus the measured statistics for ``optimized`` (defaults elsewhere).
    """
    from semray.cost_model.cardinality import source_statistics
    from semray.cost_model.plan_cost import estimate_plan
    from semray.cost_model.policies import MinCost

    if spec["config"] == "cascade":
        query = query.with_quality(CASCADE_QUALITY)
    if spec["config"] == "optimized":
        result = query.execute(policy=MinCost(quality=CASCADE_QUALITY), measure=True)
    else:
        result = query.execute()
    plan = result.plan if result.plan is not None else query.optimized().plan
    statistics = source_statistics(plan)
    if result.statistics is not None:
        statistics = statistics.merged(result.statistics)
    estimate = estimate_plan(plan, statistics, query._profiles())
    dollars = estimate.dollars
    return result, {
        "dollars": [dollars.low, dollars.value, dollars.high],
        "tiers": sorted(set(estimate.tiers.values())),
    }


def _source(spec: dict[str, Any], name: str) -> Any:
    import semray
    from semray.settings import Settings

    settings = Settings(state_dir=Path(spec["state_dir"]), num_cpus=2)
    return semray.read_json(spec["inputs"][name], settings=settings).with_serving(_serving(spec))


def _usage(ran: tuple[Any, dict[str, Any]]) -> dict[str, Any]:
    result, estimate = ran
    usage = result.usage
    return {
        "calls": usage.calls,
        "tokens_in": usage.tokens_in,
        "tokens_out": usage.tokens_out,
        "dollars": usage.dollars,
        "estimated_dollars": estimate["dollars"],
        "tiers": estimate["tiers"],
    }


# enron -----------------------------------------------------------------------------------------
def enron_steps(spec: dict[str, Any]) -> dict[str, Step]:
    text = spec["instructions"]

    def pipeline(_: dict[str, Any]) -> dict[str, Any]:
        tier = _tier(spec)
        query = (
            _source(spec, "emails")
            .sem_filter("Email:\n{text}\n\n" + text["fraud"], tier=tier)
            .sem_filter("Email:\n{text}\n\n" + text["not_news"], tier=tier)
            .sem_extract(
                f"Email:\n{{text}}\n\nsender: {text['sender']}; subject: {text['subject']}",
                "sender: text, subject: text",
                tier=tier,
            )
            .select("filename", "sender", "subject")
        )
        ran = _execute(spec, query)
        rows = ran[0].table.to_pylist()
        return {
            "kept": [row["filename"] for row in rows],
            "extracted": {row["filename"]: {"sender": row["sender"], "subject": row["subject"]} for row in rows},
            "semray_usage": _usage(ran),
        }

    return {"pipeline": pipeline}


# medical ---------------------------------------------------------------------------------------
def medical_steps(spec: dict[str, Any]) -> dict[str, Step]:
    text, labels = spec["instructions"], spec["labels"]

    def classify(_: dict[str, Any]) -> dict[str, Any]:
        query = _source(spec, "symptoms").sem_classify(
            "Symptoms: {symptoms}\n\n" + text["classify"], labels, output="diagnosis", tier=_tier(spec)
        )
        ran = _execute(spec, query.select("symptom_id", "diagnosis"))
        rows = ran[0].table.to_pylist()
        return {"diagnosis": {str(r["symptom_id"]): r["diagnosis"] for r in rows}, "semray_usage": _usage(ran)}

    def infection(_: dict[str, Any]) -> dict[str, Any]:
        query = _source(spec, "symptoms").sem_filter("Symptoms: {symptoms}\n\n" + text["infection"], tier=_tier(spec))
        ran = _execute(spec, query.select("symptom_id"))
        ids = [str(v) for v in ran[0].table.column("symptom_id").to_pylist()]
        return {"infection": ids, "semray_usage": _usage(ran)}

    def groupby(_: dict[str, Any]) -> dict[str, Any]:
        joined = _source(spec, "symptoms").join(_source(spec, "patients"), "l.patient_id = r.patient_id")
        query = joined.sem_classify(
            "Symptoms: {symptoms}\n\n" + text["classify"], labels, output="diagnosis", tier=_tier(spec)
        ).aggregate(by="diagnosis", n="count(*)", avg_age="avg(age)")
        ran = _execute(spec, query)
        rows = ran[0].table.to_pylist()
        return {
            "groups": {str(r["diagnosis"]): int(r["n"]) for r in rows},
            "avg_age": {str(r["diagnosis"]): float(r["avg_age"]) for r in rows},
            "semray_usage": _usage(ran),
        }

    def self_join(_: dict[str, Any]) -> dict[str, Any]:
        left = _source(spec, "join_sample").select("symptom_id", "symptoms")
        right = _source(spec, "join_sample").select("symptom_id", "symptoms")
        query = left.sem_join(
            right, "Patient 1: {l.symptoms}\nPatient 2: {r.symptoms}\n\n" + text["same"], tier=_tier(spec)
        )
        ran = _execute(spec, query)
        rows = ran[0].table.to_pylist()
        pairs = [[r["symptom_id"], r["symptom_id_right"]] for r in rows]
        return {"same_pairs": pairs, "semray_usage": _usage(ran)}

    return {"classify": classify, "infection": infection, "groupby": groupby, "self_join": self_join}


# scaling ---------------------------------------------------------------------------------------
def scaling_steps(spec: dict[str, Any]) -> dict[str, Step]:
    def scan_filter(_: dict[str, Any]) -> dict[str, Any]:
        query = _source(spec, "tickets").sem_filter(
            "Ticket: {text}\n\n" + spec["instructions"]["filter"], tier=_tier(spec)
        )
        ran = _execute(spec, query.select("ticket_id"))
        kept = [str(v) for v in ran[0].table.column("ticket_id").to_pylist()]
        return {"kept": kept, "semray_usage": _usage(ran)}

    return {"filter": scan_filter}


# reviews ---------------------------------------------------------------------------------------
def _ids(ran: tuple[Any, dict[str, Any]], column: str = "review_id") -> list[str]:
    return [str(v) for v in ran[0].table.column(column).to_pylist()]


def reviews_steps(spec: dict[str, Any]) -> dict[str, Step]:
    """The reviews workload (``benchmarks/workloads/reviews.py``): LIMIT queries, joins, SQL."""
    from semray.readers import sql as compile_query

    text, limits = spec["instructions"], spec["limits"]
    complaint = "Review: {text}\n\n" + text["complaint"]
    shipping = "Review: {text}\n\n" + text["shipping"]

    def limited(query: Any, k: int) -> dict[str, Any]:
        ran = _execute(spec, query.select("review_id").limit(k))
        return {"kept": _ids(ran), "semray_usage": _usage(ran)}

    def filter_limit(_: dict[str, Any]) -> dict[str, Any]:
        return limited(_source(spec, "reviews").sem_filter(complaint, tier=_tier(spec)), limits["filter_limit"])

    def cascade_limit(_: dict[str, Any]) -> dict[str, Any]:
        query = _source(spec, "reviews").sem_filter(complaint).with_quality(spec["cascade_quality"])
        return limited(query, limits["cascade_limit"])

    def chain_limit(_: dict[str, Any]) -> dict[str, Any]:
        query = _source(spec, "reviews").sem_filter(complaint, tier=_tier(spec)).sem_filter(shipping, tier=_tier(spec))
        return limited(query, limits["chain_limit"])

    def family_join(k: int | None) -> dict[str, Any]:
        left = _source(spec, "join_sample").select("review_id", "text")
        right = _source(spec, "join_sample").select("review_id", "text")
        query = left.sem_join(right, text["same_family"], tier=_tier(spec))
        query = query.select("review_id", "review_id_right")
        ran = _execute(spec, query if k is None else query.limit(k))
        rows = ran[0].table.to_pylist()
        plan = ran[0].plan
        return {
            "pairs": [[r["review_id"], r["review_id_right"]] for r in rows],
            "semray_usage": _usage(ran),
            "implementation": _join_implementation(plan),
        }

    def self_join(_: dict[str, Any]) -> dict[str, Any]:
        return family_join(None)

    def self_join_limit(_: dict[str, Any]) -> dict[str, Any]:
        return family_join(limits["self_join_limit"])

    def category_join(_: dict[str, Any]) -> dict[str, Any]:
        left = _source(spec, "category_sample").select("review_id", "text")
        right = _source(spec, "categories").select("description")
        query = left.sem_join(right, text["category"], tier=_tier(spec)).select("review_id", "description")
        ran = _execute(spec, query)
        rows = ran[0].table.to_pylist()
        return {
            "pairs": [[r["review_id"], r["description"]] for r in rows],
            "semray_usage": _usage(ran),
            "implementation": _join_implementation(ran[0].plan),
        }

    def sql(query_text: str) -> Any:
        return compile_query(query_text, {"reviews": _source(spec, "sql_sample")}).with_serving(_serving(spec))

    def sql_aggregate(_: dict[str, Any]) -> dict[str, Any]:
        query = sql(
            "SELECT brand, "
            f"avg(CASE WHEN SEM_FILTER('Review: {{text}} -- {_quoted(text['complaint'])}') THEN 1.0 ELSE 0.0 END)"
            " AS complaint_share, "
            f"avg(SEM_SCORE('Review: {{text}} -- {_quoted(text['stars'])}?', 1, 5)) AS stars "
            "FROM reviews GROUP BY brand ORDER BY brand"
        )
        ran = _execute(spec, query)
        rows = ran[0].table.to_pylist()
        return {
            "complaint_share": {r["brand"]: float(r["complaint_share"]) for r in rows},
            "stars": {r["brand"]: float(r["stars"]) for r in rows},
            "semray_usage": _usage(ran),
        }

    def sql_group_by(_: dict[str, Any]) -> dict[str, Any]:
        moods = "|".join(spec["moods"])
        query = sql(
            f"SELECT SEM_CLASSIFY('Review: {{text}} -- {_quoted(text['mood'])}', '{moods}') AS mood, count(*) AS n "
            "FROM reviews GROUP BY mood ORDER BY mood"
        )
        ran = _execute(spec, query)
        return {
            "mood_counts": {str(r["mood"]): int(r["n"]) for r in ran[0].table.to_pylist()},
            "semray_usage": _usage(ran),
        }

    return {
        "filter_limit": filter_limit,
        "cascade_limit": cascade_limit,
        "chain_limit": chain_limit,
        "self_join": self_join,
        "self_join_limit": self_join_limit,
        "category_join": category_join,
        "sql_aggregate": sql_aggregate,
        "sql_group_by": sql_group_by,
    }


def _quoted(text: str) -> str:
    """An instruction inside a SQL string literal (single quotes doubled)."""
    return text.replace("'", "''")


def _join_implementation(plan: Any) -> str | None:
    """How the plan that ran executes its semantic join: ``factorized (...)``, ``nested``, ..."""
    from semray.operators.plan_paths import operator_paths
    from semray.operators.semantic import SemJoin

    for node in operator_paths(plan).values() if plan is not None else ():
        if isinstance(node, SemJoin):
            if node.right_labels:
                return "factorized: left rows classified into the right values"
            if node.factor:
                return f"factorized: {node.factor} {node.relation}"
            return str(node.implementation)
    return None


WORKLOADS: dict[str, Callable[[dict[str, Any]], dict[str, Step]]] = {
    "enron": enron_steps,
    "medical": medical_steps,
    "scaling": scaling_steps,
    "reviews": reviews_steps,
}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Every step of the spec's workload; each step's answer, seconds, and why it could not run."""
    from semray.cluster.connect import connect, shutdown
    from semray.errors import LoweringError, PlanError
    from semray.settings import Settings

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    answer: dict[str, Any] = {"steps": {}, "seconds": {}, "unsupported": {}, "errors": {}}
    started = time.perf_counter()
    settings = Settings(state_dir=Path(spec["state_dir"]), num_cpus=2)
    for attempt in range(3):  # on a crowded 2-core machine the raylet can miss Ray's start-up deadline
        try:
            connect(settings)
            break
        except Exception as error:
            answer.setdefault("notes", {})[f"ray_start_{attempt + 1}"] = f"{type(error).__name__}: {error}"[:300]
            shutdown()
            if attempt == 2:
                raise
    answer["seconds"]["startup"] = round(time.perf_counter() - started, 2)
    answer["version"] = "semray " + metadata.version("semray")
    try:
        with MemorySampler(object_store=True, interval=1.0, pss=False) as memory:  # PSS: run_measured
            for name, step in WORKLOADS[spec["workload"]](spec).items():
                if name in spec.get("skip_steps", ()):
                    continue
                began = time.perf_counter()
                try:
                    answer["steps"][name] = step(spec)
                except (LoweringError, PlanError, NotImplementedError) as error:
                    answer["unsupported"][name] = f"not executable in semray yet: {type(error).__name__}: {error}"
                except Exception as error:  # a failed step is a result to report; the next step still runs
                    answer["errors"][name] = f"{type(error).__name__}: {error}"
                answer["seconds"][name] = round(time.perf_counter() - began, 2)
                if spec.get("base_url"):
                    answer.setdefault("stats_after", {})[name] = read_stats(spec["base_url"])
        answer["object_store_peak_bytes"] = memory.peak().object_store_bytes
        answer["object_store_error"] = memory.store_error
    finally:
        shutdown()
    return answer


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    sys.stdout.write(json.dumps(run(spec)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
