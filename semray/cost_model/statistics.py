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

`statistics_key` hashes a node's JSON *without its inputs* (and without its tier, cascade
target and diagnostics flag), so the same predicate has the same key wherever a rewrite moves
it and whichever tier (or cascade target) model selection tries.

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("review", "VARCHAR")))
>>> a = SemFilter(input=scan, instruction="{review} is positive")
>>> b = SemFilter(input=a, instruction="{review} is positive", tier="small")
>>> statistics_key(a) == statistics_key(b)
True
>>> source_key(scan)
'csv:r.csv'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from semray.cost_model.estimates import Interval
from semray.operators.base import Node
from semray.operators.relational import Scan

if TYPE_CHECKING:  # cascade_shares imports this module through cascade_cost
    from semray.cost_model.cascade_shares import CascadePool

KEY_EXCLUDED_FIELDS = frozenset({"tier", "diagnostics"})
"""Fields left out of `statistics_key` besides the inputs: they change who answers, not the question."""
KEY_NEUTRAL_FIELDS = frozenset({"quality"})
"""Fields hashed at their default (None) whatever their value: a cascade target, like a tier,
changes who answers, not the question. Hashing the default (rather than leaving the field out)
keeps the keys of operators without a target as they were."""


def statistics_key(node: Node) -> str:
    """A stable key for what ``node`` asks of its input, independent of where it sits.

    The sha256 of the node's JSON without its child fields, ``tier`` and ``diagnostics``, with
    ``quality`` (a cascade's target) as None.
    """
    excluded = set(node.child_fields) | (KEY_EXCLUDED_FIELDS & set(type(node).model_fields))
    payload: dict[str, Any] = node.model_dump(mode="json", exclude=excluded)
    payload.update(dict.fromkeys(KEY_NEUTRAL_FIELDS & payload.keys()))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def source_key(scan: Scan) -> str:
    """The key of a Scan's source in ``source_rows``: ``kind:path`` (memory tables: their digest ref)."""
    ref = scan.source.options.get("ref")
    if scan.source.kind == "memory" and ref is not None:
        return f"memory:{ref}"
    return scan.source.describe()


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
