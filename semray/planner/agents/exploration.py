"""Stop exploring early: a new observation that the earlier ones already predict adds little.

The profiling agent explores the search's candidate datasets in rank order, reading each one's
description (schema, statistics, a sample row). Before it keeps candidate ``k`` (k >= 2), the
scorer tier scores that observation as a continuation of the question twice: after the
observations kept so far, and without them. The confidence divergence is the first confidence
minus the second (``exp(mean token logprob)`` each). Above ``UnitPolicy.stop_divergence`` (0.45)
the earlier observations make the new one largely predictable, so it adds little: the
observation is not kept and exploration stops there; the datasets not reached are not offered to
the choice (nor scored as its alternatives). The first observation is always kept: there is
nothing earlier to predict it.

>>> ExplorationStop(scorer, 0.45).explore("q", [("a", "dataset a ..."), ("b", "dataset b ...")]).kept  # doctest: +SKIP
('a', 'b')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from semray.log import get_logger
from semray.planner.agents.confidence import Scorer, confidence

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ObservationScore:
    """A new observation's confidence with and without the earlier observations as context."""

    name: str
    with_earlier: float
    without_earlier: float

    @property
    def divergence(self) -> float:
        return self.with_earlier - self.without_earlier

    def line(self) -> str:
        return (
            f"{self.name}: {self.with_earlier:.3f} after the earlier observations, {self.without_earlier:.3f} "
            f"without (divergence {self.divergence:.3f})"
        )


@dataclass(frozen=True, slots=True)
class ExplorationStop:
    """The early-stopping rule: the scorer tier and the divergence above which exploration stops."""

    scorer: Scorer
    threshold: float = 0.45

    def score(self, question: str, earlier: Sequence[str], name: str, observation: str) -> ObservationScore:
        """The observation's confidence after the ``earlier`` observations and without them."""
        header = f"Question: {question}\nObservations of the data:\n"
        with_earlier = confidence(self.scorer.token_logprobs(header + "\n\n".join(earlier) + "\n\n", observation))
        without_earlier = confidence(self.scorer.token_logprobs(header, observation))
        return ObservationScore(name, with_earlier, without_earlier)

    def explore(self, question: str, observations: Iterable[tuple[str, str]]) -> Exploration:
        """Keep ``(name, observation)`` pairs in order until one adds little (the first is always kept)."""
        kept: list[tuple[str, str]] = []
        scores: list[ObservationScore] = []
        for name, observation in observations:
            if kept:
                score = self.score(question, [text for _, text in kept], name, observation)
                scores.append(score)
                if score.divergence > self.threshold:
                    log.info("exploration_stopped", at=name, divergence=score.divergence, threshold=self.threshold)
                    return Exploration(tuple(n for n, _ in kept), tuple(scores), name, self.threshold)
            kept.append((name, observation))
        return Exploration(tuple(n for n, _ in kept), tuple(scores), None, self.threshold)


@dataclass(frozen=True, slots=True)
class Exploration:
    """What an exploration kept, every divergence it measured, and where it stopped (None: it did not)."""

    kept: tuple[str, ...]
    scores: tuple[ObservationScore, ...]
    stopped_at: str | None
    threshold: float

    def summary(self) -> str:
        """The recorded step's output: what was explored and why it stopped."""
        lines = [f"explored {', '.join(self.kept)}"]
        lines.extend(score.line() for score in self.scores)
        if self.stopped_at is not None:
            lines.append(f"stopped before {self.stopped_at}: divergence above {self.threshold:.2f}, it adds little")
        return "\n".join(lines)
