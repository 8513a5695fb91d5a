"""The planning loop against single-shot planning and its ablations, on a stand-in planner model.

A question set of our own (``benchmarks/planning_questions.py``: relational and semantic questions
over the generated demo corpus, and over the medical and Enron data of ``../shared/data`` when it
is there), each with its gold plan. The planner model is ``StandInPlanner``: it answers every agent step from the
gold case, injects a fault into the first draft at ``--fault-rates`` (``agents/faults.py``: wrong
columns, missing operators, wrong types, join keys, aggregates, templates), repairs it at
``--repair-rate`` when the feedback names it, and has the failure modes the ablations need at
configured rates (judges wrong, memory heeded, repairs that break something else, relapses to an
earlier faulty draft still in the prompt, a wrong dataset chosen; ``standin.py``).

Accuracy: the loop returned a validated plan AND that plan equals the gold plan structurally
(``plan_from_dict`` equality: the stand-in writes only gold or faulted gold plans, so equality is
exact here); with ``--execute`` the final plan and the gold plan also run on the engine and their
answers are compared (the measure to use with a real model, whose plans differ in form).

Configurations: the full loop; single-shot (one draft, grammar check only, no feedback); the loop
without long-term memory, without majority vote (one judge), without failed-attempt isolation,
without confidence signals (the dataset choice, span divergence, early stopping; ``StandInScorer``
grounds a span when the evidence holds its words), the full loop with competitive sub-agents (3
candidate drafts per attempt, the cheapest valid one by the cost model wins), with collaborative
sub-agents (a repair of problems at two or more places shared among 2 collaborators on branches of the
failed draft, merged), with independent sub-agents (each of the search's candidate datasets, up to 8,
read by a profiling sub-agent of its own in place of one choice over all; the stand-in errs on each
sub-agent's judgement at the rate it errs on the one choice), and without units (a plain ReAct-style
loop: no isolation and no confidence-gated retries). Each runs the question set in order with a fresh
memory per seed. On the stand-in, sub-agents run one at a time (``parallelism=1``): its random streams
are shared by the calls of one question, so calls answered at once would make runs irreproducible; an
endpoint runs them at once (``Settings.agent_parallelism``).

    python -m benchmarks.planning            # 5 seeds, fault rates 0.3 and 0.6
    python -m benchmarks.planning --quick    # 2 seeds, one fault rate
    python -m benchmarks.planning --endpoint --models semray.toml --execute --seeds 1   # a real model

With ``--endpoint`` every agent step goes to the model profile's ``large`` tier (an
OpenAI-compatible endpoint; see benchmarks/README.md) and the stand-in's rates do not apply.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkResult, benchmark_parser, load_average, now_iso, run_benchmark
from benchmarks.planning_questions import QuestionSet, question_set
from semray.operators import Node, plan_to_json
from semray.operators.serialize import plan_from_dict
from semray.planner.agents import (
    AgentModel,
    ListMemory,
    LoopConfig,
    PlanningFailedError,
    StepRunner,
    plan_question,
)
from semray.planner.agents.confidence import Scorer
from semray.planner.agents.standin import GoldCase, StandInPlanner, StandInScorer

# --- configurations and runs -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Configuration:
    """One arm of the comparison: the loop's switches and whether the confidence signal is on."""

    name: str
    loop: LoopConfig
    confidence: bool = True
    memory: bool = True
    what: str = ""


CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration(
        "full loop",
        LoopConfig(),
        what="units, isolation, confidence signals (dataset choice, span divergence, early stop), memory, 3 judges",
    ),
    Configuration(
        "single-shot",
        LoopConfig(max_iterations=1, semantic=False, memory=False),
        confidence=False,
        memory=False,
        what="one draft, grammar check only, no feedback",
    ),
    Configuration("no memory", LoopConfig(memory=False), memory=False, what="no long-term memory"),
    Configuration("no majority vote", LoopConfig(judges=1), what="one judge instead of 3"),
    Configuration(
        "no isolation", LoopConfig(isolation=False), what="every failed draft and issue stays in later prompts"
    ),
    Configuration(
        "no confidence signals",
        LoopConfig(),
        confidence=False,
        what="no scorer tier: neither the dataset choice nor the plan's spans scored, no early stop",
    ),
    Configuration(
        "competitive (3 candidates)",
        LoopConfig(candidates=3),
        what="the full loop with 3 candidate drafts per attempt from isolated contexts; the cheapest valid one wins",
    ),
    Configuration(
        "collaborative (2 collaborators)",
        LoopConfig(collaborators=2),
        what="the full loop; a repair of problems at two or more places is shared among 2 collaborators, each on "
        "its own branch of the failed draft, merged (a place both change keeps the earlier problem's change)",
    ),
    Configuration(
        "dataset sub-agents (8)",
        LoopConfig(dataset_agents=8),
        what="the full loop; each candidate dataset of the search (up to 8) read by a profiling sub-agent of its own "
        "instead of one choice over all",
    ),
    Configuration(
        "no units (ReAct-style)",
        LoopConfig(isolation=False),
        confidence=False,
        what="no isolation and no confidence-gated retries",
    ),
)


