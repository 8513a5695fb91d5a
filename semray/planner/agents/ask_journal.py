"""The durable trace of one ask: units, attempts, steps and verdicts in an append-only journal.

Each ask has a folder ``<state_dir>/asks/<ask_id>/`` holding ``journal.jsonl``, written with the
run journal's writer (``transactions/journal.py``: one ``flock``'d, fsync'd JSON line per record,
torn lines skipped on read) and a ``driver.lock`` held by the live process. Records:
``ask_started`` (the ask's key: question, model and what else the caller names), ``ask_resumed``,
``agent_step`` (inputs, output, the model's whole response, tokens, dollars), ``scorer_call`` (a call
of the scorer tier: the scored text's digest, its logprobs, its prompt tokens), ``unit_verdict``,
``unit_committed`` (the commit point of a unit) and ``unit_failed`` (a unit whose every attempt failed, such
as a run unit whose answer failed reflection), ``branches_merged`` (the pick among competing
candidates, or the merge of collaborating branches, with its conflicts), ``run_linked`` (the engine
run a run unit started, written while the run goes), ``ask_finished``.

Sub-agents are journaled in the same file: a sub-agent that runs units of its own (an independent
profiling sub-agent) has a ``subagent`` lane, its units numbered within it; a sub-agent inside one
unit attempt (a competing candidate, a collaborator) tags its steps and its own verdict with its
``branch``. A committed unit's steps are replayed by branch, so sub-agents that ran at once in
threads replay each their own answers.

Re-running the same ask (same key) after a crash reopens the newest unfinished trace that no live
process holds (``open_ask_trace``), and ``resume_ask_trace`` reopens one by its id (``semray ask
--resume ID``): the steps of its committed units are replayed from the journal instead of being
paid for again. ``render_ask_trace`` is what ``semray runs show ID`` prints for an ask.

>>> trace = open_ask_trace(Path(".semray"), "average rating per product", "gpt")  # doctest: +SKIP
>>> sorted(trace.committed)  # doctest: +SKIP
[0, 1, 2]
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from semray.log import get_logger
from semray.planner.agents.errors import AgentError
from semray.serving.contract import ModelResponse
from semray.transactions.durability import acquire_lock, is_locked, make_directory_durably, release_lock
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal_as
from semray.transactions.records import Record

log = get_logger(__name__)

ASKS_FOLDER = "asks"
LOCK_NAME = "driver.lock"
ASK_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
"""``20261202-034501-a1b2c3``: when the ask started (UTC) and six random hex digits."""


class AskTraceError(AgentError):
    """An ask's trace folder cannot be opened or read (another live process holds it, or it is damaged)."""


class AskStarted(Record):
    kind: Literal["ask_started"] = "ask_started"
    ask_id: str
    key: str
    question: str
    model: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    """What a resume by id needs to call the ask again (its datasets, flags, files); not part of the key."""


class AskResumed(Record):
    kind: Literal["ask_resumed"] = "ask_resumed"
    pid: int = Field(default_factory=os.getpid)


class StepJournaled(Record):
    """One agent step of one attempt of one unit; ``response`` is the model's whole answer (None: local work)."""

    kind: Literal["agent_step"] = "agent_step"
    subagent: str = ""
    """The lane of units the step's unit belongs to ("": the ask's own units)."""
    branch: str = ""
    """The sub-agent branch that made the step (``StepRunner.fork``)."""
    unit: int
    unit_name: str
    unit_attempt: int
    index: int
    agent: str
    step: str
    inputs: dict[str, str]
    output: str
    error: str | None = None
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    replayed: bool = False
    response: ModelResponse | None = None


class ScoreJournaled(Record):
    """One call of the scorer tier in one attempt of one unit: what it scored (a digest of the context and the
    continuation), the continuation's token logprobs, and what the call cost (an endpoint's prompt tokens; 0
    for a local scorer). A resumed ask answers the same text in a replayed unit from here, not the scorer."""

    kind: Literal["scorer_call"] = "scorer_call"
    subagent: str = ""
    branch: str = ""
    unit: int
    unit_name: str
    unit_attempt: int
    text: str
    """``score_digest(context, continuation)``."""
    logprobs: tuple[float, ...]
    scorer: str = ""
    prompt_tokens: int = 0
    replayed: bool = False


