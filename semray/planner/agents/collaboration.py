"""Collaborative sub-agents: repairs of one failed draft on branches of a versioned workspace, merged.

When an attempt of the plan unit failed with problems at two or more places of its draft (issues
with different JSON paths) and ``LoopConfig.collaborators`` is above 1, the repair is shared: the
problems are grouped by path and dealt round-robin, in the order the validators reported them, to
up to that many collaborators. Each works at once on its own branch of the workspace, whose base
version is the failed draft's ``plan.json``; it sees the draft and only its own problems, and writes
its version of ``plan.json`` on its branch. The branches are then merged three ways against the base
(``merge_documents``):

- a value no branch changed stays; a value one branch changed (or several, to the same value) takes
  that change;
- a plan node is merged field by field while every version of it is the same operator; a node whose
  operator a branch replaced, and any list, is one value;
- **conflict rule**: a value two branches changed differently is a conflict, and the branch dealt the
  earlier problem wins it (the first branch in order); the other change at that place is dropped,
  and the conflict is journaled with the merge (``branches_merged``) and shown by ``semray runs show``.

The merged draft is validated like any draft: it commits, or its verdict feeds the next attempt. A
collaborator whose reply is not JSON contributes nothing (its branch's own verdict says why).

>>> merge_documents({"a": 1, "b": 1}, [("x", {"a": 2, "b": 1}), ("y", {"a": 1, "b": 3})])
({'a': 2, 'b': 3}, ())
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from semray.log import get_logger
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.step import StepRunner
from semray.planner.agents.subagents import run_at_once
from semray.planner.agents.units import Branch, UnitAttempt, Verdict

log = get_logger(__name__)

PLAN_FILE = "plan.json"
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Conflict:
    """A place two branches changed differently: the kept change and the dropped ones."""

    path: str
    kept: tuple[str, Any]
    dropped: tuple[tuple[str, Any], ...]

    def line(self) -> str:
        dropped = "; ".join(f"{name}'s {_shown(value)}" for name, value in self.dropped)
        return f"{self.path}: kept {self.kept[0]}'s {_shown(self.kept[1])}, dropped {dropped}"


def shares_of(issues: Sequence[PlanIssue], collaborators: int) -> tuple[tuple[PlanIssue, ...], ...]:
    """The problems of each collaborator: grouped by path, dealt round-robin; () when not worth sharing.

    >>> a, b = PlanIssue("plan.filter", "x", "column"), PlanIssue("plan.aggregate", "y", "aggregate")
    >>> [len(share) for share in shares_of([a, b, a], 2)]
    [2, 1]
    """
    groups: dict[str, list[PlanIssue]] = {}
    for issue in issues:
        groups.setdefault(issue.path, []).append(issue)
    if collaborators < 2 or len(groups) < 2:
        return ()
    shares: list[list[PlanIssue]] = [[] for _ in range(min(collaborators, len(groups)))]
    for number, group in enumerate(groups.values()):
        shares[number % len(shares)].extend(group)
    return tuple(tuple(share) for share in shares)


def base_document(text: str) -> dict[str, Any] | None:
    """The failed draft as the branches' base version, when it is a JSON object (None: nothing to branch)."""
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        return None
    return value if isinstance(value, dict) else None


def collaborate(
    attempt: UnitAttempt,
    base: dict[str, Any],
    shares: Sequence[tuple[PlanIssue, ...]],
    draft: Callable[[StepRunner, tuple[PlanIssue, ...]], str],
    parallelism: int,
) -> str:
    """Each share repaired on its own branch of ``base`` at once; the merged draft's text.

    ``draft(runner, issues)`` is the manipulation agent on a collaborator's branch, shown only ``issues``.
    """
    base_text = json.dumps(base, indent=1)
    branches = tuple(attempt.branch(f"collaborator-{number}") for number in range(len(shares)))
    for branch in branches:
        branch.write_file(PLAN_FILE, base_text.encode())  # the branch starts at the base version

    def collaborator(branch: Branch, issues: tuple[PlanIssue, ...]) -> dict[str, Any] | None:
        text = draft(branch.runner, issues)
        edited = base_document(text)
        if edited is None:
            problem = PlanIssue("plan", "the collaborator's repair is not a JSON plan document", "json")
            attempt.branch_verdict(branch, Verdict((problem,)))
            return None
        branch.write_file(PLAN_FILE, json.dumps(edited, indent=1).encode())
        attempt.branch_verdict(branch, Verdict())
        return edited

    edits = run_at_once(
        [partial(collaborator, branch, share) for branch, share in zip(branches, shares, strict=True)], parallelism
    )
    versions = [(branch.name, edit) for branch, edit in zip(branches, edits, strict=True) if edit is not None]
    merged, conflicts = merge_documents(base, versions)
    changed = tuple(name for name, edit in versions if edit != base)
    attempt.merged("merged", branches, changed, tuple(conflict.line() for conflict in conflicts))
    log.info(
        "collaborators_merged",
        branches=len(branches),
        changed=len(changed),
        conflicts=len(conflicts),
        base=version_of(base),
        merged=version_of(merged),
    )
    return json.dumps(merged, indent=1)


def merge_documents(base: Any, versions: Sequence[tuple[str, Any]]) -> tuple[Any, tuple[Conflict, ...]]:
    """Three-way merge of branch versions of a JSON document against ``base`` (the module's rules)."""
    conflicts: list[Conflict] = []
    merged = _merge(base, list(versions), "", conflicts)
    return merged, tuple(conflicts)


def version_of(document: Any) -> str:
    """A document's version: the digest of its canonical JSON (``plan.json`` of a branch, of the merge)."""
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:12]


def _merge(base: Any, versions: list[tuple[str, Any]], path: str, conflicts: list[Conflict]) -> Any:
    changed = [(name, value) for name, value in versions if value != base]
    distinct: list[tuple[str, Any]] = []
    for name, value in changed:
        if all(value != seen for _, seen in distinct):
            distinct.append((name, value))
    if not distinct:
        return base
    if len(distinct) == 1:
        return distinct[0][1]
    if _same_node(base, [value for _, value in distinct]):
        merged: dict[str, Any] = {}
        keys = list(dict.fromkeys([*base, *(key for _, value in distinct for key in value)]))
        for key in keys:
            value = _merge(
                base.get(key, _MISSING),
                [(name, version.get(key, _MISSING)) for name, version in versions],
                f"{path}.{key}" if path else key,
                conflicts,
            )
            if value is not _MISSING:
                merged[key] = value
        return merged
    kept, *dropped = distinct
    conflicts.append(Conflict(path or "(document)", kept, tuple(dropped)))
    log.info("merge_conflict", path=path, kept=kept[0], dropped=[name for name, _ in dropped])
    return kept[1]


def _same_node(base: Any, values: list[Any]) -> bool:
    """Whether a value is merged field by field: objects all, of one operator (or none) in every version."""
    if not isinstance(base, dict) or not all(isinstance(value, dict) for value in values):
        return False
    return all(value.get("op") == base.get("op") for value in values)


def _shown(value: Any) -> str:
    text = "(removed)" if value is _MISSING else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