@dataclass(frozen=True, slots=True)
class Rates:
    """The stand-in's fault and repair rates (``StandInPlanner`` and ``StandInScorer``)."""

    fault: float = 0.5
    repair: float = 0.7
    judge_error: float = 0.2
    recall: float = 0.7
    refault: float = 0.3
    relapse: float = 0.5
    dataset_error: float = 0.15
    scorer_error: float = 0.1


@dataclass(slots=True)
class Outcome:
    """One question under one configuration and seed."""

    correct: bool
    validated: bool
    iterations: int
    tokens: int
    dollars: float


@dataclass(slots=True)
class ArmRun:
    """One configuration at one seed over the whole question set."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return sum(o.correct for o in self.outcomes) / len(self.outcomes)


Answerer = Callable[[Node], Any]
"""Runs a plan and returns its answer rows (``--execute``); None compares plans structurally."""


def run_arm(
    questions: QuestionSet,
    arm: Configuration,
    rates: Rates,
    seed: int,
    model_factory: Callable[[Rates, int], AgentModel] | None = None,
    answer: Answerer | None = None,
    scorer_factory: Callable[[Rates, int], Scorer | None] | None = None,
) -> ArmRun:
    """The question set in order under one configuration; memory is fresh per run."""
    model: AgentModel = (model_factory or standin_model(questions.cases))(rates, seed)
    loop = arm.loop if model_factory is not None else replace(arm.loop, parallelism=1)  # module docstring
    scorers = scorer_factory or (lambda at, seed: StandInScorer(questions.cases, error_rate=at.scorer_error, seed=seed))
    scorer = scorers(rates, seed) if arm.confidence else None
    memory = ListMemory() if arm.memory else None
    run = ArmRun()
    for case in questions.cases:
        runner = StepRunner(model)
        gold = plan_from_dict(case.document)
        try:
            result = plan_question(
                case.question,
                catalog=questions.catalog,
                model=model,
                memory=memory,
                config=loop,
                runner=runner,
                scorer=scorer,
                executor=answer,  # an execution error is fed back into the loop
            )
        except PlanningFailedError:
            run.outcomes.append(Outcome(False, False, loop.drafts, runner.trace.tokens, runner.trace.dollars))
            continue
        correct = result.plan == gold or (answer is not None and same_answer(result.executed, answer(gold)))
        run.outcomes.append(Outcome(correct, True, result.iterations, runner.trace.tokens, runner.trace.dollars))
    return run


def standin_model(cases: Sequence[GoldCase]) -> Callable[[Rates, int], AgentModel]:
    def build(rates: Rates, seed: int) -> AgentModel:
        return StandInPlanner(
            cases,
            fault_rate=rates.fault,
            repair_rate=rates.repair,
            judge_error_rate=rates.judge_error,
            recall_rate=rates.recall,
            refault_rate=rates.refault,
            relapse_rate=rates.relapse,
            dataset_error_rate=rates.dataset_error,
            seed=seed,
        )

    return build


def same_answer(left: Any, right: Any) -> bool:
    """Answers as multisets of rows, column names ignored, floats to 6 digits."""

    def rows(table: Any) -> list[tuple[str, ...]]:
        values = [table.column(i).to_pylist() for i in range(table.num_columns)]
        cells = [
            tuple(sorted(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row))
            for row in zip(*values, strict=True)
        ]
        return sorted(cells)

    return bool(rows(left) == rows(right))


def summarise(name: str, runs: list[ArmRun]) -> dict[str, Any]:
    """Mean and spread over seeds of one configuration at one fault rate."""
    outcomes = [o for run in runs for o in run.outcomes]
    accuracies = [run.accuracy for run in runs]
    return {
        "configuration": name,
        "accuracy": statistics.fmean(accuracies),
        "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
        "accuracy_variance": statistics.variance(accuracies) if len(accuracies) > 1 else 0.0,
        "accuracy_by_seed": accuracies,
        "validated": sum(o.validated for o in outcomes) / len(outcomes),
        "wrong_but_validated": sum(o.validated and not o.correct for o in outcomes) / len(outcomes),
        "iterations": statistics.fmean(o.iterations for o in outcomes),
        "tokens": statistics.fmean(o.tokens for o in outcomes),
        "dollars": statistics.fmean(o.dollars for o in outcomes),
    }


def compare(
    questions: QuestionSet,
    fault_rates: Sequence[float],
    seeds: int,
    rates: Rates,
    arms: Sequence[Configuration] = CONFIGURATIONS,
    model_factory: Callable[[Rates, int], AgentModel] | None = None,
    answer: Answerer | None = None,
    scorer_factory: Callable[[Rates, int], Scorer | None] | None = None,
) -> list[dict[str, Any]]:
    """Every configuration at every fault rate over ``seeds`` seeds: one summary row each."""
    rows = []
    for fault in fault_rates:
        at = replace(rates, fault=fault)
        for arm in arms:
            clock = time.perf_counter()
            runs = [run_arm(questions, arm, at, seed, model_factory, answer, scorer_factory) for seed in range(seeds)]
            rows.append({"fault_rate": fault, **summarise(arm.name, runs), "seconds": time.perf_counter() - clock})
    return rows


# --- the command -----------------------------------------------------------------------------


def _endpoint_model(settings_file: Path | None) -> Callable[[Rates, int], AgentModel]:
    """The profile's ``large`` tier (a real OpenAI-compatible endpoint); rates and seeds do not apply."""
    from semray.planner.agents import TierModel
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    settings = Settings() if settings_file is None else Settings(models=settings_file)
    serving = resolve_serving(settings.models)
    model = TierModel(serving, "large")
    return lambda _rates, _seed: model


