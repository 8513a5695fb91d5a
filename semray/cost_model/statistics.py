"""What estimation measured about a plan's inputs and operators, keyed so rewrites keep it.

A `PlanStatistics` is a frozen set of lookups that `estimate_plan` reads:

* ``source_rows``: rows of each source, keyed by `source_key` of its Scan;
* ``selectivity``: the fraction of input rows an operator keeps, keyed by `statistics_key`;
* ``tokens_per_row``: rendered prompt tokens per input row of a semantic operator;
* ``tier_quality``: ``(statistics_key, tier) -> accuracy vs the top tier``;
* ``cascade_shares`` (optional): ``statistics_key -> (embedding share, small share)``, the
  fractions of a cascade's input rows its embedding and small stages decide
  (`semray.cost_model.cascade_shares.measure_cascade_shares`);
* ``cascade_pools`` (optional): ``statistics_key -> CascadePool``, labelled rows from which the
  cost model computes those shares at whatever target it prices (preferred over ``cascade_shares``).

Both keys are IR facts (`semray.operators.keys`): the same predicate has the same key wherever
a rewrite moves it and whichever tier (or cascade target) model selection tries.

>>> from semray.cost_model.estimates import Interval
>>> measured = PlanStatistics(selectivity={"k1": Interval(0.25, 0.2, 0.3)})
>>> rows = PlanStatistics(selectivity={"k1": Interval.exact(0.3)}, source_rows={"csv:r.csv": Interval.exact(10)})
>>> later = measured.merged(rows)
>>> later.selectivity["k1"].value, later.source_rows["csv:r.csv"].value
(0.3, 10.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from semray.cost_model.estimates import Interval

if TYPE_CHECKING:  # cascade_shares imports this module through cascade_cost
    from semray.cost_model.cascade_shares import CascadePool

def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True, eq=False)
class PlanStatistics:
    """Measured statistics; every mapping is read-only.

    ``output_tokens_per_row`` (optional) overrides the per-kind expected completion length of
    `semray.cost_model.tokens.expected_output_tokens` for a node. ``default_tier_quality``
    (optional) is the quality assumed for a tier when ``tier_quality`` has no entry for a node.
    ``cascade_shares`` (optional) gives, per node, the shares of its input rows a cascade's
    embedding stage and small stage decide, as two intervals (the large tier answers the rest);
    unmeasured, `semray.cost_model.cascade_cost.DEFAULT_CASCADE_SHARES` is assumed.
    ``cascade_pools`` (optional) gives, per node, a `CascadePool` of labelled rows: the cost model
    computes the shares from it at the target it prices, before looking at ``cascade_shares``.
    """

    source_rows: Mapping[str, Interval] = field(default_factory=dict)
    selectivity: Mapping[str, Interval] = field(default_factory=dict)
    tokens_per_row: Mapping[str, Interval] = field(default_factory=dict)
    tier_quality: Mapping[tuple[str, str], float] = field(default_factory=dict)
    output_tokens_per_row: Mapping[str, Interval] = field(default_factory=dict)
    default_tier_quality: Mapping[str, float] = field(default_factory=dict)
    cascade_shares: Mapping[str, tuple[Interval, Interval]] = field(default_factory=dict)
    cascade_pools: Mapping[str, CascadePool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "source_rows",
            "selectivity",
            "tokens_per_row",
            "tier_quality",
            "output_tokens_per_row",
            "default_tier_quality",
            "cascade_shares",
            "cascade_pools",
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def merged(self, other: PlanStatistics) -> PlanStatistics:
        """These statistics updated by ``other`` (``other`` wins on a shared key)."""
        return PlanStatistics(
            source_rows={**self.source_rows, **other.source_rows},
            selectivity={**self.selectivity, **other.selectivity},
            tokens_per_row={**self.tokens_per_row, **other.tokens_per_row},
            tier_quality={**self.tier_quality, **other.tier_quality},
            output_tokens_per_row={**self.output_tokens_per_row, **other.output_tokens_per_row},
            default_tier_quality={**self.default_tier_quality, **other.default_tier_quality},
            cascade_shares={**self.cascade_shares, **other.cascade_shares},
            cascade_pools={**self.cascade_pools, **other.cascade_pools},
        )