def score_digest(context: str, continuation: str) -> str:
    """What names a scored text in the journal: ``len(score_digest("a", "b")) == 32``."""
    return hashlib.sha256(f"{context}\x1f{continuation}".encode()).hexdigest()[:32]


class UnitVerdictJournaled(Record):
    """What validation said of one attempt: the issues found and the signals measured (name -> value)."""

    kind: Literal["unit_verdict"] = "unit_verdict"
    subagent: str = ""
    branch: str = ""
    """Set on the verdict of one competing candidate or collaborator (the unit's own verdict has none)."""
    unit: int
    unit_name: str
    unit_attempt: int
    ok: bool
    issues: tuple[str, ...] = ()
    signals: dict[str, float] = Field(default_factory=dict)


class UnitCommitted(Record):
    """The commit point of a unit: its effects are visible to later units from here on."""

    kind: Literal["unit_committed"] = "unit_committed"
    subagent: str = ""
    unit: int
    unit_name: str
    attempts: int
    forced: bool = False
    """The last attempt failed only soft signals (low confidence) and was committed after the last retry."""
    files: tuple[str, ...] = ()


class UnitFailed(Record):
    """A unit whose every attempt failed validation (``UnitFailedError``): a run unit whose answer failed, which sent
    its verdict to a new plan unit. A resumed ask replays it like a committed unit (its steps not paid again)."""

    kind: Literal["unit_failed"] = "unit_failed"
    subagent: str = ""
    unit: int
    unit_name: str
    attempts: int


class BranchesMerged(Record):
    """What became of a unit attempt's branches: the candidate ``picked``, or the collaborators ``merged``."""

    kind: Literal["branches_merged"] = "branches_merged"
    subagent: str = ""
    unit: int
    unit_name: str
    unit_attempt: int
    how: Literal["picked", "merged"]
    branches: tuple[str, ...]
    chosen: tuple[str, ...] = ()
    """The winning candidate, or the branches whose changes the merge took."""
    conflicts: tuple[str, ...] = ()
    """One line per path two branches changed differently, and which branch's change was kept."""


class RunLinked(Record):
    """An engine run a run unit started (written while it runs: ``semray runs show ASK_ID`` links it)."""

    kind: Literal["run_linked"] = "run_linked"
    run_id: str
    plan: str
    """The digest of the plan the run executes: a resumed ask resumes the run of the same plan."""


AskEnd = Literal["succeeded", "failed", "unverified"]
"""How an ask ended; ``unverified``: with an answer kept after the last draft although it failed reflection."""

_ENDED: dict[str, str] = {
    "succeeded": "succeeded",
    "failed": "failed",
    "unverified": "ended with an answer that failed reflection",
}


class AskFinished(Record):
    kind: Literal["ask_finished"] = "ask_finished"
    status: AskEnd
    message: str | None = None


AskRecord = Annotated[
    AskStarted
    | AskResumed
    | StepJournaled
    | ScoreJournaled
    | UnitVerdictJournaled
    | UnitCommitted
    | UnitFailed
    | BranchesMerged
    | RunLinked
    | AskFinished,
    Field(discriminator="kind"),
]
ASK_ADAPTER: TypeAdapter[AskRecord] = TypeAdapter(AskRecord)


@dataclass(frozen=True, slots=True)
class CommittedUnit:
    """A unit done in an earlier process: its name and every step of all its attempts, in order. ``failed``: it
    failed every attempt (``UnitFailed``); replayed all the same, so its steps are not paid again."""

    name: str
    steps: tuple[StepJournaled, ...]
    failed: bool = False
    scores: tuple[ScoreJournaled, ...] = ()
    """The scorer calls of its attempts: a replay answers the same texts from them."""


