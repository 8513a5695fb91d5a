"""The scorer tier's calls as journaled work of the unit that makes them, replayed on resume.

The confidence signals (exploration's early stop, the dataset decision, span divergence) score
text with the scorer tier inside a unit attempt. ``JournaledScorer`` wraps the tier for one ask:
each call is journaled as a ``scorer_call`` record of the current attempt (the scored text's
digest, the logprobs, the endpoint's prompt tokens), and when a resumed ask replays a unit
committed before the crash, a text that unit scored is answered from its record instead of
the scorer, as the unit's model steps are answered from theirs. A unit not committed before
the crash scores again, as it asks its model again. Without a trace it only passes calls on.

>>> scorer = JournaledScorer(inner, units)  # doctest: +SKIP
>>> scorer.token_logprobs("Datasets to use:", " reviews")  # doctest: +SKIP
(-0.2,)
"""

from __future__ import annotations

import threading

from semray.log import get_logger
from semray.planner.agents.ask_journal import score_digest
from semray.planner.agents.confidence import Scorer
from semray.planner.agents.units import UnitRunner

log = get_logger(__name__)


class JournaledScorer:
    """``scorer`` whose calls ``units`` journals and, in a replayed unit, answers from the journal."""

    def __init__(self, scorer: Scorer, units: UnitRunner) -> None:
        self.scorer = scorer
        self.units = units
        self.identity = str(getattr(scorer, "identity", type(scorer).__name__))
        self.calls = 0
        """Calls that reached the scorer (not answered from the journal)."""
        self.replayed = 0
        # One call at a time, so that an endpoint's prompt tokens are told apart per call (the endpoint client
        # serializes its calls too).
        self._lock = threading.Lock()

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        text = score_digest(context, continuation)
        journaled = self.units.replayed_score(text)
        if journaled is not None:
            with self._lock:
                self.replayed += 1
            self.units.journal_score(text, journaled, self.identity, 0, replayed=True)
            return journaled
        with self._lock:
            before = _prompt_tokens(self.scorer)
            values = tuple(self.scorer.token_logprobs(context, continuation))
            tokens = _prompt_tokens(self.scorer) - before
            self.calls += 1
        self.units.journal_score(text, values, self.identity, tokens, replayed=False)
        return values


def _prompt_tokens(scorer: Scorer) -> int:
    """What an endpoint scorer has been paid for so far (``EndpointScorer.prompt_tokens``); 0 for a local one."""
    tokens = getattr(scorer, "prompt_tokens", 0)
    return tokens if isinstance(tokens, int) else 0
