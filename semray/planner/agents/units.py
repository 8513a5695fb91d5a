"""Commit-or-retry units: exploration, execution and validation whose effects show only once validated.

A unit runs attempts. Each attempt explores (read-only probes), executes (a plan fragment, a
memory write, a workspace file) and is validated. Its effects are staged: memory writes go to a
``StagedMemory`` and files to a staging folder, and only a passing verdict applies them (the
commit). A failing attempt is retried, up to ``UnitPolicy.max_retries`` times, and its staged
effects are dropped: what the next attempt sees of it is the verdict, as feedback. A verdict that
fails only soft signals (low confidence) is committed after the last retry, marked ``forced``;
a hard failure past the last retry raises ``UnitFailedError``.

With an ``AskTrace`` every step, verdict and commit is journaled; a unit already committed in the
trace (a resumed ask) answers its model steps from the journal, paying nothing again.

>>> units = UnitRunner(runner)  # doctest: +SKIP
>>> units.run("outline", lambda attempt: outline(), lambda result: Verdict()).value  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

from semray.log import get_logger
from semray.planner.agents.ask_journal import (
    AskTrace,
    StepJournaled,
    UnitCommitted,
    UnitVerdictJournaled,
)
from semray.planner.agents.catalog_view import MemoryRecord, MemoryView
from semray.planner.agents.errors import AgentError, RetryLimitError
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.step import AgentStep, StepRunner
from semray.serving.contract import ModelResponse
from semray.transactions.durability import fsync_directory, make_directory_durably, write_bytes_atomically

log = get_logger(__name__)

T = TypeVar("T")


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
class StagedMemory:
    """A ``MemoryView`` whose writes wait for the unit's commit; a failed attempt's writes are dropped.

    Reads see the store as committed plus this attempt's own staged writes.
    """

    store: MemoryView
    _remembered: list[MemoryRecord] = field(default_factory=list)
    _forgotten: list[str] = field(default_factory=list)

    def recall(self, task: str, limit: int = 5, category: str | None = None) -> Sequence[MemoryRecord]:
        found = [
            record for record in self.store.recall(task, limit, category) if record.memory_id not in self._forgotten
        ]
        staged = [record for record in self._remembered if category is None or record.category == category]
        return [*found, *staged][:limit]

    def remember(
        self, task: str, memory: str, category: str, expires: datetime | None = None, source_run: str | None = None
    ) -> MemoryRecord:
        record = MemoryRecord(
            f"staged-{len(self._remembered)}",
            task,
            memory,
            category,
            datetime.now().astimezone(),
            expires,
            0,
            source_run,
        )
        self._remembered.append(record)
        return record

    def forget(self, memory_id: str) -> None:
        self._remembered = [record for record in self._remembered if record.memory_id != memory_id]
        if not memory_id.startswith("staged-"):
            self._forgotten.append(memory_id)

    def expire(self, now: datetime | None = None) -> int:
        # Expiry removes what is past its date whoever asks; it is not an effect of the attempt.
        return self.store.expire(now)

    @property
    def pending(self) -> int:
        return len(self._remembered) + len(self._forgotten)

    def apply(self, dedupe: bool = False) -> None:
        """Write the staged records and forgets; ``dedupe`` skips a record its run already wrote.

        A process killed between applying a unit's writes and journaling its commit leaves them in the
        store; the resumed process applies the unit again with ``dedupe`` (forgets are idempotent).
        """
        for record in self._remembered:
            if dedupe and self._written(record):
                continue
            self.store.remember(record.task, record.memory, record.category, record.expires, record.source_run)
        for memory_id in self._forgotten:
            self.store.forget(memory_id)
        self.discard()

    def discard(self) -> None:
        self._remembered.clear()
        self._forgotten.clear()

    def _written(self, record: MemoryRecord) -> bool:
        if record.source_run is None:
            return False  # no run to tell this ask's write from another task's with the same text
        return any(
            (found.memory, found.category, found.source_run) == (record.memory, record.category, record.source_run)
            for found in self.store.recall(record.task, 50, record.category)
        )


@dataclass(slots=True)
class UnitAttempt:
    """One attempt of a unit: its number, the previous attempt's verdict as feedback, its staged files."""

    unit: int
    name: str
    number: int
    feedback: tuple[PlanIssue, ...]
    staging: Path | None
    files: list[str] = field(default_factory=list)

    def write_file(self, name: str, data: bytes) -> None:
        """Stage a workspace file; it appears in the workspace only if this attempt commits."""
        if self.staging is None:
            return
        make_directory_durably(self.staging)
        write_bytes_atomically(self.staging / name, data)
        self.files.append(name)


@dataclass(frozen=True, slots=True)
class UnitOutcome(Generic[T]):
    """A committed unit's value, its verdict and how many attempts it took."""

    value: T
    verdict: Verdict
    attempts: int
    forced: bool = False