@dataclass(slots=True)
class AskTrace:
    """An open trace folder; only this process appends to it while it holds the lock."""

    folder: Path
    ask_id: str
    key: str
    resumed: bool
    attempt: int = 1
    """1 for a new ask, one more per resume (the ``attempt`` of every record it writes)."""
    committed: dict[int, CommittedUnit] = field(default_factory=dict)
    """The ask's own units committed in earlier processes, by number."""
    subagents: dict[str, dict[int, CommittedUnit]] = field(default_factory=dict)
    """Sub-agents' units committed in earlier processes, by lane and number."""
    runs: tuple[RunLinked, ...] = ()
    """Engine runs linked in earlier processes, oldest first."""
    _writer: JournalWriter | None = None
    _lock_fd: int | None = None

    def committed_in(self, subagent: str) -> dict[int, CommittedUnit]:
        """The committed units of one lane ("": the ask's own)."""
        return self.committed if not subagent else self.subagents.get(subagent, {})

    def linked_run(self, plan: str) -> str | None:
        """The newest engine run an earlier process linked for the plan of digest ``plan``."""
        return next((link.run_id for link in reversed(self.runs) if link.plan == plan), None)

    @property
    def workspace(self) -> Path:
        """Where units publish their files (``plan.json``) once they commit."""
        return self.folder / "workspace"

    def append(self, record: Record) -> None:
        if self._writer is None:
            raise AskTraceError(f"the trace of ask {self.ask_id} is closed")
        self._writer.append(record)

    def finish(self, status: AskEnd, message: str | None = None) -> None:
        self.append(AskFinished(attempt=self.attempt, status=status, message=message))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._lock_fd is not None:
            release_lock(self._lock_fd)
            self._lock_fd = None


def ask_key(question: str, model: str, extra: str = "") -> str:
    """What makes two asks the same ask: ``ask_key("q", "m") == ask_key("q", "m")``."""
    return hashlib.sha256("\x1f".join((question, model, extra)).encode()).hexdigest()[:24]


def open_ask_trace(
    state_dir: Path, question: str, model: str, extra: str = "", arguments: dict[str, Any] | None = None
) -> AskTrace:
    """Resume the newest unfinished trace of the same ask that no live process holds, else start a new one."""
    key = ask_key(question, model, extra)
    root = state_dir / ASKS_FOLDER
    make_directory_durably(root)
    for folder in sorted(root.iterdir(), reverse=True):
        records = _records(folder)
        if not records or not isinstance(records[0], AskStarted) or records[0].key != key:
            continue
        if any(isinstance(record, AskFinished) for record in records):
            break  # the newest trace of this ask finished: a new ask starts afresh
        if is_locked(folder / LOCK_NAME):
            continue  # the same ask, live in another process: this one does not wait for it
        return _resume(folder, records[0], records)
    ask_id = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{os.urandom(3).hex()}"
    folder = root / ask_id
    make_directory_durably(folder)
    lock = acquire_lock(folder / LOCK_NAME, f"ask {ask_id}")
    writer = JournalWriter.create(folder / JOURNAL_NAME)
    writer.append(AskStarted(ask_id=ask_id, key=key, question=question, model=model, arguments=arguments or {}))
    log.info("ask_trace_started", ask_id=ask_id, folder=str(folder))
    return AskTrace(folder, ask_id, key, False, 1, {}, {}, (), writer, lock)


def ask_folder(state_dir: Path, ask_id: str) -> Path | None:
    """The trace folder of ask ``ask_id`` under ``state_dir``, None when there is none."""
    folder = state_dir / ASKS_FOLDER / ask_id
    return folder if ASK_ID.match(ask_id) and (folder / JOURNAL_NAME).is_file() else None


def ask_started(state_dir: Path, ask_id: str) -> AskStarted:
    """The first record of an ask's trace: its question, model and arguments (for ``semray ask --resume ID``)."""
    folder = ask_folder(state_dir, ask_id)
    records = _records(folder) if folder is not None else ()
    if not records or not isinstance(records[0], AskStarted):
        raise AskTraceError(
            f"no ask {ask_id!r} under {state_dir / ASKS_FOLDER}; the id is printed when an ask starts "
            "(`ask ID: ...`) and is the name of its folder there"
        )
    return records[0]


