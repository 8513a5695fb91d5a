"""The planning loop's bounds and switches (``loop.py``), sub-agents included.

>>> LoopConfig().drafts, LoopConfig(candidates=3).candidates
(3, 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semray.planner.agents.errors import RetryLimitError
from semray.planner.agents.skills import SIMILARITY
from semray.planner.agents.subagents import PARALLELISM
from semray.planner.agents.units import UnitPolicy


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Bounds and switches of the loop (the switches serve the ablations of ``benchmarks/planning.py``)."""

    max_iterations: int | None = None
    """Drafts of the plan unit; None: as many as any unit's attempts (``units.max_retries`` + 1). More than
    that is refused: the plan unit honours the retry limit like every other unit."""
    judges: int = 3
    semantic: bool = True
    memory: bool = True
    units: UnitPolicy = field(default_factory=UnitPolicy)
    isolation: bool = True
    """A draft sees only the last failed draft and its verdict; False (an ablation): every failed draft and
    every issue so far stay in later prompts, and memory writes are not staged behind commits."""
    skills: bool = True
    """With long-term memory, a plan that was validated and ran is stored as a skill and a question it fits
    reuses it (``skills.py``) instead of being planned."""
    candidates: int = 1
    """Competitive sub-agents (``competition.py``): drafts per attempt of the plan unit, drafted at once, each
    from an isolated context and validated alone; the cheapest valid one by the cost model wins. 1: one draft."""
    collaborators: int = 1
    """Collaborative sub-agents (``collaboration.py``): a repair attempt whose feedback names problems at two or
    more places of the failed draft splits them among up to this many collaborators, each on its own branch of
    that draft, merged into one draft. 1: one repair draft sees every problem."""
    dataset_agents: int = 0
    """Independent sub-agents (``dataset_agents.py``): the best this many candidate datasets are each read by a
    profiling sub-agent of its own, at once, in place of one choice over all. 0: one choice."""
    parallelism: int = PARALLELISM
    """Sub-agents of any kind running at once (threads); 1: one after another."""
    skill_similarity: float = SIMILARITY
    """How alike a question of other words must be to a skill's question for the skill to be re-filled for it."""
    reflection: bool = False
    """With an executor, the model reads each run's answer and says whether it answers the question
    (``reflection.py``); an implausible one sends its reason to a new plan unit. Off here: the stand-in and the
    simulator cannot reflect (``semray.ask`` turns it on for a real LLM tier, ``Settings.agent_reflection``)."""

    def __post_init__(self) -> None:
        if self.candidates < 1:
            raise RetryLimitError(f"candidates is {self.candidates}; the plan unit drafts at least 1 per attempt")
        if self.collaborators < 1 or self.dataset_agents < 0 or self.parallelism < 1:
            raise RetryLimitError(
                f"collaborators {self.collaborators}, dataset_agents {self.dataset_agents}, parallelism "
                f"{self.parallelism}: collaborators and parallelism are at least 1, dataset_agents at least 0"
            )
        attempts = self.units.max_retries + 1
        if self.max_iterations is not None and not 1 <= self.max_iterations <= attempts:
            raise RetryLimitError(
                f"max_iterations {self.max_iterations} is outside 1..{attempts}: a unit makes at most "
                f"max_retries + 1 = {attempts} attempts; raise agent_max_retries (SEMRAY_AGENT_MAX_RETRIES) for more"
            )

    @property
    def drafts(self) -> int:
        """How many drafts the plan unit may make: ``max_iterations``, else the units' retry limit + 1."""
        return self.units.max_retries + 1 if self.max_iterations is None else self.max_iterations
