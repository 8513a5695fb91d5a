"""SemCode against the per-row operator on tasks where code is the right tool: dates written many
ways, and amounts with currencies. Correctness against the labels, model calls, dollars and wall
time of each, through the engine on a local Ray.

    .venv/bin/python -m benchmarks.semcode [--rows 2000] [--quick]

Per task, two runs over the same generated table:

* **per-row**: ``sem_extract`` on the simulated large tier (label-driven, ``--error-rate``
  wrong answers, ``--latency-ms`` per call at ``--concurrency``): one model call per row.
* **code**: the optimizer's code choice (``pipeline/runs/plan_time/code_choice.py``) prices the alternative,
  has the large tier write the function and validates it in rounds of ``--sample-rows`` rows
  (up to ``--max-rows``) against the same simulated large tier's per-row answers, keeping it when
  the 95% lower bound on the agreement reaches ``--target`` (``CodeChoice(target=0.9)``); the
  chosen plan then runs the function sandboxed (``CodeStage``), calling no model.

The simulator answers from labels and cannot write code, so the code-writing calls are answered
by **recorded functions** (as in ``tests/pipeline/test_code_generation.py``): per task a first
draft that misses some formats, then the fix a model writes from the validation feedback (the
failing rows go back to it). Whether the recorded fix is what a real model would write is not
measured here; what is measured is the engine's side: validation, the choice, the calls and
dollars it costs, how often the committed function is right, and how long each plan takes. Code
replies are priced at the simulated large tier's fees from their token counts. The response cache
is off, so every per-row answer is a model call.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import BenchmarkResult, load_average, now_iso, run_benchmark
from benchmarks.harness.cli import benchmark_parser

NAME = "semcode"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")  # fmt: skip


@dataclass(frozen=True)
class Task:
    name: str
    instruction: str
    fields: str
    keywords: tuple[str, ...]
    make: Callable[[random.Random, int], tuple[str, dict[str, Any]]]
    drafts: tuple[str, ...]
    """The recorded functions: the first draft, then each fix."""


# dates --------------------------------------------------------------------------------------


def _ordinal(day: int) -> str:
    return "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _date_text(rng: random.Random, index: int) -> tuple[str, dict[str, Any]]:
    day = datetime.date(2015, 1, 1) + datetime.timedelta(days=rng.randrange(4000))
    month, short = MONTHS[day.month - 1], MONTHS[day.month - 1][:3]
    formats = [
        (24, day.isoformat()),
        (16, f"{day.day} {short} {day.year}"),
        (14, f"{month} {day.day}, {day.year}"),
        (14, f"{day.month:02d}/{day.day:02d}/{day.year}"),
        (10, f"{day.day}.{day.month}.{day.year}"),
        (8, f"{day.day}{_ordinal(day.day)} of {month} {day.year}"),
        (8, f"{short} {day.day}{_ordinal(day.day)}, {day.year}"),
        (4, day.strftime("%Y%m%d")),
        (2, f"{day.day} {month} '{day.year % 100:02d}"),  # rare: the recorded fix misses it
    ]
    written = rng.choices([text for _, text in formats], weights=[weight for weight, _ in formats])[0]
    return f"ref {index:06d}: paid on {written}", {"day_label": day.isoformat()}


DATES_COMMON = r"""
import re
import datetime
import pandas as pd

MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}


def _make(year, month, day):
    try:
        return datetime.date(int(year), int(month), int(day)).isoformat()
    except ValueError:
        return None
"""
DATES_FIRST = (
    DATES_COMMON
    + r"""

def parse(text):
    text = str(text)
    m = re.search(r"(\d{4})-(\d{2})-(\d{2})", text)
    if m:
        return _make(*m.groups())
    m = re.search(r"(\d{1,2})/(\d{1,2})/(\d{4})", text)
    if m:
        return _make(m.group(3), m.group(1), m.group(2))
    m = re.search(r"(\d{1,2}) ([A-Za-z]{3})[a-z]* (\d{4})", text)
    if m and m.group(2).lower() in MONTHS:
        return _make(m.group(3), MONTHS[m.group(2).lower()], m.group(1))
    m = re.search(r"([A-Za-z]{3})[a-z]* (\d{1,2}), (\d{4})", text)
    if m and m.group(1).lower() in MONTHS:
        return _make(m.group(3), MONTHS[m.group(1).lower()], m.group(2))
    m = re.search(r"\b(\d{4})(\d{2})(\d{2})\b", text)
    if m:
        return _make(*m.groups())
    return None


