"""Deterministic draws: which answers are wrong and how confident each answer sounds.

Every draw is a pure function of (seed, model, task, sorted row ids) — never of the prompt's
wording — hashed with BLAKE2b into a uniform number in (0, 1). So every system asking the same
question of the same model gets the same answer, in any process.

Confidence: with ``u`` a second, independent uniform and ``z = Phi^-1(u)``,
``x = mu + sigma * z`` where ``mu = correct_mean_logit`` for a correct answer and
``mu = correct_mean_logit - sqrt(2) * sigma * Phi^-1(auroc)`` for a wrong one. The reported
confidence is ``c = 1/n + (1 - 1/n) * sigmoid(x)`` for an answer among ``n`` options (so the chosen
token always outranks the alternatives). ``c`` is increasing in ``x``, hence
``AUROC = P(x_correct > x_wrong) = Phi(gap / (sqrt(2) * sigma)) = auroc``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from statistics import NormalDist

from semray.serving.simulator.config import ConfidenceProfile

_STANDARD_NORMAL = NormalDist()
_TWO_64 = float(2**64)


def unit_draw(*parts: str | int) -> float:
    """A uniform number in (0, 1) fixed by ``parts``, the same in every process.

    >>> unit_draw("error", 0, "sim-small", "sentiment", "reviews:1") == unit_draw(
    ...     "error", 0, "sim-small", "sentiment", "reviews:1")
    True
    """
    digest = hashlib.blake2b(json.dumps(parts).encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / _TWO_64


def question_key(seed: int, model: str, task: str, row_ids: Sequence[str]) -> tuple[str | int, ...]:
    """The identity of a question: what every draw about its answer depends on."""
    return (seed, model, task, *sorted(row_ids))


def is_wrong(question: tuple[str | int, ...], error_rate: float) -> bool:
    """True when this question is one the model gets wrong: ``hash(question) < error_rate``."""
    return unit_draw("error", *question) < error_rate


def confidence_logit(question: tuple[str | int, ...], correct: bool, profile: ConfidenceProfile) -> float:
    """The latent confidence logit ``x ~ N(mu_correct or mu_wrong, sigma)``, drawn from the question's hash."""
    z = _STANDARD_NORMAL.inv_cdf(unit_draw("confidence", *question))
    mean = profile.correct_mean_logit if correct else profile.wrong_mean_logit
    return mean + profile.sigma * z


def confidence_from_logit(logit: float, options: int) -> float:
    """``1/n + (1 - 1/n) * sigmoid(logit)``: a probability above every alternative's share."""
    floor = 1.0 / max(options, 2)
    if logit >= 0:
        sigmoid = 1.0 / (1.0 + math.exp(-logit))
    else:
        exp = math.exp(logit)
        sigmoid = exp / (1.0 + exp)
    return floor + (1.0 - floor) * sigmoid


def confidence(question: tuple[str | int, ...], correct: bool, profile: ConfidenceProfile, options: int) -> float:
    """The probability reported for the answer token (see the module docstring for the model)."""
    return confidence_from_logit(confidence_logit(question, correct, profile), options)


def choose_index(count: int, *parts: str | int) -> int:
    """A deterministic index in ``range(count)`` fixed by ``parts``."""
    return min(int(unit_draw(*parts) * count), count - 1)
