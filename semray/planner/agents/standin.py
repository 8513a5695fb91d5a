"""A stand-in planner model for tests and benchmarks: gold plans with injected faults.

``StandInPlanner`` answers every agent step from a gold case (question, datasets, plan): the
profiling agent gets the gold datasets, the planning agent the gold plan's operators, the
manipulation agent the gold plan with a fault injected at ``fault_rate`` on its first draft.
A later draft repairs the fault at ``repair_rate`` when the prompt's feedback names it (its
marker), and keeps it otherwise. A judge accepts a plan equal to the gold one and rejects
another naming the difference, each wrong at ``judge_error_rate``. It reads prompts as a model
would (the question, the ``<plan>`` block, the feedback section); it never sees the validator.

>>> model = StandInPlanner([case], fault_rate=1.0, repair_rate=1.0, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from semray.cost_model.prices import TierProfile
from semray.operators.base import walk
from semray.operators.serialize import plan_from_dict
from semray.planner.agents.faults import FAULT_KINDS, Fault, FaultKind, inject
from semray.planner.agents.models import AgentCall
from semray.planner.agents.recorded import estimate_tokens
from semray.planner.agents.semantic import rendered_judgement
from semray.serving.contract import ModelResponse, Usage

_PLAN = re.compile(r"<plan>\n(.*?)\n</plan>", re.DOTALL)
STANDIN_PROFILE = TierProfile("stand-in", 1.0, 4.0, 0.0, float("inf"), 1)
"""Priced like a mid-size hosted model ($1 / $4 per million tokens), so costs are comparable."""


@dataclass(frozen=True, slots=True)
class GoldCase:
    """A question, the datasets it needs and its gold plan document."""

    question: str
    datasets: tuple[str, ...]
    document: dict[str, Any]


@dataclass(slots=True)
class _State:
    fault: Fault | None = None
    drafts: int = 0
    repaired: bool = False
    faults: list[str] = field(default_factory=list)


class StandInPlanner:
    """Answers agent calls from gold cases, with faults and repairs at configured rates."""

    def __init__(
        self,
        cases: Sequence[GoldCase],
        *,
        fault_rate: float = 0.5,
        repair_rate: float = 0.8,
        judge_error_rate: float = 0.0,
        kinds: Sequence[FaultKind] = FAULT_KINDS,
        seed: int = 0,
    ) -> None:
        self._cases = list(cases)
        self._fault_rate, self._repair_rate, self._judge_error = fault_rate, repair_rate, judge_error_rate
        self._kinds = tuple(kinds)
        self._rng = random.Random(seed)
        self._states: dict[str, _State] = {}

    @property
    def profile(self) -> TierProfile:
        return STANDIN_PROFILE

    @property
    def name(self) -> str:
        return "stand-in"

    @property
    def structured_output(self) -> bool:
        return False

    def injected(self, question: str) -> tuple[str, ...]:
        """The faults injected so far for a question (for benchmarks)."""
        return tuple(self._states[question].faults) if question in self._states else ()

    def answer(self, call: AgentCall) -> ModelResponse:
        case = self._case(call.request.prompt)
        key = f"{call.agent}/{call.step}"
        if key == "profiling/choose":
            text = json.dumps({"datasets": list(case.datasets), "reason": "the gold datasets"})
        elif key == "planning/outline":
            nodes = reversed(walk(plan_from_dict(case.document)))
            text = json.dumps({"steps": [{"operator": node.op, "purpose": node.label()} for node in nodes]})
        elif key == "manipulation/fill":
            text = json.dumps(self._draft(case, call.request.prompt))
        elif key == "semantic/judge":
            text = self._judge(case, call.request.prompt)
        else:
            text = "semantic"
        usage = Usage(input_tokens=estimate_tokens(call.request.prompt), output_tokens=estimate_tokens(text))
        return ModelResponse(text=text, value=None, confidence=None, usage=usage, model=self.name)

    def _case(self, prompt: str) -> GoldCase:
        for case in self._cases:
            if case.question in prompt:
                return case
        raise LookupError("the stand-in planner has no gold case for this prompt")

    def _draft(self, case: GoldCase, prompt: str) -> dict[str, Any]:
        state = self._states.setdefault(case.question, _State())
        state.drafts += 1
        if state.drafts == 1:
            if self._rng.random() < self._fault_rate:
                state.fault = self._fault(case)
            return state.fault.document if state.fault else case.document
        feedback = prompt.split("Problems found in it", 1)[-1]
        if state.fault is not None and state.fault.marker in feedback and self._rng.random() < self._repair_rate:
            state.fault, state.repaired = None, True
        return state.fault.document if state.fault else case.document

    def _fault(self, case: GoldCase) -> Fault | None:
        kinds = list(self._kinds)
        self._rng.shuffle(kinds)
        for kind in kinds:
            fault = inject(case.document, kind, self._rng)
            if fault is not None:
                self._states[case.question].faults.append(fault.description)
                return fault
        return None

    def _judge(self, case: GoldCase, prompt: str) -> str:
        found = _PLAN.search(prompt)
        drafted = plan_from_dict(json.loads(found.group(1))) if found else None
        right = drafted == plan_from_dict(case.document)
        if self._rng.random() < self._judge_error:
            right = not right
        if right:
            return rendered_judgement("accept")
        state = self._states.get(case.question)
        marker = state.fault.marker if state and state.fault else "the plan"
        return rendered_judgement(
            "reject",
            f"the plan differs from what the question asks at {marker}",
            f"use the right operator instead of {marker}",
        )