def transform(batch):
    return pd.DataFrame({"day": [parse(value) for value in batch["raw"]]})
"""
)
DATES_FIX = (
    DATES_COMMON
    + r"""

def parse(text):
    text = str(text)
    m = re.search(r"(\d{4})-(\d{2})-(\d{2})", text)
    if m:
        return _make(*m.groups())
    m = re.search(r"(\d{1,2})/(\d{1,2})/(\d{4})", text)
    if m:
        return _make(m.group(3), m.group(1), m.group(2))
    m = re.search(r"(\d{1,2})\.(\d{1,2})\.(\d{4})", text)
    if m:
        return _make(m.group(3), m.group(2), m.group(1))
    m = re.search(r"(\d{1,2})(?:st|nd|rd|th)? (?:of )?([A-Za-z]{3})[a-z]* (\d{4})", text)
    if m and m.group(2).lower() in MONTHS:
        return _make(m.group(3), MONTHS[m.group(2).lower()], m.group(1))
    m = re.search(r"([A-Za-z]{3})[a-z]* (\d{1,2})(?:st|nd|rd|th)?, (\d{4})", text)
    if m and m.group(1).lower() in MONTHS:
        return _make(m.group(3), MONTHS[m.group(1).lower()], m.group(2))
    m = re.search(r"\b(\d{4})(\d{2})(\d{2})\b", text)
    if m:
        return _make(*m.groups())
    return None


def transform(batch):
    return pd.DataFrame({"day": [parse(value) for value in batch["raw"]]})
"""
)

# amounts ------------------------------------------------------------------------------------

CURRENCIES = (("USD", "$"), ("EUR", "€"), ("GBP", "£"), ("JPY", "¥"), ("CHF", None))


def _grouped(whole: int, separator: str) -> str:
    return f"{whole:,}".replace(",", separator)


def _amount_text(rng: random.Random, index: int) -> tuple[str, dict[str, Any]]:
    code, symbol = rng.choices(CURRENCIES, weights=(35, 30, 15, 10, 10))[0]
    cents = 0 if code == "JPY" else rng.randrange(100)
    whole = rng.choice((rng.randrange(1, 100), rng.randrange(100, 10_000), rng.randrange(10_000, 1_000_000)))
    amount = whole + cents / 100
    english = _grouped(whole, ",") + ("" if code == "JPY" else f".{cents:02d}")
    european = _grouped(whole, ".") + ("" if code == "JPY" else f",{cents:02d}")
    formats = [(30, f"{code} {english}"), (15, f"{english} {code}")]
    if symbol:
        formats += [(30, f"{symbol}{english}")]
    if code in ("EUR", "CHF"):
        formats += [(25, f"{european} {symbol or code}")]
    if code == "USD":
        formats += [(3, f"{whole} dollars")]  # rare: the recorded fix misses it
    written = rng.choices([text for _, text in formats], weights=[weight for weight, _ in formats])[0]
    return f"order line {index:06d} was charged {written}", {"amount_label": round(amount, 2), "currency_label": code}


AMOUNTS_COMMON = r"""
import re
import pandas as pd

SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
CODES = ("USD", "EUR", "GBP", "JPY", "CHF")
NUMBER = r"\d[\d.,]*"
"""
AMOUNTS_FIRST = (
    AMOUNTS_COMMON
    + r"""

def parse(text):
    text = str(text)
    for symbol, code in SYMBOLS.items():
        m = re.search(re.escape(symbol) + r"\s*(" + NUMBER + ")", text)
        if m:
            return float(m.group(1).replace(",", "")), code
    for code in CODES:
        m = re.search(code + r"\s*(" + NUMBER + ")", text) or re.search("(" + NUMBER + r")\s*" + code, text)
        if m:
            return float(m.group(1).replace(",", "")), code
    return None, None


def transform(batch):
    parsed = [parse(value) for value in batch["raw"]]
    return pd.DataFrame({"amount": [p[0] for p in parsed], "currency": [p[1] for p in parsed]})
