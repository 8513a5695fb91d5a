"""Quality targets of semantic operators: what a cascade must achieve, or the bar a validated function must clear.

A row-wise semantic operator's ``quality`` means one of two things, decided here once for every
operator (``operators/semantic.py`` asks these functions through its methods):

* a **cascade target** (``cascade_target``): on ``tier="cascade"``, or on ``tier="auto"`` with a
  target, for an operator the cascade router routes (a filter, a classification, a score);
* an **agreement target** (``agreement_target``): on a ``tier="auto"`` map without a score range
  or an extraction, which no cascade routes, the share of rows on which a function the code choice
  writes must agree with its per-row answers to replace it (``planner/rules/prefer_validated_code.py``).

``check_quality`` refuses what is neither, with a message saying what to do.

>>> as_quality(0.95)
QualityTarget(metric='accuracy', level=0.95, delta=0.05, labels=200, strict=False)
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Literal, Protocol

from pydantic import Field

from semray.errors import PlanError
from semray.operators.relational import Frozen
from semray.tasks import TaskKind


class QualityTarget(Frozen):
    """What a cascade must achieve against the top (large) tier's answers, with failure probability ``delta``.

    ``QualityTarget(metric="recall", level=0.9, delta=0.05)``: the rows a cascaded filter keeps
    include at least 90% of the rows the large tier would keep, with probability at least 95%
    over the calibration sample. ``precision`` and ``recall`` apply to filters only.
    """

    metric: Literal["accuracy", "precision", "recall"] = "accuracy"
    level: float = Field(default=0.9, gt=0.0, lt=1.0, strict=True)
    delta: float = Field(default=0.05, gt=0.0, lt=1.0, strict=True)
    labels: int = Field(default=200, ge=20, strict=True)
    """Calibration draws the large tier labels (rows drawn twice are labelled once)."""
    strict: bool = Field(default=False, strict=True)
    """Refuse to build the plan when this target cannot be certified with ``labels`` draws,
    instead of running the operator on the large tier with a warning."""

    @property
    def certifiable_level(self) -> float:
        """The highest level the cascade's threshold walks can certify with ``labels`` draws.

        A threshold passes only when the one-sided Wilson bound of its error ratio (at level
        ``delta``, ``cost_model/thresholds.py``) is below ``1 - level``; with no error at all
        among the draws that bound is ``z^2 / (n + z^2)``, and importance-weighted draws have an
        effective size of at most ``n``. Above this level no threshold passes: the cascade would
        decide no row and send every one to the large tier, after paying for its proxies, its
        calibration and its small tier.

        >>> round(QualityTarget(level=0.95).certifiable_level, 4)
        0.9867
        """
        z = NormalDist().inv_cdf(1.0 - self.delta)
        return self.labels / (self.labels + z * z)

    @property
    def certifiable(self) -> bool:
        return self.level <= self.certifiable_level

    def labels_to_certify(self) -> int:
        """The fewest calibration draws that can certify ``level`` at ``delta``.

        >>> QualityTarget(level=0.99).labels_to_certify()
        268
        """
        z = NormalDist().inv_cdf(1.0 - self.delta)
        return math.ceil(z * z * self.level / (1.0 - self.level))

    def shortfall(self, where: str) -> str | None:
        """Why this target cannot be met as a cascade, and what happens instead; None when it can."""
        if self.certifiable:
            return None
        return (
            f"{where}: {self.metric} {self.level:g} at delta {self.delta:g} cannot be certified with "
            f"{self.labels} calibration labels (at most {self.certifiable_level:.4f}; "
            f"{self.labels_to_certify():,} labels would do), so a cascade would decide no row: it runs on the "
            "large tier, which meets the target against itself at the large tier's price. Give more labels "
            "(QualityTarget(labels=...)), a lower level or a larger delta; strict=True (--strict) refuses instead"
        )


class Targeted(Protocol):
    """What the functions below read of a semantic operator over one input (``semantic.Semantic``)."""

    @property
    def tier(self) -> str: ...

    @property
    def quality(self) -> QualityTarget | None: ...

    @property
    def row_wise(self) -> bool: ...

    def task_kind(self) -> TaskKind | None: ...

    def cascade_kind(self) -> TaskKind | None: ...

    def quality_shortfall(self) -> str | None: ...


def cascade_target(node: Targeted) -> QualityTarget | None:
    """The target ``node`` asks a cascade for, or None when it runs on one tier."""
    if agreement_target(node) is not None:
        return None
    if node.tier == "cascade" or (node.tier == "auto" and node.quality is not None):
        return node.quality or QualityTarget()
    return None


def agreement_target(node: Targeted) -> QualityTarget | None:
    """``node``'s own quality target when that is not a cascade's but the bar of the code choice: on a
    ``tier="auto"`` row-wise operator no cascade routes (a SemMap without a score range, a
    SemExtract), the share of rows on which a validated function must agree with its per-row
    answers, at confidence ``1 - delta``, to replace it (``planner/rules/prefer_validated_code.py``).
    None otherwise; it then runs on the large tier, as ``auto`` does without a target."""
    if node.tier != "auto" or node.quality is None or not node.row_wise or node.cascade_kind() is not None:
        return None
    return node.quality if node.task_kind() in (TaskKind.MAP, TaskKind.EXTRACT) else None


def check_quality(node: Targeted) -> None:
    """Raise ``PlanError`` for a target ``node`` cannot take: an agreement target that is not an
    accuracy below delta 0.5, a target on a fixed tier, a cascade over what no cascade routes, a
    precision or recall target on anything but a filter, a strict target that cannot be certified."""
    name = type(node).__name__
    own = agreement_target(node)
    if own is not None:
        if own.metric != "accuracy" or own.delta >= 0.5:
            raise PlanError(
                f"{name}: its quality target is the agreement a validated function must reach "
                f"with its per-row answers: give metric 'accuracy' and a delta below 0.5, not {own.metric} "
                f"at delta {own.delta:g}"
            )
        return
    target = cascade_target(node)
    if node.quality is not None and target is None:
        raise PlanError(f"{name}: a quality target needs tier 'auto' or 'cascade', not {node.tier!r}")
    if target is None:
        return
    kind = node.cascade_kind()
    if kind is None:
        raise PlanError(
            f"{name}: a cascade routes filters, classifications and scores; "
            "run this operator on one tier (tier='large' or 'small')"
        )
    if target.metric != "accuracy" and kind != TaskKind.FILTER:
        raise PlanError(f"{name}: {target.metric} targets are for filters; use metric='accuracy'")
    shortfall = node.quality_shortfall()
    if target.strict and shortfall is not None:
        raise PlanError(shortfall.replace("; strict=True (--strict) refuses instead", "") + " (strict=True)")


def as_quality(value: QualityTarget | float | None) -> QualityTarget | None:
    """``0.95`` means accuracy >= 0.95 with the default delta."""
    if value is None or isinstance(value, QualityTarget):
        return value
    return QualityTarget(level=float(value))
