"""A stand-in planner model for tests and benchmarks: gold plans with injected faults.

``StandInPlanner`` answers every agent step from a gold case (question, datasets, plan): the
profiling agent gets the gold datasets, the planning agent the gold plan's operators, the
manipulation agent the gold plan with a fault injected at ``fault_rate`` on its first draft.
A later draft repairs the fault at ``repair_rate`` when the prompt's feedback names it (its
marker), and keeps it otherwise. A judge accepts a plan equal to the gold one and rejects
another naming the difference, each wrong at ``judge_error_rate``. It reads prompts as a model
would (the question, the ``<plan>`` block, the hints and feedback sections); it never sees the
validator.

Failure modes the ablations of ``benchmarks/planning.py`` measure, all off by default:
``recall_rate`` (a first draft avoids its fault when the prompt's hints, i.e. memory, name its
marker), ``refault_rate`` (a repair breaks something else: a new fault), ``relapse_rate`` (a draft
copies back an earlier faulty draft it still sees in its prompt), ``dataset_error_rate`` (the
profiling answer picks a wrong dataset; a profiling sub-agent's judgement of its one dataset,
``profiling/inspect``, is wrong at the same rate, drawn from a stream of its own per dataset so that
sub-agents answered in any order give the same answers). ``StandInScorer`` scores dataset choices
for the confidence signal, preferring the gold one except at its ``error_rate``. Calls are answered
one at a time (a lock): sub-agents may call from threads.

>>> model = StandInPlanner([case], fault_rate=1.0, repair_rate=1.0, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
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
_INSPECTED = re.compile(r"The dataset \(the only one you see\):\ndataset (\S+):")
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
    earlier: list[Fault] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    """Drafts: faults, repairs, relapses."""
    choosing: random.Random = field(default_factory=random.Random)
    judging: random.Random = field(default_factory=random.Random)
    last: dict[str, Any] | None = None


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
        recall_rate: float = 0.0,
        refault_rate: float = 0.0,
        relapse_rate: float = 0.0,
        dataset_error_rate: float = 0.0,
    ) -> None:
        self._cases = list(cases)
        self._fault_rate, self._repair_rate, self._judge_error = fault_rate, repair_rate, judge_error_rate
        self._recall, self._refault, self._relapse = recall_rate, refault_rate, relapse_rate
        self._dataset_error = dataset_error_rate
        self._datasets = tuple(dict.fromkeys(name for case in self._cases for name in case.datasets))
        self._kinds = tuple(kinds)
        self._seed = seed
        self._states: dict[str, _State] = {}
        self._inspections: dict[tuple[str, str], random.Random] = {}
        self._lock = threading.Lock()

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
        with self._lock:
            return self._answer(call)

    def _answer(self, call: AgentCall) -> ModelResponse:
        case = self._case(call.request.prompt)
        key = f"{call.agent}/{call.step}"
        if key == "profiling/inspect":
            text = json.dumps(self._inspect(case, call.request.prompt))
        elif key == "profiling/choose":
            text = json.dumps({"datasets": list(self._choose(case)), "reason": "the datasets the question names"})
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

    def _state(self, case: GoldCase) -> _State:
        # Random streams per question, seed and purpose: configurations compared at one seed meet the same
        # first drafts, however many profiling or judging calls each makes.
        if case.question not in self._states:
            self._states[case.question] = _State(
                rng=random.Random(f"{self._seed}/{case.question}/draft"),
                choosing=random.Random(f"{self._seed}/{case.question}/choose"),
                judging=random.Random(f"{self._seed}/{case.question}/judge"),
            )
        return self._states[case.question]

    def _choose(self, case: GoldCase) -> tuple[str, ...]:
        rng = self._state(case).choosing
        others = [name for name in self._datasets if name not in case.datasets]
        if not others or rng.random() >= self._dataset_error:
            return case.datasets
        return (*case.datasets[:-1], rng.choice(others))

    def _inspect(self, case: GoldCase, prompt: str) -> dict[str, Any]:
        """A profiling sub-agent's judgement of its dataset: needed when gold, wrong at ``dataset_error_rate``."""
        found = _INSPECTED.search(prompt)
        name = found.group(1) if found else ""
        stream = self._inspections.setdefault(
            (case.question, name), random.Random(f"{self._seed}/{case.question}/{name}/inspect")
        )
        needed = name in case.datasets
        if stream.random() < self._dataset_error:
            needed = not needed
        text = json.dumps(case.document)
        schema = prompt.split("The dataset (the only one you see):", 1)[-1].split("Domain notes", 1)[0]
        columns = [column for column in re.findall(r"\n  - (\w+) ", schema) if column in text] if needed else []
        return {
            "relevant": needed,
            "columns": columns,
            "notes": f"{name} holds what the question asks" if needed else "",
        }

    def _draft(self, case: GoldCase, prompt: str) -> dict[str, Any]:
        state = self._state(case)
        state.drafts += 1
        if state.drafts == 1:
            if state.rng.random() < self._fault_rate:
                state.fault = self._fault(case)
            hints = prompt.split("Hints:", 1)[-1].split("Previous draft:", 1)[0]
            heeds = state.rng.random() < self._recall  # drawn always: the stream stays the same with or without memory
            if state.fault is not None and state.fault.marker in hints and heeds:
                state.fault = None  # memory warned about this very mistake
            return self._answered(state, case)
        feedback = prompt.split("Problems found in it", 1)[-1]
        if state.fault is not None and state.fault.marker in feedback and state.rng.random() < self._repair_rate:
            state.earlier.append(state.fault)
            state.fault, state.repaired = None, True
            if state.rng.random() < self._refault:
                state.fault = self._fault(case)
        # An older faulty draft still in the prompt (not the one just answered) may be copied back.
        seen = [
            fault
            for fault in state.earlier
            if fault is not state.fault and fault.document != state.last and _shown(fault, prompt)
        ]
        if seen and state.rng.random() < self._relapse:
            state.fault = state.rng.choice(seen)
        return self._answered(state, case)

    def _answered(self, state: _State, case: GoldCase) -> dict[str, Any]:
        state.last = state.fault.document if state.fault else case.document
        return state.last

    def _fault(self, case: GoldCase) -> Fault | None:
        state = self._state(case)
        kinds = list(self._kinds)
        state.rng.shuffle(kinds)
        for kind in kinds:
            fault = inject(case.document, kind, state.rng)
            if fault is not None:
                state.faults.append(fault.description)
                return fault
        return None

    def _judge(self, case: GoldCase, prompt: str) -> str:
        found = _PLAN.search(prompt)
        drafted = plan_from_dict(json.loads(found.group(1))) if found else None
        right = drafted == plan_from_dict(case.document)
        state = self._state(case)
        if state.judging.random() < self._judge_error:
            right = not right
        if right:
            return rendered_judgement("accept")
        marker = state.fault.marker if state.fault else "the plan"
        return rendered_judgement(
            "reject",
            f"the plan differs from what the question asks at {marker}",
            f"use the right operator instead of {marker}",
        )