"""
)
AMOUNTS_FIX = (
    AMOUNTS_COMMON
    + r"""

def number(written):
    # a comma followed by exactly two digits at the end is a decimal comma (1.234,50)
    if re.search(r",\d{2}$", written):
        return float(written.replace(".", "").replace(",", "."))
    return float(written.replace(",", ""))


def parse(text):
    text = str(text)
    for code in CODES:
        m = re.search(code + r"\s*(" + NUMBER + ")", text) or re.search("(" + NUMBER + r")\s*" + code, text)
        if m:
            return number(m.group(1)), code
    for symbol, code in SYMBOLS.items():
        m = re.search(re.escape(symbol) + r"\s*(" + NUMBER + ")", text) or re.search(
            "(" + NUMBER + r")\s*" + re.escape(symbol), text)
        if m:
            return number(m.group(1)), code
    return None, None


def transform(batch):
    parsed = [parse(value) for value in batch["raw"]]
    return pd.DataFrame({"amount": [p[0] for p in parsed], "currency": [p[1] for p in parsed]})
"""
)

TASKS = (
    Task(
        "dates",
        "The payment date written in {raw} (slashes are month/day/year, dots day.month.year)",
        "day: date",
        ("payment", "date"),
        _date_text,
        (DATES_FIRST, DATES_FIX),
    ),
    Task(
        "amounts",
        "The amount charged and its ISO currency code in {raw}",
        "amount: float, currency: text",
        ("amount", "currency"),
        _amount_text,
        (AMOUNTS_FIRST, AMOUNTS_FIX),
    ),
)
LABELS = {"dates": {"day": "day_label"}, "amounts": {"amount": "amount_label", "currency": "currency_label"}}


def _table(task: Task, rows: int, seed: int) -> pa.Table:
    rng = random.Random(f"{seed}:{task.name}")
    made = [task.make(rng, index) for index in range(rows)]
    columns: dict[str, list[Any]] = {"id": [f"{task.name}-{i:06d}" for i in range(rows)], "raw": [t for t, _ in made]}
    for label in made[0][1]:
        columns[label] = [labels[label] for _, labels in made]
    return pa.table(columns)


class RecordedWriter:
    """Answers the large tier's code requests with a task's recorded functions, in order, priced
    at the large tier's fees from their token counts; every other request goes to ``forward``."""

    def __init__(self, drafts: Sequence[str], forward: Callable[[list[Any]], list[Any]], fees: tuple[float, float]):
        self.drafts = list(drafts)
        self.forward = forward
        self.fees = fees
        self.code_calls = 0

    def ask(self, requests: Sequence[Any]) -> list[Any]:
        from semray.serving.contract import ModelResponse, Usage
        from semray.serving.prompts.code import CODE_SYSTEM
        from semray.serving.simulator.tokens import TokenCounter

        code = [request for request in requests if request.system == CODE_SYSTEM]
        if not code:
            return self.forward(list(requests))
        counter, answers = TokenCounter(), []
        for request in code:
            draft = self.drafts[min(self.code_calls, len(self.drafts) - 1)]
            self.code_calls += 1
            text = json.dumps({"code": draft})
            tokens_in, tokens_out = counter.count_chat([request.system or "", request.prompt]), counter.count(text)
            dollars = (tokens_in * self.fees[0] + tokens_out * self.fees[1]) / 1e6
            usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out, dollars=dollars)
            value = {"code": draft}
            answers.append(ModelResponse(text=text, value=value, confidence=None, usage=usage, model="recorded"))
        return answers


