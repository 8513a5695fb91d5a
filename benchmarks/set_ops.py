"""Set-level semantic operators on the medical texts: SemJoin implementations, SemAgg, SemTopK.

    .venv/bin/python -m benchmarks.set_ops [--sizes 100 300 1000] [--nested-max 300] [--error-rate 0.05]

* **SemJoin**: a self-join of the first N symptom texts, "{l.symptoms} and {r.symptoms} have the
  same diagnosis", with each implementation (nested loop, embedding blocking + verification,
  factorized), through semray on a local Ray with a zero-latency simulated large tier (error
  rate ``--error-rate``). Reported: model calls, tokens, wall time, precision / recall / F1 of
  the pairs against the labels, and for blocking the share of true pairs among its candidates
  (blocking recall, from the same embedding model, in-process). Nested loops above
  ``--nested-max`` rows are **extrapolated** from the largest measured size (calls exactly
  N squared less duplicate prompts; time linearly per call; quality as measured), and marked so.
* **Factorization**: self-joins of the first ``--factor-rows`` texts whose predicate is worded freely
  (``WORDINGS``), with the check off (``--factor-before``: ``with_join_factorization(None)``) and as a
  plain ``execute()`` runs them under the default ``Settings.join_factorization``, with the
  verification's calls (in the query's calls, and apart), then the same join under a LIMIT, whose
  check verdict is journaled per join (0 verification calls); ``--only-factorization`` runs only
  these. The ``auto`` join rows show rule 7 factorizing the fixed "same diagnosis" wording.
* **SemAgg**: "how many patients have each diagnosis" and "the most common diagnosis" over N
  rows with a 4,096-token context (hierarchical above ~100 rows), scored against the labels.
* **SemTopK**: the partial quicksort on the simulator in-process (no Ray), "the oldest patient"
  (the ``age`` label), precision@k against the labels at several comparator error rates, and
  comparisons against n log2 k.

The response cache is off: every call is counted.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from benchmarks.harness import (
    BenchmarkResult,
    benchmark_parser,
    load_average,
    now_iso,
    require_shared_data,
    run_benchmark,
)

NAME = "set_ops"
JOIN = "{l.symptoms} and {r.symptoms} have the same diagnosis"
COUNTS = "How many patients have each diagnosis? {symptoms}"
COMMON = "What is the most common diagnosis among {symptoms}?"
RANK = "the oldest patient described by {symptoms}"
WORDINGS = {
    "same": (
        "Two patient notes follow. First note: {l.symptoms} Second note: {r.symptoms} "
        "Would a doctor reading them give both patients the same diagnosis? Answer yes or no."
    ),
    "different": (
        "You are shown the notes of two patients.\n\nPatient A: {l.symptoms}\n\nPatient B: {r.symptoms}\n\n"
        "Do patients A and B have different diagnoses? Answer yes or no."
    ),
}
"""Free-form pair predicates of one property (rule 7 cannot read them; the plan-time choice can)."""


def load_medical(folder: Path) -> pa.Table:
    """symptom_id, symptoms, patient_id and the labels (text_diagnosis, age), in file order."""
    texts = pa_csv.read_csv(folder / "text_symptoms_data.csv")
    labels = pa_csv.read_csv(folder / "patient_data_with_labels.csv").select(["patient_id", "text_diagnosis", "age"])
    order = texts.append_column("_order", pa.array(range(texts.num_rows), pa.int64()))
    return order.join(labels, "patient_id").sort_by("_order").drop_columns(["_order"])


def simulator_config(table: pa.Table, error_rate: float, compare_error: float = 0.0) -> Any:
    from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec

    tasks = [
        TaskSpec(name="diagnosis", kind="label", label_column="text_diagnosis", keywords=("diagnosis", "diagnoses")),
        TaskSpec(
            name="different_diagnosis",
            kind="pair",
            label_column="text_diagnosis",
            relation="not_equal",
            keywords=("different diagnoses",),
            null_values=("none",),
        ),
        TaskSpec(
            name="same_diagnosis",
            kind="pair",
            label_column="text_diagnosis",
            keywords=("same diagnosis",),
            null_values=("none",),
        ),
        TaskSpec(
            name="diagnosis_counts",
            kind="aggregate",
            label_column="text_diagnosis",
            keywords=("how many", "each diagnosis"),
        ),
        TaskSpec(
            name="common_diagnosis",
            kind="aggregate",
            label_column="text_diagnosis",
            statistic="most_common",
            keywords=("most common diagnosis",),
        ),
        TaskSpec(name="oldest", kind="pair", label_column="age", relation="greater", keywords=("oldest patient",)),
    ]
    return SimulatorConfig.from_labels(
        table,
        key_column="symptom_id",
        text_columns=["symptoms"],
        tasks=tasks,
        dataset="symptoms",
        models={
            "sim-large": ModelProfile(error_rate=error_rate, max_concurrency=64),
            "sim-compare": ModelProfile(error_rate=compare_error, max_concurrency=64),
        },
    )


def true_pairs(table: pa.Table) -> set[tuple[int, int]]:
    by_label: dict[str, list[int]] = {}
    for key, label in zip(
        table.column("symptom_id").to_pylist(), table.column("text_diagnosis").to_pylist(), strict=True
    ):
        if label is not None and str(label).strip().lower() != "none":
            by_label.setdefault(str(label).strip().lower(), []).append(key)
    return {(a, b) for keys in by_label.values() for a in keys for b in keys}


def quality(found: set[tuple[int, int]], truth: set[tuple[int, int]]) -> dict[str, float]:
    hits = len(found & truth)
    precision = hits / len(found) if found else 1.0
    recall = hits / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4), "pairs": len(found)}


def blocking_recall_of(table: pa.Table, truth: set[tuple[int, int]]) -> tuple[float | None, int]:
    """Blocking recall of the candidates the blocked join keeps (same model, same block size)."""
    from semray.pipeline.lowering.set_ops import block_size
    from semray.pipeline.workers.blocking import blocking_recall, nearest
    from semray.serving.backends.embedder import SentenceEmbedder
    from semray.serving.config import ServingConfig

    vectors = SentenceEmbedder(ServingConfig().embedding).embed(table.column("symptoms").to_pylist())
    per_row = block_size(table.num_rows)
    chosen = nearest(vectors, vectors, per_row)
    keys = table.column("symptom_id").to_pylist()
    candidates = {(keys[i], keys[j]) for i, row in enumerate(chosen.tolist()) for j in row}
    return blocking_recall(candidates, truth), per_row


def run_joins(args: argparse.Namespace, medical: pa.Table, settings: Any, figures: dict[str, Any]) -> None:
    import semray
    from semray.serving.config import ServingConfig, TierConfig

    joins: list[dict[str, Any]] = []
    figures["joins"] = joins
    for size in args.sizes:
        table = medical.slice(0, size)
        serving = ServingConfig(
            simulator=simulator_config(table, args.error_rate),
            large=TierConfig(backend="simulated", model="sim-large", max_ongoing_requests=64),
            cache_enabled=False,
            app_prefix="semray-bench",
        )
        truth = true_pairs(table)
        inputs = table.select(["symptom_id", "symptoms"])
        recall, per_row = blocking_recall_of(table, truth)
        distinct = len(set(table.column("symptoms").to_pylist()))
        for implementation in ("nested", "blocked", "factorized", "auto"):
            entry: dict[str, Any] = {"rows": size, "implementation": implementation}
            if implementation == "nested" and size > args.nested_max:
                entry.update(_extrapolated(joins, size))
                joins.append(entry)
                continue
            query = semray.from_arrow(inputs, "medical", settings=settings).with_serving(serving)
            started = time.perf_counter()
            result = query.sem_join(query, JOIN, implementation).execute()  # type: ignore[arg-type]
            entry["seconds"] = round(time.perf_counter() - started, 2)
            found = set(
                zip(
                    result.table.column("symptom_id").to_pylist(),
                    result.table.column("symptom_id_right").to_pylist(),
                    strict=True,
                )
            )
            entry.update(quality(found, truth))
            usage = result.usage
            entry.update(calls=usage.calls, tokens_in=usage.tokens_in, tokens_out=usage.tokens_out, measured=True)
            entry["distinct_texts"] = distinct
            if implementation == "blocked":
                entry["blocking_recall"] = None if recall is None else round(recall, 4)
                entry["candidates_per_row"] = per_row
            joins.append(entry)
            print(entry, flush=True)


def different_pairs(table: pa.Table) -> set[tuple[int, int]]:
    """Ordered pairs of labelled rows whose diagnoses differ."""
    labels = {
        key: str(label).strip().lower()
        for key, label in zip(
            table.column("symptom_id").to_pylist(), table.column("text_diagnosis").to_pylist(), strict=True
        )
        if label is not None and str(label).strip().lower() != "none"
    }
    return {(a, b) for a in labels for b in labels if labels[a] != labels[b]}


def run_factorization(args: argparse.Namespace, medical: pa.Table, settings: Any, figures: dict[str, Any]) -> None:
    """Self-joins in free-form wording: the plan as written with the check turned off (before:
    ``with_join_factorization(None)``), as a plain ``execute()`` runs it under the default
    ``Settings.join_factorization`` (after: the run checks and factorizes; the check's calls are
    in ``Result.usage`` and shown apart as ``Result.factorization_check``), and the same join again
    under a LIMIT (repeated: the check's verdict is the join's, journaled, so it pays no check call)."""
    import semray
    from semray.operators import SemJoin, walk
    from semray.pipeline.runs.plan_time.join_factorization import FactorizationChoice
    from semray.pipeline.runs.plan_time.join_factorization_run import journaled_factorization
    from semray.planner.rules.factorize_semantic_joins import factorize_semantic_joins
    from semray.serving.config import ServingConfig, TierConfig

    table = medical.slice(0, args.factor_rows)
    serving = ServingConfig(
        simulator=simulator_config(table, args.error_rate),
        large=TierConfig(backend="simulated", model="sim-large", max_ongoing_requests=64),
        cache_enabled=False,
        app_prefix="semray-bench",
    )
    inputs = table.select(["symptom_id", "symptoms"])
    truths = {"same": true_pairs(table), "different": different_pairs(table)}
    rows: list[dict[str, Any]] = []
    figures["factorization"] = rows
    target = settings.join_factorization or FactorizationChoice().target
    for name, wording in WORDINGS.items():
        query = semray.from_arrow(inputs, "medical", settings=settings).with_serving(serving)
        joined = query.sem_join(query, wording)
        runs: list[tuple[str, Any]] = [("before", joined.with_join_factorization(None))] if args.factor_before else []
        runs += [("after", joined), (f"repeated (LIMIT {REPEAT_LIMIT})", joined.limit(REPEAT_LIMIT))]
        for stage, planned in runs:
            started = time.perf_counter()
            result = planned.execute()
            seconds = round(time.perf_counter() - started, 2)
            found = set(
                zip(
                    result.table.column("symptom_id").to_pylist(),
                    result.table.column("symptom_id_right").to_pylist(),
                    strict=True,
                )
            )
            joins = [node for node in walk(result.plan) if isinstance(node, SemJoin)]
            ran = ",".join(join.implementation for join in joins)
            check = result.factorization_check.calls
            entry = {"rows": args.factor_rows, "wording": name, "plan": stage, "calls": result.usage.calls, "ran": ran}
            entry.update(verification_calls=check, seconds=seconds)
            entry.update(quality(found, truths[name]) if "LIMIT" not in stage else {})
            if stage == "after":
                plan = factorize_semantic_joins(joined.plan)
                decision, _ = journaled_factorization(plan, settings, serving, FactorizationChoice(target))
                entry.update(decision=decision.explain())
            rows.append(entry)
            print(entry, flush=True)


REPEAT_LIMIT = 20
"""The LIMIT of the repeated factorization query: the same join, its check's verdict journaled."""


