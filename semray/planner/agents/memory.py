"""Smart memory: this task's hints and errors, long-term memory, error routing and promotion.

- Short-term: the issues and hints of the task at hand, shown to the agent that fixes them.
- Long-term (a ``MemoryView``, the catalog's memory table): retrieved in two phases, memories of
  similar tasks first, then knowledge by category.
- Errors are classified as data, semantic or grammar: by their code or a dictionary of message
  patterns first, by the model only when neither decides; the category routes them
  (``issues.ROUTE``).
- At the end of a task each error is written as a failure that expires after ``ttl``; an error
  seen ``promote_after`` times (in this task and earlier ones) is summarised into knowledge that
  does not expire, and its failure records are forgotten.

>>> classify_message("Binder Error: column 'x' not found")
'data'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from semray.planner.agents.catalog_view import MemoryView
from semray.planner.agents.issues import ErrorCategory, PlanIssue
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.serving.contract import ModelRequest, OutputConstraint

KNOWLEDGE = "knowledge"
FAILURE = "failure"
PATTERNS: tuple[tuple[re.Pattern[str], ErrorCategory], ...] = (
    (re.compile(r"not valid json|unknown operator|parser error|syntax error|invalid plan at", re.I), "grammar"),
    (re.compile(r"not found|no such|does not exist|has no column|cannot read|no rows|source", re.I), "data"),
    (re.compile(r"conversion error|could not convert|cannot compare|type mismatch", re.I), "data"),
    (re.compile(r"no answer|failed rows|wrong answer|empty answer|does not answer|rejected", re.I), "semantic"),
)


def classify_message(message: str) -> ErrorCategory | None:
    """The category the dictionary gives an error message, or None when no pattern matches."""
    for pattern, category in PATTERNS:
        if pattern.search(message):
            return category
    return None


@dataclass(frozen=True, slots=True)
class PromptContext:
    """What later prompts show of short-term memory: the newest attempts in full, older ones in one line."""

    hints: tuple[str, ...]
    issues: tuple[PlanIssue, ...]
    summary: str = ""
    """One line for the attempts past the limit ("" when none was dropped)."""

    @property
    def hint_lines(self) -> tuple[str, ...]:
        return (*self.hints, self.summary) if self.summary else self.hints


@dataclass(slots=True)
class ShortTermMemory:
    """What this task learnt so far: every issue met, in order, and hints for the next drafts.

    ``attempts`` holds each failed unit attempt's issues (its verdict): ``context(limit)`` keeps
    the newest ``limit`` of them for the prompts and summarises the older ones in one line.
    """

    issues: list[PlanIssue] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    attempts: list[tuple[PlanIssue, ...]] = field(default_factory=list)

    def note(self, issues: tuple[PlanIssue, ...]) -> None:
        self.attempts.append(issues)
        self.issues.extend(issues)
        for issue in issues:
            if issue.correction and issue.correction not in self.hints:
                self.hints.append(issue.correction)

    def counts(self) -> dict[str, int]:
        return _counts(self.issues)

    def context(self, limit: int) -> PromptContext:
        """The newest ``limit`` failed attempts' hints and issues; the older ones as one summary line.

        >>> memory = ShortTermMemory()
        >>> for n in range(3):
        ...     memory.note((PlanIssue("plan", f"bad {n}", "json", f"fix {n}"),))
        >>> memory.context(2).hint_lines
        ('fix 1', 'fix 2', '1 earlier failed attempt(s), summarised: json: bad 0 (x1)')
        """
        kept = self.attempts[len(self.attempts) - limit :] if limit > 0 else []
        dropped = self.attempts[: len(self.attempts) - len(kept)]
        issues = tuple(issue for attempt in kept for issue in attempt)
        hints = tuple(dict.fromkeys(issue.correction for issue in issues if issue.correction))
        if not dropped:
            return PromptContext(hints, issues)
        counts = _counts([issue for attempt in dropped for issue in attempt])
        named = "; ".join(f"{signature[:120]} (x{count})" for signature, count in list(counts.items())[:5])
        more = f"; and {len(counts) - 5} more" if len(counts) > 5 else ""
        return PromptContext(hints, issues, f"{len(dropped)} earlier failed attempt(s), summarised: {named}{more}")


class MemoryManager:
    """Recall, classification and consolidation over one ``MemoryView`` (None: no long-term memory)."""

    def __init__(
        self,
        runner: StepRunner,
        store: MemoryView | None,
        *,
        ttl: timedelta = timedelta(days=7),
        promote_after: int = 2,
    ) -> None:
        self.runner = runner
        self.store = store
        self.ttl = ttl
        self.promote_after = promote_after
        self.short = ShortTermMemory()

    def recall(self, question: str, limit: int = 5) -> tuple[str, ...]:
        """Similar tasks' memories first, then knowledge by category; one recorded step."""
        store = self.store
        if store is None:
            return ()
        found: list[str] = []

        def work() -> tuple[str, str | None]:
            for record in (*store.recall(question, limit), *store.recall(question, limit, KNOWLEDGE)):
                if record.category == KNOWLEDGE and record.memory not in found:
                    found.append(record.memory)
            return "\n".join(found) or "none", None

        self.runner.run("memory", "recall", {"task": question}, work)
        return tuple(found)

    def classify(self, question: str, issue: PlanIssue, structured: bool) -> ErrorCategory:
        """An issue's category: its code when it has a known one, else the dictionary, else the model."""
        if issue.code != "execution":
            return issue.category
        found = classify_message(issue.message)
        if found is not None:
            return found
        prompt = PROMPTS["classify_error"]
        request = ModelRequest(
            prompt=prompt.render(question=question, error=issue.message),
            system=prompt.system,
            constraint=OutputConstraint.choice(*prompt.choices),
            max_tokens=prompt.max_tokens,
        )
        outcome = self.runner.ask("memory", "classify", {"error": issue.message}, request)
        value = outcome.response.value if outcome.response.ok else outcome.response.text.strip().lower()
        return value if value in ("data", "semantic", "grammar") else "semantic"  # type: ignore[return-value]

    def consolidate(self, question: str, run_id: str | None = None, now: datetime | None = None) -> None:
        """Write this task's errors: one-offs expire, recurring ones are promoted into knowledge."""
        store = self.store
        if store is None:
            return
        moment = now or datetime.now(UTC)
        examples = {issue.signature: issue for issue in self.short.issues}
        for signature, count in self.short.counts().items():
            issue = examples[signature]

            def work(
                signature: str = signature, count: int = count, issue: PlanIssue = issue
            ) -> tuple[str, str | None]:
                # What this ask wrote itself (before a crash, resumed since) is not an earlier occurrence.
                earlier = [
                    r
                    for r in store.recall(signature, 50, FAILURE)
                    if r.memory.startswith(signature) and (run_id is None or r.source_run != run_id)
                ]
                known = [r for r in store.recall(signature, 50, KNOWLEDGE) if signature in r.memory]
                seen = count + len(earlier)
                if known:
                    return f"already known: {signature}", None
                if seen >= self.promote_after:
                    store.remember(question, _summary(issue, seen), KNOWLEDGE, None, run_id)
                    for record in earlier:
                        store.forget(record.memory_id)
                    return f"promoted after {seen}: {signature}", None
                store.remember(question, f"{signature} || fix: {issue.correction}", FAILURE, moment + self.ttl, run_id)
                return f"one-off, expires {moment + self.ttl:%Y-%m-%d}: {signature}", None

            self.runner.run("memory", "write", {"signature": signature}, work)
        self.runner.run(
            "memory", "expire", {"now": moment.isoformat()}, lambda: (f"{store.expire(moment)} expired", None)
        )


def _counts(issues: list[PlanIssue]) -> dict[str, int]:
    seen: dict[str, int] = {}
    for issue in issues:
        seen[issue.signature] = seen.get(issue.signature, 0) + 1
    return seen


def _summary(issue: PlanIssue, seen: int) -> str:
    fix = f" Correction: {issue.correction}" if issue.correction else ""
    return f"Recurring {issue.category} error ({seen} times) -- avoid it: {issue.signature}.{fix}"
