"""The scorer tier of the confidence signals: which model scores text, from the settings and the model profile.

The signals (``confidence.py``, ``spans.py``, ``exploration.py``) need a model that returns token
logprobs for given text. Two kinds serve: a small local transformers causal LM by path
(``HFScorer``: ``Settings.agent_scorer_model``, or ``[scorer] backend = "hf"`` with ``model_path``
in the model profile), or an endpoint's prompt logprobs (``EndpointScorer``: ``[scorer] backend =
"openai"`` with ``base_url``, ``model`` and ``api_key_env``; ``serving/prompt_logprobs.py``). The
settings' path wins over the profile's table.

``EndpointScorer`` sends context + continuation as one prompt and keeps the logprobs of the trailing
tokens that spell the continuation (counted in characters from the end, as the server decoded them;
a token that straddles the boundary counts as the continuation's). For the same numbers it makes the
same decisions as a local scorer (``tests/planner/agents/test_agents_scorer_endpoint.py``).
``check_scorer`` is ``semray models check``'s row for the tier: one probe scored, or why it cannot be.

>>> scorer_for(Settings(), ServingConfig()) is None  # doctest: +SKIP
True
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from semray.errors import SemrayError
from semray.log import get_logger
from semray.planner.agents.confidence import HFScorer, Scorer, ScorerError
from semray.serving.checking import TierCheck
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.errors import PromptLogprobsError, ServingConfigError
from semray.serving.prompt_logprobs import PromptLogprobClient, PromptLogprobs

if TYPE_CHECKING:
    from semray.settings import Settings

log = get_logger(__name__)


class EndpointScorer:
    """Token logprobs of a continuation from an endpoint's prompt logprobs, e.g. ``EndpointScorer(tier)``."""

    def __init__(self, tier: TierConfig, client: PromptLogprobClient | None = None) -> None:
        if tier.backend != "openai":
            raise ServingConfigError(f"an endpoint scorer needs an 'openai' tier; {tier.model!r} is {tier.backend!r}")
        self._client = client or PromptLogprobClient(tier)
        self.identity = self._client.identity

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        if not continuation:
            raise ScorerError("the continuation to score is empty")
        return continuation_logprobs(self._client.score(context + continuation), continuation)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens the endpoint scored so far (what the scoring cost)."""
        return self._client.prompt_tokens

    def close(self) -> None:
        log.info("scorer_endpoint_used", endpoint=self.identity, calls=self._client.calls, tokens=self.prompt_tokens)
        self._client.close()


def continuation_logprobs(scored: PromptLogprobs, continuation: str) -> tuple[float, ...]:
    """The logprobs of the trailing tokens of a scored prompt whose text covers ``continuation``.

    >>> continuation_logprobs(PromptLogprobs(("Datasets:", " reviews"), (None, -0.2)), " reviews")
    (-0.2,)
    """
    covered, start = 0, len(scored.tokens)
    while start > 0 and covered < len(continuation):
        start -= 1
        covered += len(scored.tokens[start])
    if covered < len(continuation):
        raise ScorerError(
            f"the endpoint's tokens spell {covered} characters, fewer than the {len(continuation)} of the continuation "
            "to score: its echoed tokens are not the prompt's text"
        )
    values = scored.logprobs[start:]
    if values and values[0] is None:
        values = values[1:]  # the prompt's first token (a continuation scored with no context): nothing predicts it
    if not values or any(value is None for value in values):
        raise ScorerError(f"the endpoint gave no logprob for a token of the continuation {continuation[:80]!r}")
    return tuple(value for value in values if value is not None)


def scorer_for(settings: Settings, serving: ServingConfig) -> Scorer | None:
    """The scorer tier the settings or the profile name (module docstring); None: no confidence signals."""
    if settings.agent_scorer_model is not None:
        return HFScorer(settings.agent_scorer_model)
    tier = serving.scorer
    if tier is None:
        return None
    if tier.backend == "openai":
        return EndpointScorer(tier)
    if tier.backend == "hf" and tier.model_path is not None:
        return HFScorer(tier.model_path, tier.device)
    raise ServingConfigError(
        f"the [scorer] table of the model profile has backend {tier.backend!r}"
        f'{" without model_path" if tier.backend == "hf" else ""}: a scorer is backend = "openai" (an endpoint\'s '
        'prompt logprobs: base_url, model, api_key_env) or backend = "hf" with model_path (a local transformers '
        "causal LM)"
    )


SCORER_PROBE = ("Question: What is the average rating of each product?\nDatasets to use:", " reviews")
"""What ``check_scorer`` scores: a context and a continuation, as the dataset decision scores them."""


def check_scorer(settings: Settings, serving: ServingConfig) -> TierCheck | None:
    """``semray models check``'s row for the scorer tier (None: none is set): it scores ``SCORER_PROBE`` once.

    An endpoint that does not answer (down, 404, a refused key) and one that answers but cannot score (no
    echoed prompt logprobs) both fail, each with the error ``semray ask`` would raise, naming the URL and what
    to set; an endpoint that scores says how many tokens of the continuation it scored.
    """
    tier = serving.scorer
    if settings.agent_scorer_model is not None:
        tier = TierConfig(backend="hf", model=settings.agent_scorer_model.name, model_path=settings.agent_scorer_model)
    if tier is None:
        return None
    where = tier.base_url or (str(tier.model_path) if tier.model_path is not None else "-")
    prices = "not priced (an endpoint's prompt tokens are logged, not counted in dollars)"
    if tier.backend != "openai":
        prices = "local (no price)"
    scorer: Scorer | None = None
    started = time.perf_counter()
    try:
        scorer = scorer_for(settings, serving)
        if scorer is None:  # not reached: a tier is set
            return None
        values = scorer.token_logprobs(*SCORER_PROBE)
        status = f"ok (scores text: {len(values)} token logprob(s) for {SCORER_PROBE[1]!r})"
        logprobs: bool | None = True
    except PromptLogprobsError as error:
        status, logprobs = f"FAILED: the endpoint answers but cannot score: {error}", False
    except (SemrayError, ScorerError) as error:
        status, logprobs = f"FAILED: {error}", None
    except Exception as error:  # a local model's own failure (import, weights, device) is the answer here
        status, logprobs = f"FAILED: {type(error).__name__}: {error}", None
    finally:
        if isinstance(scorer, EndpointScorer):
            scorer.close()
    return TierCheck(
        tier="scorer",
        backend=tier.backend,
        model=tier.model,
        where=where,
        context_length=tier.context_length,
        context_source="profile" if tier.context_length is not None else "",
        prices=prices,
        latency_s=time.perf_counter() - started if status.startswith("ok") else None,
        logprobs=logprobs,
        status=status,
    )


def scorer_identity(settings: Settings, serving: ServingConfig) -> str | None:
    """What names the scorer tier in an ask's key (a resumed ask scores with the same one)."""
    if settings.agent_scorer_model is not None:
        return str(settings.agent_scorer_model)
    tier = serving.scorer
    if tier is None:
        return None
    return f"{tier.backend}:{tier.base_url or tier.model_path}:{tier.model}"