def _extrapolated(joins: list[dict[str, Any]], size: int) -> dict[str, Any]:
    measured = [entry for entry in joins if entry["implementation"] == "nested" and entry.get("measured")]
    base = max(measured, key=lambda entry: entry["rows"])
    scale = (size / base["rows"]) ** 2
    calls = round(base["calls"] * scale)
    return {
        "measured": False,
        "extrapolated_from_rows": base["rows"],
        "calls": calls,
        "tokens_in": round(base["tokens_in"] * scale),
        "tokens_out": round(base["tokens_out"] * scale),
        "seconds": round(base["seconds"] * scale, 1),
        "precision": base["precision"],
        "recall": base["recall"],
        "f1": base["f1"],
    }


def run_aggregates(args: argparse.Namespace, medical: pa.Table, settings: Any, figures: dict[str, Any]) -> None:
    import semray
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.simulator.aggregates import format_counts, most_common, partial_counts

    rows: list[dict[str, Any]] = []
    figures["aggregates"] = rows
    for size in args.agg_sizes:
        table = medical.slice(0, size)
        serving = ServingConfig(
            simulator=simulator_config(table, args.error_rate),
            large=TierConfig(backend="simulated", model="sim-large", max_ongoing_requests=64),
            cache_enabled=False,
            app_prefix="semray-bench",
        )
        labels = Counter(str(label) for label in table.column("text_diagnosis").to_pylist())
        query = semray.from_arrow(table.select(["symptom_id", "symptoms"]), "medical", settings=settings).with_serving(
            serving
        )
        started = time.perf_counter()
        counted = query.sem_agg(COUNTS).execute()
        answer = counted.table.column("answer").to_pylist()[0] or ""
        got = partial_counts(answer, list(labels))
        common = query.sem_agg(COMMON).execute()
        seconds = round(time.perf_counter() - started, 2)
        rows.append(
            {
                "rows": size,
                "counts_exact": got == labels,
                "counts_abs_error": sum(abs(got[name] - labels[name]) for name in labels | got),
                "classes_exact": sum(1 for name in labels if got[name] == labels[name]),
                "classes": len(labels),
                "most_common_true": most_common(labels),
                "most_common_answer": common.table.column("answer").to_pylist()[0],
                "calls_counts": counted.usage.calls,
                "calls_common": common.usage.calls,
                "seconds": seconds,
                "truth_preview": format_counts(labels).splitlines()[:3],
            }
        )
        print(rows[-1], flush=True)