def resume_ask_trace(state_dir: Path, ask_id: str, question: str, model: str, extra: str = "") -> AskTrace:
    """Reopen the unfinished trace ``ask_id``; refused when it finished or was asked otherwise."""
    started = ask_started(state_dir, ask_id)
    folder = state_dir / ASKS_FOLDER / ask_id
    records = _records(folder)
    finished = next((record for record in records if isinstance(record, AskFinished)), None)
    if finished is not None:
        raise AskTraceError(
            f"ask {ask_id} already {_ENDED[finished.status]}; `semray runs show {ask_id}` shows its trace, and "
            "asking the question again (without --resume) starts a new ask"
        )
    if started.key != ask_key(question, model, extra):
        raise AskTraceError(
            f"ask {ask_id} was asked of {started.model!r} with other datasets or settings than this call; resume it "
            "with the same ones (`semray ask --resume ID` reads them from its journal)"
        )
    return _resume(folder, started, records)


def read_ask_trace(folder: Path) -> tuple[AskRecord, ...]:
    """Every record of a trace folder, in order (``semray runs show``-like views read this)."""
    return _records(folder)


def committed_units(records: tuple[AskRecord, ...]) -> dict[tuple[str, int], CommittedUnit]:
    """Units with a ``unit_committed`` or ``unit_failed`` record, by (lane, number), each with the steps of all its
    attempts (the newest process's)."""
    steps: dict[tuple[str, int], list[StepJournaled]] = {}
    scores: dict[tuple[str, int], list[ScoreJournaled]] = {}
    committed: dict[tuple[str, int], CommittedUnit] = {}
    for record in records:
        if isinstance(record, StepJournaled) and (key := (record.subagent, record.unit)) not in committed:
            if record.unit_attempt == 1 and record.index == 0:
                steps[key] = []  # a unit begun again in a later process replaces its uncommitted steps
            steps.setdefault(key, []).append(record)
        elif isinstance(record, ScoreJournaled) and (key := (record.subagent, record.unit)) not in committed:
            scores.setdefault(key, []).append(record)  # a score of the same text is the same in any process
        elif (
            isinstance(record, UnitCommitted | UnitFailed) and (key := (record.subagent, record.unit)) not in committed
        ):
            failed = isinstance(record, UnitFailed)
            committed[key] = CommittedUnit(
                record.unit_name, tuple(steps.get(key, ())), failed, tuple(scores.get(key, ()))
            )
    return committed


AskStatus = Literal["running", "interrupted", "succeeded", "failed", "unverified"]
"""``interrupted``: no ``ask_finished`` and no live process; ``semray ask --resume ID`` goes on with it;
``unverified``: it ended with an answer that failed reflection."""


def ask_status(folder: Path, records: tuple[AskRecord, ...] | None = None) -> AskStatus:
    """How an ask stands: finished (succeeded, failed, unverified), running (a live process holds it) or interrupted."""
    found = _records(folder) if records is None else records
    finished = next((record for record in found if isinstance(record, AskFinished)), None)
    if finished is not None:
        return finished.status
    return "running" if is_locked(folder / LOCK_NAME) else "interrupted"


@dataclass(frozen=True, slots=True)
class AskSummary:
    """One ask as ``semray runs ls`` lists it."""

    ask_id: str
    status: AskStatus
    started: datetime
    question: str


def list_asks(state_dir: Path) -> list[AskSummary]:
    """The asks journaled under ``state_dir``, newest first (a folder without a readable start is skipped)."""
    summaries = []
    for folder in sorted((state_dir / ASKS_FOLDER).glob("*"), reverse=True):
        if ask_folder(state_dir, folder.name) is None:
            continue
        records = _records(folder)
        if not records or not isinstance(records[0], AskStarted):
            continue
        summaries.append(AskSummary(folder.name, ask_status(folder, records), records[0].at, records[0].question))
    return summaries