def _correct(table: pa.Table, labels: pa.Table, fields: dict[str, str], kinds: dict[str, str]) -> float:
    from semray.pipeline.runs.plan_time.code_generation import compare_value

    got = {row["_rowid"]: row for row in table.to_pylist()}
    right = 0
    for row in labels.to_pylist():
        answer = got[row["_rowid"]]
        right += all(compare_value(answer[name], row[label], kinds[name]) for name, label in fields.items())
    return right / labels.num_rows


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import semray
    from semray.cluster.connect import connect, shutdown
    from semray.operators import Limit, parse_fields
    from semray.pipeline.runs.execute import collect
    from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code
    from semray.query import Query
    from semray.serving.config import ServingConfig, TierConfig
    from semray.serving.deployments import start_tiers, stop_tiers
    from semray.serving.simulator import ModelProfile, SimulatorConfig, TaskSpec
    from semray.settings import Settings

    rows = 300 if args.quick else args.rows
    started_at, load_before = now_iso(), load_average()
    state = Path(tempfile.mkdtemp(prefix="sr-semcode-", dir="/tmp"))
    settings = Settings(state_dir=state, num_cpus=2)
    tables = {task.name: _table(task, rows, args.seed) for task in TASKS}
    fees = (2.5, 10.0)
    datasets, tasks = {}, []
    from semray.serving.simulator import DatasetSpec

    for task in TASKS:
        datasets[task.name] = DatasetSpec(key_column="id", text_columns=("raw",), table=tables[task.name])
        spec = TaskSpec(
            name=task.name, kind="extract", dataset=task.name, fields=LABELS[task.name], keywords=task.keywords
        )
        tasks.append(spec)
    model = ModelProfile(
        error_rate=args.error_rate,
        latency_base_s=args.latency_ms / 1000.0,
        max_concurrency=args.concurrency,
        price_in_per_million=fees[0],
        price_out_per_million=fees[1],
    )
    simulator = SimulatorConfig.from_mapping(
        {"seed": args.seed, "datasets": datasets, "tasks": tuple(tasks), "models": {"sim-large": model}},
        source="semcode",
    )
    serving = ServingConfig(
        simulator=simulator,
        large=TierConfig(backend="simulated", model="sim-large", max_ongoing_requests=args.concurrency),
        cache_enabled=False,
        app_prefix="semray-semcode",
    )
    from semray.cost_model.prices import profiles_from_serving

    profiles = profiles_from_serving(serving)
    figures: dict[str, Any] = {"rows": rows, "tasks": {}}
    connect(settings)
    try:
        handles = start_tiers(serving, settings, tiers=["large"])

        def forward(requests: list[Any]) -> list[Any]:
            return list(handles.generate("large", requests))

        warm = tables[TASKS[0].name].select(["id", "raw"]).slice(0, 8)  # actors' imports, the journal folder
        semray.from_arrow(warm, "rows", settings).with_serving(serving).sem_extract(
            TASKS[0].instruction, TASKS[0].fields
        ).execute()
        for task in TASKS:
            table = tables[task.name]
            inputs = table.select(["id", "raw"])
            fields = {field.name: LABELS[task.name][field.name] for field in parse_fields(task.fields)}
            kinds = {field.name: field.type for field in parse_fields(task.fields)}
            labelled = table.select(["id", *fields.values()])

            def query(inputs: pa.Table = inputs) -> Any:
                return semray.from_arrow(inputs, "rows", settings).with_serving(serving)

            started = time.perf_counter()
            per_row = query().sem_extract(task.instruction, task.fields).execute()
            per_row_s = time.perf_counter() - started
            with_ids = per_row.table
            truth = _truth(with_ids, labelled)

            writer = RecordedWriter(task.drafts, forward, fees)
            plan = query().sem_extract(task.instruction, task.fields).optimized().plan
            started = time.perf_counter()
            decision = choose_code(
                plan,
                writer.ask,
                lambda draft: collect(
                    Limit(input=draft.input, count=draft.max_sample_rows or draft.sample_rows), settings, serving
                ),
                profiles,
                CodeChoice(target=args.target, sample_rows=args.sample_rows, max_rows=args.max_rows),
            )
            choice_s = time.perf_counter() - started
            started = time.perf_counter()
            coded = Query(decision.plan, settings, serving).execute(optimize=False)
            code_s = time.perf_counter() - started
            (trial,) = decision.trials.values() if decision.trials else (None,)
            figures["tasks"][task.name] = {
                "instruction": task.instruction,
                "fields": task.fields,
                "chosen": bool(decision.chosen),
                "trial_agreement": trial.agreement if trial else None,
                "trial_rows": trial.sample_rows if trial else None,
                "trial_lower_bound": decision.chosen[0].agreement_bound if decision.chosen else None,
                "trial_problem": trial.problem if trial else None,
                "generation_attempts": writer.code_calls,
                "per_row": {
                    "correct": round(_correct(with_ids, truth, fields, kinds), 4),
                    "calls": per_row.usage.calls,
                    "dollars": round(per_row.usage.dollars, 5),
                    "seconds": round(per_row_s, 2),
                },
                "code": {
                    "correct": round(_correct(coded.table, truth, fields, kinds), 4),
                    "calls": decision.calls + (coded.usage.calls if coded.run_id else 0),
                    "dollars": round(decision.dollars + (coded.usage.dollars if coded.run_id else 0.0), 5),
                    "choice_seconds": round(choice_s, 2),
                    "run_seconds": round(code_s, 2),
                    "seconds": round(choice_s + code_s, 2),
                },
            }
    finally:
        stop_tiers("semray-semcode")
        shutdown()
    parameters = {key: value for key, value in vars(args).items() if key not in ("results_dir", "out_dir")}
    return BenchmarkResult(
        name=NAME,
        title="SemCode vs per-row SemExtract: dates written many ways, amounts with currencies",
        command=command,
        parameters=parameters,
        figures=figures,
        markdown=_markdown(figures, args),
        started_at=started_at,
        load_before=load_before,
    )