def run_topk(args: argparse.Namespace, medical: pa.Table, figures: dict[str, Any]) -> None:
    """The comparator on the simulator in-process: the prompts the operator sends, no Ray."""
    from semray.pipeline.workers.top_k import partial_quicksort
    from semray.serving.prompts.set_ops import comparison_request, plain_question
    from semray.serving.simulator import Simulator

    table = medical.slice(0, args.topk_rows)
    texts = table.column("symptoms").to_pylist()
    ages = table.column("age").to_pylist()
    criterion = plain_question(RANK)
    k = args.k
    threshold = sorted(ages, reverse=True)[k - 1]
    results: list[dict[str, Any]] = []
    for error in args.compare_errors:
        simulator = Simulator(simulator_config(table, args.error_rate, compare_error=error))

        def better(pairs: list[tuple[int, int]], simulator: Simulator = simulator) -> list[bool]:
            answers = []
            for a, b in pairs:
                request = comparison_request(criterion, texts[a], texts[b], request_id=f"{a}>{b}")
                text = simulator.answer("sim-compare", f"{request.system}\n{request.prompt}").text
                answers.append(text.strip().lower().startswith("yes"))
            return answers

        order, asked = partial_quicksort(list(range(table.num_rows)), k, better)
        precision = sum(1 for index in order if ages[index] >= threshold) / k
        results.append(
            {
                "comparator_error": error,
                "precision_at_k": round(precision, 3),
                "comparisons": asked,
                "n_log2_k": round(table.num_rows * math.log2(k)),
            }
        )
        print(results[-1], flush=True)
    figures["topk"] = {"rows": table.num_rows, "k": k, "runs": results}