def render_ask_trace(folder: Path) -> str:
    """A readable trace: a summary, then one line per unit attempt and step, the verdicts and the commits.

    A sub-agent's units are prefixed with its lane (``[profile reviews]``), a branch's steps and verdict
    carry the branch (``(candidate-2)``); an engine run the ask started is linked with its status.

    >>> print(render_ask_trace(state / "asks" / ask_id))  # doctest: +SKIP
    ask 20261202-034501-a1b2c3: What is the average rating of each product?
    ...
    """
    records = _records(folder)
    steps = [record for record in records if isinstance(record, StepJournaled)]
    paid = [step for step in steps if step.model and not step.replayed]
    replayed = [step for step in steps if step.replayed]
    status = ask_status(folder, records)
    tokens = sum(step.input_tokens + step.output_tokens for step in paid)
    replays = _replayed_units(records)
    runs = [record for record in records if isinstance(record, RunLinked)]
    lines: list[str] = []
    for record in records:
        if isinstance(record, StepJournaled | UnitVerdictJournaled | BranchesMerged) and (
            (record.attempt, record.subagent, record.unit) in replays
        ):
            continue  # a unit answered from the journal: one line at its commit
        if isinstance(record, UnitCommitted | UnitFailed) and (record.attempt, record.subagent, record.unit) in replays:
            lines.append(
                f"{_unit(record.subagent, record.unit)} {record.unit_name} replayed from the journal of process "
                f"{replays[(record.attempt, record.subagent, record.unit)]}: nothing paid again"
            )
            continue
        if isinstance(record, AskStarted):
            lines.append(f"ask {record.ask_id}: {record.question}")
            resume = f" (go on with: semray ask --resume {record.ask_id})" if status == "interrupted" else ""
            lines.append(f"  status {status}{resume}; model {record.model}")
            if status == "unverified":
                ended = next((r.message for r in records if isinstance(r, AskFinished)), None)
                lines.append(f"  WARNING: {ended or 'the answer failed reflection'} (kept after the last draft)")
            committed = {(r.subagent, r.unit) for r in records if isinstance(r, UnitCommitted)}
            lines.append(
                f"  {len(committed)} unit(s) committed over "
                f"{1 + sum(isinstance(r, AskResumed) for r in records)} process(es); {len(paid)} model step(s) paid "
                f"({tokens:,} tokens, ${sum(step.dollars for step in paid):.4f}), "
                f"{len(replayed)} replayed from the journal"
            )
            scored = [r for r in records if isinstance(r, ScoreJournaled)]
            if scored:
                calls = [r for r in scored if not r.replayed]
                lines.append(
                    f"  scorer: {len(calls)} call(s) ({sum(r.prompt_tokens for r in calls):,} prompt tokens), "
                    f"{len(scored) - len(calls)} answered from the journal"
                )
            if (folder / "workspace" / "plan.json").is_file():
                lines.append(f"  plan: {folder / 'workspace' / 'plan.json'}")
            for run in runs:
                lines.append(
                    f"  engine run {run.run_id}: {_run_status(folder, run.run_id)} (semray runs show {run.run_id})"
                )
            lines.append("trace:")
        else:
            lines.extend(_record_lines(record))
    return "\n".join(lines)


def _unit(subagent: str, unit: int) -> str:
    return f"[{subagent}] u{unit}" if subagent else f"u{unit}"


