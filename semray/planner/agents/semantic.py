"""The semantic validator: k independent model judgements of a plan against the question.

Each judge sees the question, the guidelines retrieved for it, the plan as a tree and as JSON,
and answers ``accept`` or ``reject`` with the mismatch and a correction (JSON, strictly parsed).
The plan passes when a strict majority accepts; a rejection's issue carries the mismatch and the
correction of the first rejecting judge. A judge whose reply cannot be read counts as neither.

>>> majority(("accept", "reject", "accept"))
True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from semray.operators import Node, plan_to_json, render_tree
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.json_repair import JsonRepairError, decode_json
from semray.planner.agents.prompts import PROMPTS
from semray.planner.agents.step import StepRunner
from semray.serving.contract import ModelRequest, OutputConstraint


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judges' votes and, when rejected, the issue fed back."""

    votes: tuple[str, ...]
    issue: PlanIssue | None

    @property
    def accepted(self) -> bool:
        return self.issue is None


def majority(votes: Sequence[str]) -> bool:
    """Accepted when more than half of all judges accept (an unreadable vote does not accept)."""
    return sum(vote == "accept" for vote in votes) * 2 > len(votes)


def judge_plan(
    runner: StepRunner, question: str, plan: Node, guidelines: Sequence[str], judges: int = 3, structured: bool = True
) -> Verdict:
    """Ask ``judges`` independent judgements; each is one recorded step."""
    prompt = PROMPTS["judge"]
    assert prompt.output_schema is not None
    votes: list[str] = []
    rejection: PlanIssue | None = None
    document = plan_to_json(plan, indent=None)
    for number in range(1, judges + 1):
        text = prompt.render(
            judge=str(number),
            judges=str(judges),
            question=question,
            guidelines="\n".join(f"- {line}" for line in guidelines) or "none",
            tree=render_tree(plan),
            plan=document,
        )
        constraint = OutputConstraint.schema(prompt.output_schema) if structured else OutputConstraint.text()
        request = ModelRequest(
            prompt=text,
            system=prompt.system,
            constraint=constraint,
            max_tokens=prompt.max_tokens,
            temperature=0.7,
            request_id=f"judge-{number}",
        )
        outcome = runner.ask("semantic", "judge", {"question": question, "judge": str(number)}, request)
        vote, mismatch, correction = _read(outcome.response.text)
        votes.append(vote)
        if vote == "reject" and rejection is None:
            rejection = PlanIssue("plan", mismatch or "a judge rejected the plan", "judge", correction)
    accepted = majority(votes)
    return Verdict(tuple(votes), None if accepted else rejection or PlanIssue("plan", "no majority accepted", "judge"))


def _read(text: str) -> tuple[str, str, str]:
    try:
        value, _ = decode_json(text)
    except JsonRepairError:
        return "unreadable", "", ""
    if not isinstance(value, dict) or value.get("verdict") not in ("accept", "reject"):
        return "unreadable", "", ""
    return str(value["verdict"]), str(value.get("mismatch", "")), str(value.get("correction", ""))


def rendered_judgement(verdict: str, mismatch: str = "", correction: str = "") -> str:
    """A judge's reply as JSON (what a stand-in judge answers)."""
    return json.dumps({"verdict": verdict, "mismatch": mismatch, "correction": correction})