def figures_from_log(args: argparse.Namespace) -> tuple[dict[str, Any], str, str]:
    """Figures of an earlier run, read back from the progress lines it printed; (figures, first
    and last timestamps). For a run that measured everything but failed to write its results."""
    import ast
    import json

    figures: dict[str, Any] = {"batch_rows": args.batch_rows, "error_rate": args.error_rate}
    runs: list[dict[str, Any]] = []
    aggregates: list[dict[str, Any]] = []
    joins: list[dict[str, Any]] = []
    stamps: list[str] = []
    for line in Path(args.from_log).read_text(encoding="utf-8").splitlines():
        if line.startswith("{'"):
            entry = ast.literal_eval(line)
            if "comparator_error" in entry:
                runs.append(entry)
            elif "counts_exact" in entry:
                aggregates.append(entry)
            elif "implementation" in entry:
                if entry["implementation"] == "blocked" and entry["rows"] > args.nested_max:
                    joins.append(
                        {"rows": entry["rows"], "implementation": "nested", **_extrapolated(joins, entry["rows"])}
                    )
                joins.append(entry)
        elif line.startswith('{"') and '"timestamp"' in line:
            stamps.append(json.loads(line)["timestamp"])
    figures.update(joins=joins, aggregates=aggregates, topk={"rows": args.topk_rows, "k": args.k, "runs": runs})
    return figures, stamps[0] if stamps else "", stamps[-1] if stamps else ""


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    if args.from_log:
        figures, first, last = figures_from_log(args)
        note = (
            f"\n\nThese figures were measured by `python -m benchmarks.set_ops --nested-max {args.nested_max}` "
            f"(log times {first} to {last}) and read back from its progress log with `--from-log`: that run "
            "measured everything, then failed to write its JSON (a path among its parameters, fixed since). "
            "The load average in the header is the machine's when the log was read, not during the run (it was 13 "
            "to 50 on 2 cores during the run: other work shared the machine, so seconds are inflated)."
        )
        return BenchmarkResult(
            name=NAME,
            title="Set-level semantic operators on the medical texts (SemJoin, SemAgg, SemTopK)",
            command=command,
            parameters={key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
            figures=figures,
            markdown=render(figures) + note,
            started_at=first or now_iso(),
            load_before=load_average(),
        )
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from semray.cluster.connect import connect, shutdown
    from semray.serving.deployments import stop_tiers
    from semray.settings import Settings

    started_at, load_before = now_iso(), load_average()
    medical = load_medical(require_shared_data("medical"))
    state = Path(tempfile.mkdtemp(prefix="sr-bench-", dir="/tmp"))
    settings = Settings(state_dir=state, num_cpus=2, semantic_batch_size=args.batch_rows)
    figures: dict[str, Any] = {"batch_rows": args.batch_rows, "error_rate": args.error_rate}
    if not args.only_factorization:
        run_topk(args, medical, figures)
    connect(settings)
    try:
        if not args.only_factorization:
            run_aggregates(args, medical, settings, figures)
            run_joins(args, medical, settings, figures)
        run_factorization(args, medical, settings, figures)
    finally:
        stop_tiers("semray-bench")
        shutdown()
    return BenchmarkResult(
        name=NAME,
        title="Set-level semantic operators on the medical texts (SemJoin, SemAgg, SemTopK)",
        command=command,
        parameters={
            key: str(value) if isinstance(value, Path) else value
            for key, value in vars(args).items()
            if not key.startswith("_")
        },
        figures=figures,
        markdown=render(figures),
        started_at=started_at,
        load_before=load_before,
    )


def render(figures: dict[str, Any]) -> str:
    lines = [
        f"Simulated large tier at error rate {figures['error_rate']}, zero latency; response cache off; "
        f'{figures["batch_rows"]} pairs per model round trip. Self-join: "{JOIN}" over the first N texts of '
        "`medical/text_symptoms_data.csv` (24 diagnoses, 50 texts each over all 1,200). Truth: every ordered pair "
        "(a row with itself included) of equal `text_diagnosis`.",
        "",
        "| rows | implementation | calls | tokens in | tokens out | seconds | precision | recall | F1 "
        "| blocking recall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for entry in figures.get("joins", []):
        mark = "" if entry.get("measured") else " (extrapolated)"
        blocking = entry.get("blocking_recall")
        blocking_text = f"{blocking} ({entry['candidates_per_row']}/row)" if blocking is not None else ""
        lines.append(
            f"| {entry['rows']} | {entry['implementation']}{mark} | {entry['calls']:,} | {entry['tokens_in']:,} | "
            f"{entry['tokens_out']:,} | {entry['seconds']} | {entry['precision']} | {entry['recall']} | "
            f"{entry['f1']} | {blocking_text} |"
        )
    lines += [
        "",
        "Extrapolated rows are not measured: calls, tokens and seconds scale with the number of pairs (rows squared) "
        "from the largest measured nested run, and quality is that run's. Why nested loops score lowest: about one "
        "pair in 24 is a match, so a 5% error on every pair makes about as many false matches as true ones; "
        "blocking asks mostly about similar, often matching pairs; factorizing asks n + m questions and a pair is "
        "wrong only when one of its two sides is. Calls are below n x m where texts repeat: the tier answers "
        "identical prompts of one batch once.",
        "",
        "SemAgg over the first N texts, context 4,096 tokens (hierarchical when the records do not fit):",
        "",
        "| rows | counts exact | classes exact | total count error | most common (truth / answer) "
        "| calls (counts, common) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in figures.get("aggregates", []):
        lines.append(
            f"| {row['rows']} | {row['counts_exact']} | {row['classes_exact']}/{row['classes']} | "
            f"{row['counts_abs_error']} | {row['most_common_true']} / {row['most_common_answer']} | "
            f"{row['calls_counts']}, {row['calls_common']} |"
        )
    factorization = figures.get("factorization")
    if factorization:
        lines += [
            "",
            "Self-joins whose pair predicate is worded freely (`WORDINGS`: same diagnosis, different diagnoses), "
            "with the check turned off (before: `with_join_factorization(None)`, `auto`: nested up to 20,000 pairs, "
            "blocked above) and as a plain `execute()` runs them under the default `Settings.join_factorization` "
            "(after: the run checks and factorizes; calls include the check's, which are also shown apart), "
            "and the same join again under a LIMIT (repeated: its verdict is journaled per join, no check call):",
            "",
            "| rows | wording | plan | join ran as | calls | verification calls | precision | recall | F1 | decision |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in factorization:
            decision = str(row.get("decision", "")).split("': ", 1)[-1]
            lines.append(
                f"| {row['rows']} | {row['wording']} | {row['plan']} | {row.get('ran', '')} | {row['calls']:,} | "
                f"{row['verification_calls']} | {row.get('precision', '')} | {row.get('recall', '')} | "
                f"{row.get('f1', '')} | {decision} |"
            )
    topk = figures.get("topk")
    if topk:
        lines += [
            "",
            f"SemTopK's comparator (partial quicksort, batched rounds) on {topk['rows']} texts, k = {topk['k']}, "
            'ranking by the `age` label ("the oldest patient"); a returned row counts as relevant when its age is '
            "at least the k-th largest age:",
            "",
            "| comparator error rate | precision@k | comparisons | n log2 k |",
            "| --- | --- | --- | --- |",
        ]
        for run in topk["runs"]:
            lines.append(
                f"| {run['comparator_error']} | {run['precision_at_k']} | {run['comparisons']:,} "
                f"| {run['n_log2_k']:,} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__ or NAME)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--nested-max", type=int, default=300, help="extrapolate nested loops above this many rows")
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--batch-rows", type=int, default=256)
    parser.add_argument("--agg-sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--topk-rows", type=int, default=300)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--compare-errors", type=float, nargs="+", default=[0.0, 0.05, 0.15])
    parser.add_argument("--from-log", type=Path, default=None, help="rebuild the results from a run's progress log")
    parser.add_argument("--factor-rows", type=int, default=256, help="rows of the free-form factorization self-joins")
    parser.add_argument(
        "--factor-before", action="store_true", help="also run those joins as planned, without the choice"
    )
    parser.add_argument("--only-factorization", action="store_true", help="run only the free-form factorization joins")
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
