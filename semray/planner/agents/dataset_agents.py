"""Independent sub-agents: one profiling sub-agent per candidate dataset, all at once, merged by the parent.

With ``LoopConfig.dataset_agents`` N above 0 the profiling agent does not ask one model call to choose
among every candidate the catalog search found. Each of the best N candidates gets a sub-agent of its
own, working at once on its own resource (one dataset: disjoint from the others'), in an isolated
context: the question, that dataset's schema, statistics and samples, the domain notes found about
that dataset, and nothing of the other datasets. It answers whether the question needs the dataset,
which columns and what the planner should know (``inspect_dataset`` prompt).

Each sub-agent runs as a commit-or-retry unit in its own lane (``UnitAttempt.subagent``): its reply is
validated (the JSON asked for, every column named is one of the dataset's), a failing reply is retried
with the problem as feedback, and a committed sub-agent stages its notes as ``datasets/<name>.json``
in the profiling attempt that started it (published with it). Units are journaled by lane, so a
resumed ask replays committed sub-agents without paying them again and redoes only the others.

The parent merges: the datasets found needed, in search order, with their notes (shown to the
planning and manipulation agents under each dataset). A sub-agent that failed validation on every
attempt is left out, and nothing of it (its replies, its problems) reaches a later prompt or
memory. When no sub-agent found its dataset needed, the parent falls back to the one-call choice.

>>> DatasetNotes("reviews", True, ("rating",), "ratings 1 to 5").line()
'reviews: needs rating; ratings 1 to 5'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from semray.log import get_logger
from semray.planner.agents.catalog_view import CatalogView, DatasetProfile, SegmentHit
from semray.planner.agents.issues import PlanIssue, feedback_text
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.planner.agents.subagents import run_at_once
from semray.planner.agents.units import UnitAttempt, UnitFailedError, UnitRunner, Verdict
from semray.serving.contract import ModelRequest, OutputConstraint

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DatasetNotes:
    """What one profiling sub-agent found about its dataset."""

    name: str
    relevant: bool
    columns: tuple[str, ...]
    notes: str

    def line(self) -> str:
        columns = f"needs {', '.join(self.columns)}" if self.columns else "no columns named"
        return f"{self.name}: {columns}; {self.notes}".rstrip("; ")

    def to_json(self) -> str:
        document = {"dataset": self.name, "relevant": self.relevant, "columns": list(self.columns), "notes": self.notes}
        return json.dumps(document, indent=1)


@dataclass(frozen=True, slots=True)
class _Reply:
    """A sub-agent's parsed reply, or the problem with it."""

    notes: DatasetNotes | None
    problem: PlanIssue | None


def inspect_datasets(
    attempt: UnitAttempt,
    catalog: CatalogView,
    question: str,
    names: Sequence[str],
    segments: Sequence[SegmentHit],
    knowledge: Sequence[str],
    feedback: tuple[PlanIssue, ...],
    structured: bool,
    parallelism: int,
) -> list[DatasetNotes | None]:
    """One sub-agent per dataset in ``names``, at once; each one's notes in order (None: it failed)."""
    lanes = [attempt.subagent(f"profile {name}") for name in names]
    tasks = [
        partial(_sub_agent, units, catalog, question, name, segments, knowledge, feedback, structured)
        for units, name in zip(lanes, names, strict=True)
    ]
    found = run_at_once(tasks, parallelism)
    log.info(
        "dataset_agents_done",
        datasets=list(names),
        needed=[notes.name for notes in found if notes is not None and notes.relevant],
        failed=[name for name, notes in zip(names, found, strict=True) if notes is None],
    )
    return found


def _sub_agent(
    units: UnitRunner,
    catalog: CatalogView,
    question: str,
    name: str,
    segments: Sequence[SegmentHit],
    knowledge: Sequence[str],
    feedback: tuple[PlanIssue, ...],
    structured: bool,
) -> DatasetNotes | None:
    profile = catalog.describe(name)
    own = [segment for segment in segments if segment.dataset == name]

    def attempt(current: UnitAttempt) -> _Reply:
        return _inspect(units.runner, question, profile, own, knowledge, current.feedback or feedback, structured)

    def validate(reply: _Reply, current: UnitAttempt) -> Verdict:
        if reply.problem is not None or reply.notes is None:
            return Verdict((reply.problem or PlanIssue(f"datasets.{name}", "no reply", "json"),))
        current.write_file(f"datasets/{name}.json", reply.notes.to_json().encode())
        return Verdict()

    try:
        return units.run("inspect", attempt, validate).value.notes
    except UnitFailedError as failed:
        # Isolation: the failed sub-agent's replies and problems end here; its dataset is left out.
        log.info("dataset_agent_failed", dataset=name, issues=[issue.line() for issue in failed.issues])
        return None


def _inspect(
    runner: StepRunner,
    question: str,
    profile: DatasetProfile,
    segments: Sequence[SegmentHit],
    knowledge: Sequence[str],
    feedback: tuple[PlanIssue, ...],
    structured: bool,
) -> _Reply:
    """One model step of a sub-agent: its dataset alone in the prompt; the reply parsed and checked."""
    prompt = PROMPTS["inspect_dataset"]
    assert prompt.output_schema is not None
    request = ModelRequest(
        prompt=prompt.render(
            question=question,
            dataset=profile.describe(samples=3),
            segments="\n".join(f"- {segment.text[:300]}" for segment in segments) or "none",
            knowledge="\n".join(f"- {line}" for line in knowledge) or "none",
            feedback=feedback_text(feedback),
        ),
        system=prompt.system,
        constraint=OutputConstraint.schema(prompt.output_schema) if structured else OutputConstraint.text(),
        max_tokens=prompt.max_tokens,
    )
    outcome = runner.ask("profiling", "inspect", {"question": question, "dataset": profile.name}, request)
    return _parsed(outcome.response.text, profile)


def _parsed(text: str, profile: DatasetProfile) -> _Reply:
    where = f"datasets.{profile.name}"
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("relevant"), bool):
        return _Reply(
            None,
            PlanIssue(where, 'the reply is not {"relevant": true|false, "columns": [...], "notes": "..."}', "json"),
        )
    columns = [str(column) for column in value.get("columns") or [] if isinstance(column, str | int)]
    known = {column.name for column in profile.columns}
    unknown = [column for column in columns if column not in known]
    if unknown:
        return _Reply(
            None,
            PlanIssue(
                f"{where}.columns",
                f"{', '.join(repr(column) for column in unknown)} not in {profile.name}",
                "column",
                f"name only columns of {profile.name}: {', '.join(sorted(known))}",
            ),
        )
    notes = DatasetNotes(profile.name, value["relevant"], tuple(dict.fromkeys(columns)), str(value.get("notes", "")))
    return _Reply(notes, None)