class UnitRunner:
    """Runs the units of one ask over one ``StepRunner``; journals them to ``trace`` when given."""

    def __init__(
        self,
        runner: StepRunner,
        policy: UnitPolicy = UnitPolicy(),
        trace: AskTrace | None = None,
        memory: StagedMemory | None = None,
    ) -> None:
        self.runner = runner
        self.policy = policy
        self.trace = trace
        self.memory = memory
        self.units = 0
        self._current: UnitAttempt | None = None
        self._unit_steps = 0
        self._replaying: list[StepJournaled] = []
        self._resuming = trace is not None and trace.resumed
        if trace is not None:
            runner.listeners.append(self._journal_step)
        runner.replay = self._replay

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
        unit = self.units
        if unit >= self.policy.max_units:
            raise UnitLimitError(
                f"the ask ran {unit} units, the limit; raise UnitPolicy.max_units or narrow the question"
            )
        self.units += 1
        committed = self.trace.committed.get(unit) if self.trace is not None and self._resuming else None
        # Replay covers the prefix of units committed before the crash; from the first unit that was not, all is new.
        self._resuming = committed is not None
        self._replaying = list(committed.steps) if committed is not None else []
        if committed is not None and committed.name != name:
            log.warning("unit_replay_diverged", unit=unit, journaled=committed.name, now=name)
            self._replaying = []
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
            current = UnitAttempt(unit, name, number, feedback, self._staging(unit, number))
            self._current = current
            value = attempt(current)
            verdict = validate(value, current)
            self._journal_verdict(current, verdict)
            last = number == limit
            if verdict.ok or (last and verdict.soft):
                self._commit(current, verdict, replayed=committed is not None)
                return UnitOutcome(value, verdict, number, forced=not verdict.ok)
            if after_failure is not None:
                after_failure(value, verdict, current)
            self._discard(current)
            feedback = verdict.issues
            log.info("unit_retried", unit=unit, name=name, attempt=number, issues=len(verdict.issues))
        self._current = None
        raise UnitFailedError(
            f"unit {name} failed validation {limit} time(s): " + " ".join(issue.line() for issue in feedback),
            feedback,
        )

    def _staging(self, unit: int, number: int) -> Path | None:
        if self.trace is None:
            return None
        return self.trace.folder / "staging" / f"u{unit}-a{number}-{os.getpid()}"

    def _commit(self, current: UnitAttempt, verdict: Verdict, replayed: bool) -> None:
        if self.memory is not None:
            # A replayed unit applied its writes before the crash; applying them again would duplicate them.
            # A unit done again after a resume may have applied them just before the crash: dedupe.
            resumed = self.trace is not None and self.trace.resumed
            self.memory.discard() if replayed else self.memory.apply(dedupe=resumed)
        if self.trace is not None and current.staging is not None and current.files:
            workspace = self.trace.workspace
            make_directory_durably(workspace)
            for name in current.files:
                os.replace(current.staging / name, workspace / name)
            fsync_directory(workspace)
            shutil.rmtree(current.staging, ignore_errors=True)
        if self.trace is not None:
            self.trace.append(
                UnitCommitted(
                    attempt=self._process_attempt(),
                    unit=current.unit,
                    unit_name=current.name,
                    attempts=current.number,
                    forced=not verdict.ok,
                    files=tuple(current.files),
                )
            )
        self._current = None
        log.info("unit_committed", unit=current.unit, name=current.name, attempts=current.number, forced=not verdict.ok)

    def _discard(self, current: UnitAttempt) -> None:
        if self.memory is not None:
            self.memory.discard()
        if current.staging is not None:
            shutil.rmtree(current.staging, ignore_errors=True)

    def _replay(self, agent: str, kind: str) -> ModelResponse | None:
        while self._replaying:
            step = self._replaying.pop(0)
            if step.response is None:
                continue  # local work is done again (probes, validation)
            if (step.agent, step.step) == (agent, kind):
                return step.response
            log.warning("step_replay_diverged", journaled=f"{step.agent}/{step.step}", now=f"{agent}/{kind}")
            self._replaying = []
        return None

    def _journal_step(self, step: AgentStep, response: ModelResponse | None) -> None:
        current = self._current
        if self.trace is None or current is None:
            return
        self.trace.append(
            StepJournaled(
                attempt=self._process_attempt(),
                unit=current.unit,
                unit_name=current.name,
                unit_attempt=current.number,
                index=self._unit_steps,
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
        self._unit_steps += 1

    def _journal_verdict(self, current: UnitAttempt, verdict: Verdict) -> None:
        if self.trace is None:
            return
        self.trace.append(
            UnitVerdictJournaled(
                attempt=self._process_attempt(),
                unit=current.unit,
                unit_name=current.name,
                unit_attempt=current.number,
                ok=verdict.ok,
                issues=tuple(issue.line() for issue in verdict.issues),
                signals=dict(verdict.signals),
            )
        )

    def _process_attempt(self) -> int:
        return self.trace.attempt if self.trace is not None else 1
