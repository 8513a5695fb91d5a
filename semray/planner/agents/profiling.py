"""The profiling agent: find the datasets a question needs, then read their schemas and samples.

Three recorded steps: a catalog search (datasets and document segments), the model's choice
among the candidates, and the description of each chosen dataset. A name the model invents is
dropped (the choice step records it); when none is left, the best search match is used. With
``agents`` above 0 (and the attempt the profiling runs in) the choice is made by independent
sub-agents instead, one per candidate dataset (``dataset_agents.py``), whose notes the profile keeps.

>>> profile = profile_question(runner, catalog, "average rating per product", ())  # doctest: +SKIP
>>> [dataset.name for dataset in profile.datasets]  # doctest: +SKIP
['reviews', 'products']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semray.errors import TableNotFoundError
from semray.log import get_logger
from semray.planner.agents.catalog_view import CatalogView, DatasetHit, DatasetProfile, SegmentHit
from semray.planner.agents.dataset_agents import DatasetNotes, inspect_datasets
from semray.planner.agents.exploration import ExplorationStop
from semray.planner.agents.issues import PlanIssue, feedback_text
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.planner.agents.units import UnitAttempt
from semray.serving.contract import ModelRequest, OutputConstraint

CANDIDATES = 8
log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Profile:
    """What the profiling agent found: the datasets to use, domain segments, and why."""

    datasets: tuple[DatasetProfile, ...]
    segments: tuple[SegmentHit, ...]
    reason: str
    candidates: tuple[str, ...] = ()
    """Every dataset the search offered: the alternatives a decision-confidence check scores."""
    notes: tuple[DatasetNotes, ...] = ()
    """What the profiling sub-agents found about the chosen datasets (``dataset_agents.py``; () without them)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dataset.name for dataset in self.datasets)

    def text(self) -> str:
        noted = {notes.name: notes for notes in self.notes}
        return "\n\n".join(
            dataset.describe() + (f"\n  notes: {noted[dataset.name].line()}" if dataset.name in noted else "")
            for dataset in self.datasets
        )


def profile_question(
    runner: StepRunner,
    catalog: CatalogView,
    question: str,
    knowledge: Sequence[str],
    feedback: tuple[PlanIssue, ...] = (),
    structured: bool = True,
    stop: ExplorationStop | None = None,
    attempt: UnitAttempt | None = None,
    agents: int = 0,
    parallelism: int = 1,
) -> Profile:
    """Search, choose and describe; every part is one recorded step.

    With ``stop`` the candidates are explored in rank order until one adds little
    (``exploration.py``): one more recorded step, and only the explored ones are offered. With
    ``agents`` and ``attempt`` the best ``agents`` candidates are read by sub-agents of that attempt.
    """
    hits: list[DatasetHit] = []
    segments: list[SegmentHit] = []

    def search() -> tuple[str, str | None]:
        hits.extend(catalog.find_datasets(question, CANDIDATES))
        segments.extend(catalog.search_segments(question, 5))
        return ", ".join(f"{hit.name} ({hit.score:.2f})" for hit in hits) or "no datasets", None

    runner.run("profiling", "search", {"question": question}, search)
    if not hits:
        raise TableNotFoundError(question[:40], ())
    if stop is not None:
        hits = _explore(runner, catalog, question, hits, stop)
    if agents > 0 and attempt is not None:
        names = [hit.name for hit in hits[:agents]]
        found = inspect_datasets(
            attempt, catalog, question, names, segments, knowledge, feedback, structured, parallelism
        )
        needed = tuple(notes for notes in found if notes is not None and notes.relevant)
        if needed:
            return _described(runner, catalog, needed, tuple(segments), tuple(hit.name for hit in hits))
        log.info("dataset_agents_found_none", datasets=names, note="falling back to one choice over all candidates")
    candidates = "\n\n".join(catalog.describe(hit.name).describe(samples=1) for hit in hits)
    prompt = PROMPTS["choose_datasets"]
    assert prompt.output_schema is not None
    request = ModelRequest(
        prompt=prompt.render(
            question=question,
            candidates=candidates,
            segments="\n".join(f"- [{s.dataset}] {s.text[:300]}" for s in segments) or "none",
            knowledge="\n".join(f"- {line}" for line in knowledge) or "none",
            feedback=feedback_text(feedback),
        ),
        system=prompt.system,
        constraint=OutputConstraint.schema(prompt.output_schema) if structured else OutputConstraint.text(),
        max_tokens=prompt.max_tokens,
    )
    outcome = runner.ask("profiling", "choose", {"question": question}, request)
    chosen, reason = _chosen(outcome.response.text, [hit.name for hit in hits])
    chosen = chosen or [hits[0].name]
    profiles: list[DatasetProfile] = []

    def describe() -> tuple[str, str | None]:
        profiles.extend(catalog.describe(name) for name in chosen)
        return "\n\n".join(profile.describe() for profile in profiles), None

    runner.run("profiling", "describe", {"datasets": ", ".join(chosen)}, describe)
    return Profile(tuple(profiles), tuple(segments), reason, tuple(hit.name for hit in hits))


def _described(
    runner: StepRunner,
    catalog: CatalogView,
    needed: tuple[DatasetNotes, ...],
    segments: tuple[SegmentHit, ...],
    candidates: tuple[str, ...],
) -> Profile:
    """The profile the sub-agents' notes make: the datasets they found needed, described (one step)."""
    profiles: list[DatasetProfile] = []
    names = [notes.name for notes in needed]

    def describe() -> tuple[str, str | None]:
        profiles.extend(catalog.describe(name) for name in names)
        return "\n\n".join(profile.describe() for profile in profiles), None

    runner.run("profiling", "describe", {"datasets": ", ".join(names)}, describe)
    reason = "; ".join(notes.line() for notes in needed)
    return Profile(tuple(profiles), segments, reason, candidates, needed)


def _explore(
    runner: StepRunner, catalog: CatalogView, question: str, hits: list[DatasetHit], stop: ExplorationStop
) -> list[DatasetHit]:
    """The candidates kept before the first one that adds little (the first is always kept)."""
    kept: list[str] = []

    def explore() -> tuple[str, str | None]:
        observations = ((hit.name, catalog.describe(hit.name).describe(samples=1)) for hit in hits)
        exploration = stop.explore(question, observations)
        kept.extend(exploration.kept)
        return exploration.summary(), None

    runner.run("profiling", "explore", {"question": question, "threshold": f"{stop.threshold:.2f}"}, explore)
    return [hit for hit in hits if hit.name in kept]


def _chosen(text: str, known: list[str]) -> tuple[list[str], str]:
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        return [], ""
    if not isinstance(value, dict) or not isinstance(value.get("datasets"), list):
        return [], ""
    names = [str(name) for name in value["datasets"] if str(name) in known]
    return list(dict.fromkeys(names)), str(value.get("reason", ""))
