"""The one door every agent step goes through: it runs the step and records it in the trace.

A step is a profiling probe, a plan draft, a manipulation pass, a validation, a memory write or
an execution. ``StepRunner.run`` performs it (a model call or local work), prices the model's
tokens with the tier's ``cost_model`` profile, checks the caller's budget, and appends a frozen
``AgentStep`` to the trace. Nothing else calls a model or appends to a trace, so a later
commit-or-retry unit (``units.py``) wraps this one method: it answers steps of units committed
before a crash from the journal (``replay``) and journals every step (``listeners``).

Sub-agents run on forks of one runner (``fork``): a fork shares the model, the budget and the
trace (appended under a lock, so forks may run in threads at once) and tags its steps with its
``branch``, which the unit journal records and replays by.

>>> runner = StepRunner(model=None)
>>> runner.run("memory", "recall", {"task": "q"}, lambda: ("2 hints", None)).output
'2 hints'
>>> runner.trace.steps[0].dollars
0.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from semray.log import get_logger
from semray.planner.agents.errors import AgentError, BudgetExceededError
from semray.planner.agents.models import AgentCall, AgentModel
from semray.serving.contract import ModelRequest, ModelResponse

log = get_logger(__name__)

AgentName = Literal["profiling", "planning", "manipulation", "grammar", "semantic", "memory", "execution", "reflection"]
LocalWork = Callable[[], tuple[str, str | None]]
"""Local work returns (output text, error text or None)."""
Replay = Callable[[str, str, str], ModelResponse | None]
"""A committed step's journaled response for (agent, kind, branch), or None to call the model (``units.py``)."""
StepListener = Callable[["AgentStep", ModelResponse | None], None]
"""Told of every recorded step, with the model's response (None for local work): the unit journal."""


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One recorded step: what went in, what came out, what it cost."""

    index: int
    agent: str
    kind: str
    inputs: tuple[tuple[str, str], ...]
    output: str
    error: str | None = None
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    seconds: float = 0.0
    replayed: bool = False
    """Answered from the journal of a committed unit (a resumed ask): not paid again."""
    branch: str = ""
    """The sub-agent's branch that made the step ("": the ask's own agents; ``StepRunner.fork``)."""

    def line(self) -> str:
        """``3 manipulation/fill  1,200 in  300 out  $0.0041`` for the CLI and EXPLAIN."""
        cost = f"{self.input_tokens:,} in  {self.output_tokens:,} out  ${self.dollars:.4f}" if self.model else "local"
        status = f"  error: {self.error[:120]}" if self.error else ""
        where = f" [{self.branch}]" if self.branch else ""
        return f"{self.index:>2} {self.agent}/{self.kind}{where}  {cost}{status}"


@dataclass(slots=True)
class Trace:
    """Steps in order; only ``StepRunner`` appends."""

    steps: list[AgentStep] = field(default_factory=list)

    @property
    def dollars(self) -> float:
        return sum(step.dollars for step in self.steps)

    @property
    def tokens(self) -> int:
        return sum(step.input_tokens + step.output_tokens for step in self.steps)

    def of(self, agent: str) -> tuple[AgentStep, ...]:
        return tuple(step for step in self.steps if step.agent == agent)


@dataclass(frozen=True, slots=True)
class ModelOutcome:
    """What a model step gave the agent: the response and the recorded step."""

    response: ModelResponse
    step: AgentStep


class StepRunner:
    """Runs and records steps against one model and an optional budget in dollars."""

    def __init__(self, model: AgentModel | None, max_cost: float | None = None) -> None:
        self.model = model
        self.max_cost = max_cost
        self.trace = Trace()
        self.replay: Replay | None = None
        self.listeners: list[StepListener] = []
        self.branch = ""
        self._lock = threading.Lock()

    def fork(self, branch: str, *, journaled: bool = True) -> StepRunner:
        """A runner for a sub-agent: the same model, budget and trace, its steps tagged ``branch``.

        ``journaled`` keeps this runner's replay and listeners (the sub-agent's steps belong to the unit
        attempt that forked it); False leaves them for the sub-agent's own units to set (``UnitRunner.fork``).
        A fork of a fork is tagged with both names: ``runner.fork("a").fork("b").branch == "a/b"``.
        """
        child = StepRunner(self.model, self.max_cost)
        child.trace, child._lock = self.trace, self._lock
        child.branch = f"{self.branch}/{branch}" if self.branch else branch
        if journaled:
            child.replay, child.listeners = self.replay, self.listeners
        return child

    def run(self, agent: AgentName, kind: str, inputs: Mapping[str, str], work: LocalWork) -> AgentStep:
        """A local step (a catalog probe, a validation, a memory write)."""
        started = time.perf_counter()
        output, error = work()
        return self._record(agent, kind, inputs, output, error, None, time.perf_counter() - started)

    def ask(self, agent: AgentName, kind: str, inputs: Mapping[str, str], request: ModelRequest) -> ModelOutcome:
        """A model step: the request goes to the model; its tokens are priced and recorded."""
        if self.model is None:
            raise AgentError(f"step {agent}/{kind} needs a model and this runner has none")
        if self.max_cost is not None and self.trace.dollars >= self.max_cost:
            raise BudgetExceededError(
                f"the planning steps spent ${self.trace.dollars:.4f}, the --max-cost of ${self.max_cost:.4f}, "
                f"before {agent}/{kind}; raise --max-cost or ask a narrower question"
            )
        started = time.perf_counter()
        replayed = self.replay(agent, kind, self.branch) if self.replay is not None else None
        response = replayed if replayed is not None else self.model.answer(AgentCall(agent, kind, request))
        step = self._record(
            agent,
            kind,
            {**inputs, "prompt": request.prompt},
            response.text,
            response.error,
            response,
            time.perf_counter() - started,
            replayed is not None,
        )
        return ModelOutcome(response, step)

    def _record(
        self,
        agent: str,
        kind: str,
        inputs: Mapping[str, str],
        output: str,
        error: str | None,
        response: ModelResponse | None,
        seconds: float,
        replayed: bool = False,
    ) -> AgentStep:
        tokens_in = tokens_out = 0
        dollars = 0.0
        model = ""
        if response is not None and self.model is not None:
            usage = response.usage
            tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
            dollars = 0.0 if replayed else self.model.profile.dollars(tokens_in, tokens_out, usage.gpu_seconds)
            model = response.model or self.model.name
        with self._lock:  # forks in threads append to one trace
            step = AgentStep(
                index=len(self.trace.steps),
                agent=agent,
                kind=kind,
                inputs=tuple(sorted(inputs.items())),
                output=output,
                error=error,
                model=model,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                dollars=dollars,
                seconds=seconds,
                replayed=replayed,
                branch=self.branch,
            )
            self.trace.steps.append(step)
        for listener in self.listeners:
            listener(step, response)
        log.debug("agent_step", agent=agent, kind=kind, tokens=tokens_in + tokens_out, dollars=dollars, error=error)
        return step