def _shown(fault: Fault, prompt: str) -> bool:
    """Whether a faulty draft the stand-in wrote is still in the prompt (a draft is its JSON text)."""
    return json.dumps(fault.document) in prompt


class StandInScorer:
    """A scorer tier for the stand-in: a dataset choice scores high when it is the gold one.

    ``token_logprobs`` reads the question from the context (``Question: ...``) and gives each token
    of the gold choice logprob ln 0.95 and of any other ln 0.1, the two swapped at ``error_rate``.
    A plan span (``spans.py``) scores ln 0.9 when at least half of its words of three letters or
    more appear in the context (the evidence grounds it) and ln 0.2 otherwise; an observation of
    the exploration (``exploration.py``) scores ln 0.1 whatever the context, so exploration never
    stops early. Neither draws from the choice's random stream.
    """

    def __init__(self, cases: Sequence[GoldCase], *, error_rate: float = 0.0, seed: int = 0) -> None:
        self._cases = list(cases)
        self._error = error_rate
        self._rng = random.Random(seed)

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        tokens = max(1, len(continuation.split()))
        if "In the plan answering it" in context:
            words = [word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]{2,}", continuation)]
            found = sum(word in context.lower() for word in words)
            return (math.log(0.9 if words and 2 * found >= len(words) else 0.2),) * tokens
        if "Observations of the data:" in context:
            return (math.log(0.1),) * tokens
        gold = next((case for case in self._cases if case.question in context), None)
        right = gold is not None and continuation.strip() == ", ".join(gold.datasets)
        if self._rng.random() < self._error:
            right = not right
        return (math.log(0.95 if right else 0.1),) * max(1, len(continuation.split()))