def _truth(result: pa.Table, labelled: pa.Table) -> pa.Table:
    """The labels keyed by the engine's ``_rowid`` (joined through ``id``)."""
    rowid = dict(zip(result.column("id").to_pylist(), result.column("_rowid").to_pylist(), strict=True))
    return labelled.append_column("_rowid", pa.array([rowid[key] for key in labelled.column("id").to_pylist()]))


def _markdown(figures: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"{figures['rows']} generated rows per task; simulated large tier: {args.error_rate:.0%} wrong answers, "
        f"{args.latency_ms} ms per call, {args.concurrency} at once, $2.50/$10 per 1M tokens, cache off; local Ray "
        f"(num_cpus=2). Code: the optimizer's choice (`CodeChoice(target={args.target})`: rounds of {args.sample_rows} "
        f"validation rows, up to {args.max_rows}, answered per row by the same simulated tier, the function kept "
        "when the 95% lower bound on its agreement reaches the target); the code-writing replies are recorded "
        "functions (a first draft that misses formats, then a fix), priced from their tokens. `correct`: rows "
        "whose every field equals the label (dates as ISO, numbers to 1e-6, text without case). Code seconds: "
        "the choice (sample, generation, sandboxed validation) plus the run; a warm-up query of 8 rows runs first.",
        "",
        "| task | plan | correct | model calls | dollars | seconds | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, task in figures["tasks"].items():
        per_row, code = task["per_row"], task["code"]
        lines.append(
            f"| {name} | per-row SemExtract | {per_row['correct']:.3f} | {per_row['calls']:,} | "
            f"${per_row['dollars']:.4f} | {per_row['seconds']:.1f} | |"
        )
        agreement, rows = task["trial_agreement"], task.get("trial_rows")
        measured = f"agreement {agreement:.2f} on {rows} rows" if agreement is not None else "no agreement"
        note = (
            f"chosen: {measured}, lower bound {task['trial_lower_bound']:.3f}, after "
            f"{task['generation_attempts']} generation call(s)"
            if task["chosen"]
            else f"not chosen ({measured}: {task.get('trial_problem')}): the per-row operator runs"
        )
        lines.append(
            f"| {name} | SemCode | {code['correct']:.3f} | {code['calls']:,} | ${code['dollars']:.4f} | "
            f"{code['seconds']:.1f} ({code['choice_seconds']:.1f} + {code['run_seconds']:.1f}) | {note} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    parser.add_argument("--rows", type=int, default=2000, help="generated rows per task")
    parser.add_argument("--quick", action="store_true", help="300 rows per task (a smoke run)")
    parser.add_argument("--error-rate", type=float, default=0.03, help="the simulated large tier's wrong answers")
    parser.add_argument("--latency-ms", type=int, default=100, help="the simulated large tier's seconds per call")
    parser.add_argument("--concurrency", type=int, default=32, help="calls the simulated tier serves at once")
    parser.add_argument("--target", type=float, default=0.9, help="agreement the function must reach")
    parser.add_argument("--sample-rows", type=int, default=20, help="validation rows per round")
    parser.add_argument("--max-rows", type=int, default=200, help="validation rows at most (the rounds' cap)")
    parser.add_argument("--seed", type=int, default=7)
    return run_benchmark(NAME, parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
