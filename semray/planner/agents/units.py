"""Commit-or-retry units: exploration, execution and validation whose effects show only once validated.

A unit runs attempts. Each attempt explores (read-only probes), executes (a plan fragment, a
memory write, a workspace file) and is validated. Its effects are staged: memory writes go to a
``StagedMemory`` and files to a staging folder, and only a passing verdict applies them (the
commit). A failing attempt is retried, up to ``UnitPolicy.max_retries`` times, and its staged
effects are dropped: what the next attempt sees of it is the verdict, as feedback. A verdict that
fails only soft signals (low confidence) is committed after the last retry, marked ``forced``;
a hard failure past the last retry raises ``UnitFailedError``.

With an ``AskTrace`` every step, verdict and commit is journaled; a unit already committed in the
trace (a resumed ask) answers its model steps, and its scorer calls (``journaled_scorer.py``), from the
journal, paying nothing again. So does a unit
that failed every attempt (journaled ``unit_failed``, e.g. a run unit whose answer failed reflection):
it fails again from its journaled answers and the ask goes on past it as it did.

Sub-agents fit the units two ways. Inside one attempt, ``UnitAttempt.branch`` gives a branch (a
competing candidate, a collaborator): a forked ``StepRunner`` whose steps are journaled under the
attempt with the branch's name, its own verdict (``branch_verdict``) and its own files; the
attempt then keeps what it picks or merges (``adopt``, ``merged``) and commits or retries as one.
``UnitAttempt.subagent`` gives a sub-agent its own lane of units (an independent profiling
sub-agent): its units commit or retry on their own, are journaled and replayed by lane, and
publish their files and memory writes into the attempt that started them, so nothing of a
sub-agent reaches the workspace or long-term memory unless that attempt commits too.

>>> units = UnitRunner(runner)  # doctest: +SKIP
>>> units.run("outline", lambda attempt: outline(), lambda result: Verdict()).value  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar

from semray.log import get_logger
from semray.planner.agents.ask_journal import (
    AskTrace,
    BranchesMerged,
    CommittedUnit,
    ScoreJournaled,
    StepJournaled,
    UnitCommitted,
    UnitFailed,
    UnitVerdictJournaled,
)
from semray.planner.agents.errors import AgentError, RetryLimitError
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.staged_memory import StagedMemory
from semray.planner.agents.step import AgentStep, StepRunner
from semray.serving.contract import ModelResponse
from semray.transactions.durability import fsync_directory, make_directory_durably, write_bytes_atomically

log = get_logger(__name__)

T = TypeVar("T")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

__all__ = [
    "Branch",
    "StagedMemory",
    "UnitAttempt",
    "UnitFailedError",
    "UnitLimitError",
    "UnitOutcome",
    "UnitPolicy",
    "UnitRunner",
    "Verdict",
]


class UnitFailedError(AgentError):
    """A unit's last attempt failed validation; ``issues`` are its verdict's."""

    def __init__(self, message: str, issues: tuple[PlanIssue, ...]) -> None:
        super().__init__(message)
        self.issues = issues


class UnitLimitError(AgentError):
    """An ask ran more units than ``UnitPolicy.max_units`` allows."""


@dataclass(frozen=True, slots=True)
class UnitPolicy:
    """Bounds and thresholds of units (the design's defaults)."""

    max_retries: int = 2
    max_units: int = 20
    decision_margin: float = 0.25
    """Retry a critical choice whose confidence margin over the best alternative is below this."""
    span_divergence: float | None = 0.50
    """Retry a draft whose largest span divergence (confidence with the evidence minus without) is below
    this (``spans.py``); None: not checked."""
    stop_divergence: float | None = 0.45
    """Stop exploring once a new observation's confidence divergence with the earlier ones exceeds this
    (``exploration.py``); None: every candidate is explored."""
    context_units: int = 15
    """Failed unit attempts whose verdicts later prompts show in full; older ones are summarised in one line."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What validation found: issues (empty: pass), measured signals, and whether only soft signals failed."""

    issues: tuple[PlanIssue, ...] = ()
    signals: tuple[tuple[str, float], ...] = ()
    soft: bool = False

    @property
    def ok(self) -> bool:
        return not self.issues


@dataclass(slots=True)
class Branch:
    """A sub-agent inside one unit attempt: its runner (steps tagged with its name) and its own files.

    Files are kept in memory (a merge reads them) and, under a trace, staged in the branch's own folder
    of the attempt's staging area: nothing of a branch reaches the workspace unless the attempt adopts it.
    """

    name: str
    runner: StepRunner
    staging: Path | None
    files: dict[str, bytes] = field(default_factory=dict)

    def write_file(self, name: str, data: bytes) -> None:
        self.files[name] = data
        if self.staging is not None:
            _write_staged(self.staging, name, data)


@dataclass(slots=True)
class UnitAttempt:
    """One attempt of a unit: its number, the previous attempt's verdict as feedback, its staged files."""

    unit: int
    name: str
    number: int
    feedback: tuple[PlanIssue, ...]
    staging: Path | None
    files: list[str] = field(default_factory=list)
    owner: UnitRunner | None = None
    contents: dict[str, bytes] = field(default_factory=dict)
    """What this attempt staged, by file name (what a sub-agent publishes into its parent attempt)."""

    def write_file(self, name: str, data: bytes) -> None:
        """Stage a workspace file; it appears in the workspace only if this attempt commits."""
        self.contents[name] = data
        if name not in self.files:
            self.files.append(name)
        if self.staging is not None:
            _write_staged(self.staging, name, data)

    def branch(self, name: str) -> Branch:
        """A branch of this attempt for one sub-agent (a candidate, a collaborator)."""
        owner = self._owner()
        staging = None if self.staging is None else self.staging / "branches" / _safe(name)
        return Branch(name, owner.runner.fork(name), staging)

    def branch_verdict(self, branch: Branch, verdict: Verdict) -> None:
        """Journal what validation said of one branch (a candidate's own verdict)."""
        self._owner().journal_verdict(self, verdict, branch.runner.branch)

    def merged(
        self,
        how: Literal["picked", "merged"],
        branches: tuple[Branch, ...],
        chosen: tuple[str, ...],
        conflicts: tuple[str, ...] = (),
    ) -> None:
        """Journal the pick among competing branches or the merge of collaborating ones."""
        owner = self._owner()
        if owner.trace is not None:
            owner.trace.append(
                BranchesMerged(
                    attempt=owner.trace.attempt,
                    subagent=owner.lane,
                    unit=self.unit,
                    unit_name=self.name,
                    unit_attempt=self.number,
                    how=how,
                    branches=tuple(branch.name for branch in branches),
                    chosen=chosen,
                    conflicts=conflicts,
                )
            )
        log.info(
            "branches_merged", unit=self.unit, how=how, branches=len(branches), chosen=chosen, conflicts=len(conflicts)
        )

    def adopt(self, branch: Branch) -> None:
        """Stage a branch's files as this attempt's own (the picked candidate's, the merge's)."""
        for name, data in branch.files.items():
            self.write_file(name, data)

    def subagent(self, name: str) -> UnitRunner:
        """A lane of units for a sub-agent started by this attempt; they publish into it (module docstring)."""
        return self._owner().fork(f"u{self.unit}.{self.number}-{_safe(name)}", self)

    def _owner(self) -> UnitRunner:
        if self.owner is None:
            raise AgentError(f"attempt {self.number} of unit {self.name} runs outside a UnitRunner: no sub-agents")
        return self.owner


@dataclass(frozen=True, slots=True)
class UnitOutcome(Generic[T]):
    """A committed unit's value, its verdict and how many attempts it took."""

    value: T
    verdict: Verdict
    attempts: int
    forced: bool = False


class UnitRunner:
    """Runs the units of one ask (or of one sub-agent's lane) over one ``StepRunner``; journals them to
    ``trace`` when given."""

    def __init__(
        self,
        runner: StepRunner,
        policy: UnitPolicy = UnitPolicy(),
        trace: AskTrace | None = None,
        memory: StagedMemory | None = None,
        *,
        lane: str = "",
        parent: UnitAttempt | None = None,
    ) -> None:
        self.runner = runner
        self.policy = policy
        self.trace = trace
        self.memory = memory
        self.lane = lane
        """"" for the ask's own units; a sub-agent's lane otherwise (its runner's branch)."""
        self.parent = parent
        """The attempt a sub-agent's units publish into (None: the ask's workspace and memory)."""
        self.units = 0
        """Units this lane ran; ``UnitPolicy.max_units`` bounds the ask's own lane and each sub-agent's alike (a
        sub-agent's units are bounded by the count of sub-agents, not by the ask's units)."""
        self._lock = threading.Lock()
        self._current: UnitAttempt | None = None
        self._unit_steps = 0
        self._replaying: dict[str, list[StepJournaled]] = {}
        self._scores: dict[str, ScoreJournaled] = {}
        self._committed: dict[int, CommittedUnit] = trace.committed_in(lane) if trace is not None else {}
        self._resuming = trace is not None and trace.resumed
        if trace is not None:
            runner.listeners.append(self._journal_step)
        runner.replay = self._replay

    def fork(self, lane: str, parent: UnitAttempt) -> UnitRunner:
        """The units of a sub-agent started by ``parent``: a lane of its own, numbered from 0, journaled in the
        same trace, its memory writes staged over this lane's, its files published into ``parent``."""
        runner = self.runner.fork(lane, journaled=False)
        memory = None if self.memory is None else StagedMemory(self.memory)
        return UnitRunner(runner, self.policy, self.trace, memory, lane=runner.branch, parent=parent)

    def run(
        self,
        name: str,
        attempt: Callable[[UnitAttempt], T],
        validate: Callable[[T, UnitAttempt], Verdict],
        *,
        max_attempts: int | None = None,
        after_failure: Callable[[T, Verdict, UnitAttempt], None] | None = None,
    ) -> UnitOutcome[T]:
        """Attempt, validate, commit or retry; ``after_failure`` runs in the failed attempt (routing feedback).

        ``max_attempts`` may lower the policy's ``max_retries + 1``, never raise it (``RetryLimitError``).
        """
        if self.units >= self.policy.max_units:
            raise UnitLimitError(
                f"the ask ran {self.units} units{f' in lane {self.lane}' if self.lane else ''}, the limit; raise "
                "UnitPolicy.max_units (agent_max_units) or narrow the question"
            )
        unit = self.units
        self.units += 1
        committed = self._committed.get(unit) if self._resuming else None
        # Replay covers the prefix of units committed before the crash; from the first unit that was not, all is new.
        self._resuming = committed is not None
        self._replaying = {}
        self._scores = {}
        if committed is not None and committed.name != name:
            log.warning("unit_replay_diverged", unit=unit, lane=self.lane, journaled=committed.name, now=name)
        elif committed is not None:
            for step in committed.steps:
                self._replaying.setdefault(step.branch, []).append(step)
            self._scores = {score.text: score for score in committed.scores}
        limit = self.policy.max_retries + 1
        if max_attempts is not None:
            if not 1 <= max_attempts <= limit:
                raise RetryLimitError(
                    f"unit {name} asked for {max_attempts} attempts, outside 1..{limit} (max_retries + 1); "
                    "raise UnitPolicy.max_retries (agent_max_retries) for more"
                )
            limit = max_attempts
        self._unit_steps = 0
        feedback: tuple[PlanIssue, ...] = ()
        for number in range(1, limit + 1):
            current = UnitAttempt(unit, name, number, feedback, self._staging(unit, number), owner=self)
            self._current = current
            value = attempt(current)
            verdict = validate(value, current)
            self.journal_verdict(current, verdict)
            last = number == limit
            if verdict.ok or (last and verdict.soft):
                # A unit that failed before the crash applied nothing: its writes are new even when replayed.
                self._commit(current, verdict, replayed=committed is not None and not committed.failed)
                return UnitOutcome(value, verdict, number, forced=not verdict.ok)
            if after_failure is not None:
                after_failure(value, verdict, current)
            self._discard(current)
            feedback = verdict.issues
            log.info("unit_retried", unit=unit, lane=self.lane, name=name, attempt=number, issues=len(verdict.issues))
        self._current = None
        if self.trace is not None:
            # Journaled so that a resumed ask replays this unit too (its model steps not paid again) and goes on
            # past it: a failed run unit sent its verdict to the plan units that follow it.
            self.trace.append(
                UnitFailed(
                    attempt=self._process_attempt(), subagent=self.lane, unit=unit, unit_name=name, attempts=limit
                )
            )
        raise UnitFailedError(
            f"unit {name} failed validation {limit} time(s): " + " ".join(issue.line() for issue in feedback),
            feedback,
        )

    def journal_verdict(self, current: UnitAttempt, verdict: Verdict, branch: str = "") -> None:
        """Journal an attempt's verdict (``branch``: one branch's own verdict within it)."""
        if self.trace is None:
            return
        self.trace.append(
            UnitVerdictJournaled(
                attempt=self._process_attempt(),
                subagent=self.lane,
                branch=branch,
                unit=current.unit,
                unit_name=current.name,
                unit_attempt=current.number,
                ok=verdict.ok,
                issues=tuple(issue.line() for issue in verdict.issues),
                signals=dict(verdict.signals),
            )
        )

    def _staging(self, unit: int, number: int) -> Path | None:
        if self.trace is None:
            return None
        lane = f"{_safe(self.lane)}-" if self.lane else ""
        return self.trace.folder / "staging" / f"{lane}u{unit}-a{number}-{os.getpid()}"

    def _commit(self, current: UnitAttempt, verdict: Verdict, replayed: bool) -> None:
        if self.memory is not None:
            if self.parent is not None:
                # A sub-agent's writes join its parent attempt's, which applies (or drops) them at its own end.
                self.memory.apply()
            else:
                # A replayed unit applied its writes before the crash; applying them again would duplicate them.
                # A unit done again after a resume may have applied them just before the crash: dedupe.
                resumed = self.trace is not None and self.trace.resumed
                self.memory.discard() if replayed else self.memory.apply(dedupe=resumed)
        if self.parent is not None:
            for name in current.files:
                self.parent.write_file(name, current.contents[name])
        elif self.trace is not None and current.staging is not None and current.files:
            workspace = self.trace.workspace
            make_directory_durably(workspace)
            for name in current.files:
                make_directory_durably((workspace / name).parent)
                os.replace(current.staging / name, workspace / name)
            fsync_directory(workspace)
        if current.staging is not None:
            shutil.rmtree(current.staging, ignore_errors=True)
        if self.trace is not None:
            self.trace.append(
                UnitCommitted(
                    attempt=self._process_attempt(),
                    subagent=self.lane,
                    unit=current.unit,
                    unit_name=current.name,
                    attempts=current.number,
                    forced=not verdict.ok,
                    files=tuple(current.files),
                )
            )
        self._current = None
        log.info(
            "unit_committed",
            unit=current.unit,
            lane=self.lane,
            name=current.name,
            attempts=current.number,
            forced=not verdict.ok,
        )

    def _discard(self, current: UnitAttempt) -> None:
        if self.memory is not None:
            self.memory.discard()
        if current.staging is not None:
            shutil.rmtree(current.staging, ignore_errors=True)

    def _replay(self, agent: str, kind: str, branch: str) -> ModelResponse | None:
        with self._lock:
            queue = self._replaying.get(branch, [])
            while queue:
                step = queue.pop(0)
                if step.response is None:
                    continue  # local work is done again (probes, validation)
                if (step.agent, step.step) == (agent, kind):
                    return step.response
                log.warning(
                    "step_replay_diverged", journaled=f"{step.agent}/{step.step}", now=f"{agent}/{kind}", branch=branch
                )
                queue.clear()
        return None

    def replayed_score(self, text: str) -> tuple[float, ...] | None:
        """The logprobs the scorer gave for ``text`` (``score_digest``) in this unit before a crash, if it is being
        replayed: a resumed ask does not pay the scorer twice for a unit it committed."""
        with self._lock:
            found = self._scores.get(text)
        return None if found is None else found.logprobs

    def journal_score(
        self, text: str, logprobs: tuple[float, ...], scorer: str, prompt_tokens: int, replayed: bool
    ) -> None:
        """Journal one scorer call of the current attempt (``journaled_scorer.JournaledScorer``)."""
        current = self._current
        if self.trace is None or current is None:
            return
        self.trace.append(
            ScoreJournaled(
                attempt=self._process_attempt(),
                subagent=self.lane,
                branch=self.runner.branch,
                unit=current.unit,
                unit_name=current.name,
                unit_attempt=current.number,
                text=text,
                logprobs=logprobs,
                scorer=scorer,
                prompt_tokens=prompt_tokens,
                replayed=replayed,
            )
        )

    def _journal_step(self, step: AgentStep, response: ModelResponse | None) -> None:
        current = self._current
        if self.trace is None or current is None:
            return
        with self._lock:  # branches of one attempt journal from threads
            index = self._unit_steps
            self._unit_steps += 1
        self.trace.append(
            StepJournaled(
                attempt=self._process_attempt(),
                subagent=self.lane,
                branch=step.branch,
                unit=current.unit,
                unit_name=current.name,
                unit_attempt=current.number,
                index=index,
                agent=step.agent,
                step=step.kind,
                inputs=dict(step.inputs),
                output=step.output,
                error=step.error,
                model=step.model,
                input_tokens=step.input_tokens,
                output_tokens=step.output_tokens,
                dollars=step.dollars,
                replayed=step.replayed,
                response=response,
            )
        )

    def _process_attempt(self) -> int:
        return self.trace.attempt if self.trace is not None else 1


def _safe(name: str) -> str:
    """A name fit for a folder: ``_safe("profile reviews/2") == "profile-reviews-2"``."""
    return _UNSAFE.sub("-", name).strip("-") or "branch"


def _write_staged(staging: Path, name: str, data: bytes) -> None:
    path = staging / name
    make_directory_durably(path.parent)
    write_bytes_atomically(path, data)
