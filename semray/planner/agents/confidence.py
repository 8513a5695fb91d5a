"""Confidence signals: exp(mean token logprob) of a text, scored by a scorer tier, and decision divergence.

A ``Scorer`` returns the logprob of each token of a continuation given a context (a local
transformers model by path: ``HFScorer``). The confidence of an output is ``exp(mean token
logprob)``. For a critical choice (the datasets chosen, a filter predicate, a join key), the
executed choice and the alternatives seen in exploration are each scored as continuations of the
task and its evidence; their confidences, normalised over the options, give the chosen one's
margin over the best alternative. A margin under ``UnitPolicy.decision_margin`` sends the unit
back with the evidence as feedback.

>>> decision_divergence(FixedScorer({"a": -0.1, "b": -2.0}), "ctx", "a", ("b",)).margin > 0.5  # doctest: +SKIP
True
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from semray.planner.agents.errors import AgentError
from semray.serving.contract import confidence_from_logprobs


class ScorerError(AgentError):
    """The scorer model cannot be loaded or cannot score a text (empty continuation, no model folder)."""


class Scorer(Protocol):
    """A model that returns the logprob of each token of ``continuation`` after ``context``."""

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]: ...


def confidence(logprobs: Sequence[float]) -> float:
    """``exp(mean token logprob)``: ``confidence((math.log(0.5), math.log(0.5))) == 0.5``."""
    value = confidence_from_logprobs(tuple(logprobs))
    if value is None:
        raise ScorerError("confidence needs at least one token logprob; the continuation was empty")
    return value


@dataclass(frozen=True, slots=True)
class DecisionScore:
    """The chosen option's confidence, each alternative's, and the normalised margin in [-1, 1]."""

    chosen: str
    chosen_confidence: float
    alternatives: tuple[tuple[str, float], ...]
    margin: float

    @property
    def best_alternative(self) -> str | None:
        return max(self.alternatives, key=lambda item: item[1])[0] if self.alternatives else None

    def evidence(self) -> str:
        """A feedback line: how the options scored."""
        scored = ", ".join(f"{option!r} {value:.3f}" for option, value in self.alternatives)
        chosen = f"the choice {self.chosen!r} scored {self.chosen_confidence:.3f}"
        return f"{chosen} against {scored} (margin {self.margin:.3f})"


def decision_divergence(scorer: Scorer, context: str, chosen: str, alternatives: Sequence[str]) -> DecisionScore:
    """Score the chosen option and each alternative as continuations of ``context``.

    Confidences are normalised over all options; the margin is the chosen option's share minus the
    best alternative's (1.0 without alternatives: nothing to diverge from).
    """
    options = [chosen, *(option for option in dict.fromkeys(alternatives) if option != chosen)]
    scores = [confidence(scorer.token_logprobs(context, option)) for option in options]
    total = sum(scores)
    shares = [score / total for score in scores] if total > 0 else [1.0 / len(scores)] * len(scores)
    margin = shares[0] - max(shares[1:]) if len(shares) > 1 else 1.0
    return DecisionScore(chosen, scores[0], tuple(zip(options[1:], scores[1:], strict=True)), margin)


class HFScorer:
    """Token logprobs from a local transformers causal LM, e.g. ``HFScorer(Path("/models/qwen"))``."""

    def __init__(self, path: Path, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = path.expanduser()
        if not folder.exists():
            raise ScorerError(f"scorer model folder {folder} does not exist; pass a local transformers model folder")
        try:
            self._tokenizer: Any = AutoTokenizer.from_pretrained(str(folder))
            model: Any = AutoModelForCausalLM.from_pretrained(str(folder))
        except (OSError, ValueError) as error:
            raise ScorerError(f"cannot load the scorer model at {folder}: {error}") from error
        self._model: Any = model.to(device).eval()
        config = model.config
        self._positions: int | None = getattr(config, "n_positions", None) or getattr(
            config, "max_position_embeddings", None
        )
        self._torch: Any = torch
        self._device = device
        self._lock = threading.Lock()

    def token_logprobs(self, context: str, continuation: str) -> tuple[float, ...]:
        """One forward pass over context + continuation; the logprobs of the continuation's tokens.

        A context longer than the model's positions leaves out its oldest tokens (the continuation
        and the text just before it are what it is scored on).
        """
        context_ids = self._tokenizer(context, add_special_tokens=False)["input_ids"]
        target_ids = self._tokenizer(continuation, add_special_tokens=False)["input_ids"]
        if not target_ids:
            raise ScorerError(f"the continuation {continuation!r} has no tokens for the scorer's tokenizer")
        if not context_ids:
            bos = (
                self._tokenizer.bos_token_id
                if self._tokenizer.bos_token_id is not None
                else self._tokenizer.eos_token_id
            )
            context_ids = [bos]
        if self._positions is not None:
            room = self._positions - len(target_ids)
            if room < 1:
                raise ScorerError(
                    f"the continuation has {len(target_ids)} tokens, more than the scorer's {self._positions} "
                    "positions leave room for; use a scorer model with a longer context"
                )
            context_ids = context_ids[-room:]
        torch = self._torch
        ids = torch.tensor([[*context_ids, *target_ids]], device=self._device)
        with self._lock, torch.no_grad():
            logits = self._model(ids).logits[0]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        start = len(context_ids)
        values = [float(logprobs[start + i - 1, token]) for i, token in enumerate(target_ids)]
        if not all(math.isfinite(value) for value in values):
            raise ScorerError("the scorer returned a non-finite logprob")
        return tuple(values)