def _answerer(state: Path, models: Path | None) -> Answerer:
    from semray.output import without_row_ids
    from semray.query import Query
    from semray.settings import Settings

    settings = Settings(state_dir=state, models=models)
    cache: dict[str, Any] = {}

    def answer(plan: Node) -> Any:
        key = plan_to_json(plan, indent=None)
        if key not in cache:
            cache[key] = without_row_ids(Query(plan, settings).execute().table)
        return cache[key]

    return answer


def _scorer(path: Path | None, models: Path | None) -> Callable[[Rates, int], Scorer | None]:
    """The scorer tier as ``semray ask`` finds it: a local transformers model by path (``HFScorer``), else the
    profile's ``[scorer]`` table (an endpoint's prompt logprobs, ``EndpointScorer``), else none."""
    from semray.planner.agents.scorer_tier import scorer_for
    from semray.serving.profiles import resolve_serving
    from semray.settings import Settings

    settings = Settings(agent_scorer_model=path, models=models)
    scorer = scorer_for(settings, resolve_serving(settings.models))
    return lambda _rates, _seed: scorer


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| fault rate | configuration | accuracy (mean ± sd over seeds) | per seed | validated | wrong but validated "
        "| iterations | tokens / question | $ / question |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        seeds = " ".join(f"{value:.2f}" for value in row["accuracy_by_seed"])
        lines.append(
            f"| {row['fault_rate']:.2f} | {row['configuration']} | {row['accuracy']:.3f} ± {row['accuracy_std']:.3f} "
            f"| {seeds} | {row['validated']:.3f} | {row['wrong_but_validated']:.3f} | {row['iterations']:.2f} "
            f"| {row['tokens']:,.0f} | {row['dollars']:.4f} |"
        )
    return lines


def _reading(rows: list[dict[str, Any]]) -> list[str]:
    """Per fault rate: how far each arm falls short of the full loop, and whose accuracy varies least."""
    lines = []
    for fault in dict.fromkeys(row["fault_rate"] for row in rows):
        at = [row for row in rows if row["fault_rate"] == fault]
        full = next(row for row in at if row["configuration"] == "full loop")
        gaps = ", ".join(
            f"{row['configuration']} {row['accuracy'] - full['accuracy']:+.3f}" for row in at if row is not full
        )
        steadiest = min(at, key=lambda row: row["accuracy_std"])
        lines.append(
            f"- fault rate {fault:.2f}: accuracy against the full loop's {full['accuracy']:.3f}: {gaps}; "
            f"smallest spread over seeds: {steadiest['configuration']} (sd {steadiest['accuracy_std']:.3f}; "
            f"full loop {full['accuracy_std']:.3f})."
        )
    return lines