def _record_lines(record: AskRecord) -> list[str]:
    """The trace lines of one record (not the ask's start, which is the summary)."""
    if isinstance(record, AskResumed):
        return [f"resumed by pid {record.pid} (process {record.attempt})"]
    if isinstance(record, StepJournaled):
        if record.replayed:
            cost = "replayed"
        elif record.model:
            cost = f"{record.input_tokens}+{record.output_tokens} tok ${record.dollars:.4f}"
        else:
            cost = "local"
        error = f"  error: {record.error[:80]}" if record.error else ""
        branch = f" ({record.branch})" if record.branch and record.branch != record.subagent else ""
        return [
            f"  {_unit(record.subagent, record.unit)} {record.unit_name} a{record.unit_attempt}{branch}  "
            f"{record.agent}/{record.step}  {cost}{error}"
        ]
    if isinstance(record, UnitVerdictJournaled):
        signals = " ".join(f"{name}={value:.3f}" for name, value in sorted(record.signals.items()))
        verdict = "passed" if record.ok else "failed: " + " ".join(record.issues)[:160]
        branch = f" ({record.branch})" if record.branch else ""
        return [
            f"  {_unit(record.subagent, record.unit)} {record.unit_name} a{record.unit_attempt}{branch}  "
            f"verdict {verdict} {signals}".rstrip()
        ]
    if isinstance(record, BranchesMerged):
        chosen = ", ".join(record.chosen) or "none"
        what = "picked" if record.how == "picked" else "merged from"
        lines = [
            f"  {_unit(record.subagent, record.unit)} {record.unit_name} a{record.unit_attempt}  "
            f"{len(record.branches)} branches, {what} {chosen}"
        ]
        lines.extend(f"    conflict: {conflict}" for conflict in record.conflicts)
        return lines
    if isinstance(record, UnitCommitted):
        forced = " (forced after the last retry)" if record.forced else ""
        return [
            f"{_unit(record.subagent, record.unit)} {record.unit_name} committed after {record.attempts} "
            f"attempt(s){forced}"
        ]
    if isinstance(record, UnitFailed):
        return [f"{_unit(record.subagent, record.unit)} {record.unit_name} failed after {record.attempts} attempt(s)"]
    if isinstance(record, RunLinked):
        return [f"  engine run {record.run_id} started (semray runs show {record.run_id})"]
    if isinstance(record, AskFinished):
        return ["finished: " + record.status + (f" ({record.message})" if record.message else "")]
    return []


def _run_status(folder: Path, run_id: str) -> str:
    """How a linked engine run stands, read from its journal beside the asks (``<state>/runs/<id>``)."""
    from semray.transactions.registry import effective_status, load_state

    path = folder.parent.parent / "runs" / run_id
    if not (path / JOURNAL_NAME).is_file():
        return "not found"
    return str(effective_status(path, load_state(path)))


def _replayed_units(records: tuple[AskRecord, ...]) -> dict[tuple[int, str, int], int]:
    """(process, lane, unit) of each unit a resumed process replayed without paying -> the process that
    committed it."""
    first: dict[tuple[str, int], int] = {}
    paid: set[tuple[int, str, int]] = set()
    replayed: dict[tuple[int, str, int], int] = {}
    for record in records:
        if isinstance(record, StepJournaled) and record.model and not record.replayed:
            paid.add((record.attempt, record.subagent, record.unit))
        elif isinstance(record, UnitCommitted | UnitFailed):
            key = (record.subagent, record.unit)
            if key in first and (record.attempt, *key) not in paid:
                replayed[(record.attempt, *key)] = first[key]
            first.setdefault(key, record.attempt)
    return replayed


def _resume(folder: Path, started: AskStarted, records: tuple[AskRecord, ...]) -> AskTrace:
    lock = acquire_lock(folder / LOCK_NAME, f"ask {started.ask_id}")
    records = _records(folder)  # under the lock: what the last process wrote before it let go
    writer = JournalWriter(folder / JOURNAL_NAME)
    attempt = 2 + sum(isinstance(record, AskResumed) for record in records)  # the first process is attempt 1
    writer.append(AskResumed(attempt=attempt))
    committed = committed_units(records)
    own = {unit: found for (lane, unit), found in committed.items() if not lane}
    lanes: dict[str, dict[int, CommittedUnit]] = {}
    for (lane, unit), found in committed.items():
        if lane:
            lanes.setdefault(lane, {})[unit] = found
    runs = tuple(record for record in records if isinstance(record, RunLinked))
    log.info("ask_trace_resumed", ask_id=started.ask_id, committed_units=len(committed))
    return AskTrace(folder, started.ask_id, started.key, True, attempt, own, lanes, runs, writer, lock)


def _records(folder: Path) -> tuple[AskRecord, ...]:
    path = folder / JOURNAL_NAME
    if not path.is_file():
        return ()
    records, _skipped, _end = read_journal_as(path, ASK_ADAPTER)
    return records
