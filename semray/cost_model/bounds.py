"""One-sided confidence bounds on an agreement share, and the sequential test built on them.

An agreement share (a function's answers against the model's, a factorized join's against the
pairwise one) is a binomial proportion measured on a sample. A plan keeps the cheaper
alternative only when the share's one-sided Wilson lower bound (``sampling.wilson_interval`` at
``z = Phi^-1(confidence)``) reaches the target. Measured in looks (more rows each time, up to a
cap), each look's bound is taken at ``1 - (1 - confidence) / looks`` (Bonferroni,
`look_confidence`), so the decision holds at ``confidence`` whichever look makes it.

>>> decide(20, 20, 0.9, look_confidence(0.95, 5)), decide(60, 60, 0.9, look_confidence(0.95, 5))
('undecided', 'accepted')
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Literal

from semray.cost_model.sampling import wilson_interval

Decision = Literal["accepted", "refused", "undecided"]


def agreement_lower_bound(agreeing: int, pairs: int, confidence: float) -> float:
    """One-sided lower confidence bound on the agreement share (Wilson score).

    >>> round(agreement_lower_bound(64, 64, 0.95), 3), round(agreement_lower_bound(60, 64, 0.95), 3)
    (0.959, 0.868)
    """
    if pairs == 0:
        return 0.0
    z = NormalDist().inv_cdf(confidence)
    return wilson_interval(agreeing / pairs, pairs, z)[0]


def agreement_upper_bound(agreeing: int, pairs: int, confidence: float) -> float:
    """One-sided upper confidence bound on the agreement share (Wilson score).

    >>> round(agreement_upper_bound(50, 64, 0.95), 3)
    0.854
    """
    if pairs == 0:
        return 1.0
    z = NormalDist().inv_cdf(confidence)
    return wilson_interval(agreeing / pairs, pairs, z)[1]


def look_confidence(confidence: float, looks: int) -> float:
    """Each look's confidence when ``looks`` looks share ``confidence`` (Bonferroni).

    >>> round(look_confidence(0.95, 5), 3)
    0.99
    """
    return 1.0 - (1.0 - confidence) / max(1, looks)


def looks_for(round_rows: int, max_rows: int) -> int:
    """How many looks of ``round_rows`` rows reach ``max_rows`` (the last may be short).

    >>> looks_for(20, 100), looks_for(20, 110), looks_for(20, 10)
    (5, 6, 1)
    """
    return max(1, -(-max_rows // max(1, round_rows)))


def decide(agreeing: int, compared: int, target: float, confidence: float) -> Decision:
    """``accepted`` when the lower bound reaches ``target``, ``refused`` when the upper bound falls
    below it, ``undecided`` otherwise (more rows would tell)."""
    if compared and agreement_lower_bound(agreeing, compared, confidence) >= target:
        return "accepted"
    if compared and agreement_upper_bound(agreeing, compared, confidence) < target:
        return "refused"
    return "undecided"


def rows_to_accept(target: float, round_rows: int, max_rows: int, confidence: float) -> int:
    """Rows a function that agrees on every row needs before it is accepted (``max_rows`` when
    even that never reaches ``target``): what a validation is expected to cost.

    >>> rows_to_accept(0.9, 20, 100, 0.95), rows_to_accept(0.99, 20, 100, 0.95)
    (60, 100)
    """
    looks = looks_for(round_rows, max_rows)
    per_look = look_confidence(confidence, looks)
    for look in range(1, looks + 1):
        rows = min(look * round_rows, max_rows)
        if agreement_lower_bound(rows, rows, per_look) >= target:
            return rows
    return max_rows


def can_accept(target: float, round_rows: int, max_rows: int, confidence: float) -> bool:
    """Whether a function agreeing on every one of ``max_rows`` rows would be accepted at ``target``
    (looks of ``round_rows``, Bonferroni at ``confidence``): above a level no sample this size can
    show, a trial would pay for its rows only to be refused.

    >>> can_accept(0.9, 20, 200, 0.95), can_accept(0.97, 20, 200, 0.95), can_accept(0.97, 20, 1000, 0.95)
    (True, False, True)
    """
    per_look = look_confidence(confidence, looks_for(round_rows, max_rows))
    return agreement_lower_bound(max_rows, max_rows, per_look) >= target