def body(args: argparse.Namespace, command: str) -> BenchmarkResult:
    started, load = now_iso(), load_average()
    questions = question_set(args.out_dir, shared=not args.no_shared, limit=args.questions)
    rates = Rates(
        repair=args.repair_rate,
        judge_error=args.judge_error_rate,
        recall=args.recall_rate,
        refault=args.refault_rate,
        relapse=args.relapse_rate,
        dataset_error=args.dataset_error_rate,
        scorer_error=args.scorer_error_rate,
    )
    fault_rates = args.fault_rates or ([0.5] if args.quick else [0.3, 0.6])
    seeds = args.seeds or (2 if args.quick else 5)
    factory = _endpoint_model(args.models) if args.endpoint else None
    answer = _answerer(args.out_dir / "state", args.models) if args.execute else None
    scorers = _scorer(args.scorer_model, args.models) if args.endpoint or args.scorer_model else None
    clock = time.perf_counter()
    rows = compare(questions, fault_rates, seeds, rates, CONFIGURATIONS, factory, answer, scorers)
    seconds = time.perf_counter() - clock
    measure = (
        "answers compared after running both plans on the engine (`--execute`), or plans equal"
        if args.execute
        else "final plan validated and structurally equal to the gold plan (no execution)"
    )
    model = "the profile's `large` tier (`--endpoint`)" if args.endpoint else "`StandInPlanner`"
    data = "demo corpus and the shared medical and Enron data" if questions.shared else "demo corpus only"
    markdown = "\n".join(
        [
            f"{len(questions.cases)} questions ({data}), "
            f"each with a gold plan; planner model {model}; {seeds} seeds per configuration and fault rate, the "
            f"question set in order with a fresh long-term memory per seed. Accuracy: {measure}.",
            "",
            (
                f"Loop bound: {LoopConfig().drafts} drafts; the stand-in's rates do not apply to an endpoint."
                if args.endpoint
                else f"Stand-in rates: repair {rates.repair} when the feedback names the fault, "
                f"judges wrong {rates.judge_error}, "
                f"memory heeded {rates.recall}, a repair breaks something else {rates.refault}, relapse to an earlier "
                f"faulty draft still in the prompt {rates.relapse}, wrong dataset chosen {rates.dataset_error}, "
                f"scorer wrong {rates.scorer_error}. Loop bound: {LoopConfig().drafts} drafts."
            ),
            "",
            *_table(rows),
            "",
            *_reading(rows),
            "",
            "Long-term memory helps only where a fault recurs across questions (its lesson is promoted after "
            "two sightings and recalled by question similarity); the stand-in's faults are drawn at random "
            "places, so few recur and the memory arm's gap is small.",
            "",
            "The sub-agent arms: the collaborative one equals the full loop by construction here, since the stand-in "
            "injects one fault per draft, so no repair attempt has problems at two places and the collaborators never "
            "act (they are exercised in `tests/planner/agents/test_agents_subagents.py`); the dataset sub-agents pay "
            "one call per candidate dataset (up to 8) per profiling pass in place of one choice, and on the stand-in "
            "each errs on its one judgement at the rate the one choice errs; sub-agents run one at a time on the "
            "stand-in (its random streams are shared by a question's calls).",
            "",
            "Configurations: " + "; ".join(f"**{arm.name}**: {arm.what}" for arm in CONFIGURATIONS) + ".",
            "",
            "The differences between arms measure the design against a model with exactly these failure modes at "
            f"these rates; they are not a claim about any real model. {seconds:.1f} s in all.",
        ]
    )
    return BenchmarkResult(
        name="planning",
        title="Planning loop vs single-shot and ablations, stand-in planner with injected faults",
        command=command,
        parameters={
            "questions": len(questions.cases),
            "shared_data": questions.shared,
            "fault_rates": list(fault_rates),
            "seeds": seeds,
            "rates": {k: getattr(rates, k) for k in Rates.__dataclass_fields__},
            "execute": bool(args.execute),
            "endpoint": bool(args.endpoint),
        },
        figures={"rows": rows, "seconds": seconds},
        markdown=markdown,
        started_at=started,
        load_before=load,
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("planning", "Planning loop against single-shot planning and ablations.")
    defaults = Rates()
    parser.add_argument("--quick", action="store_true", help="2 seeds, fault rate 0.5")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 5; quick 2)")
    parser.add_argument("--fault-rates", type=float, nargs="+", default=None, help="default 0.3 0.6; quick 0.5")
    parser.add_argument("--repair-rate", type=float, default=defaults.repair)
    parser.add_argument("--judge-error-rate", type=float, default=defaults.judge_error)
    parser.add_argument("--recall-rate", type=float, default=defaults.recall)
    parser.add_argument("--refault-rate", type=float, default=defaults.refault)
    parser.add_argument("--relapse-rate", type=float, default=defaults.relapse)
    parser.add_argument("--dataset-error-rate", type=float, default=defaults.dataset_error)
    parser.add_argument("--scorer-error-rate", type=float, default=defaults.scorer_error)
    parser.add_argument("--no-shared", action="store_true", help="the demo questions only, even with ../shared/data")
    parser.add_argument("--execute", action="store_true", help="also run final and gold plans and compare answers")
    parser.add_argument(
        "--endpoint", action="store_true", help="plan with the model profile's large tier instead of the stand-in"
    )
    parser.add_argument("--models", type=Path, default=None, help="model profile file for --endpoint (semray.toml)")
    parser.add_argument(
        "--scorer-model",
        type=Path,
        default=None,
        help="local transformers model folder scoring decisions (HFScorer); without it, --endpoint scores with the "
        "profile's [scorer] table when it has one (an endpoint's prompt logprobs)",
    )
    return run_benchmark("planning", parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
