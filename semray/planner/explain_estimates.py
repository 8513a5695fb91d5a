"""EXPLAIN with estimates: the plan tree with, per operator, the cost model's estimated rows
(with interval), tokens, dollars, GPU-seconds and tier, and, after a run, the actual figures.
A cascade shows its target and how its rows are expected to split between the tiers; a LIMIT over
a semantic chain, what its early stop leaves the chain to ask (``cost_model/limit_cost.py``); a
blocked join or a top-k, what it embeds (``cost_model/embedding_cost.py``), one line each.

>>> print(render_estimates(plan, estimate, actuals))  # doctest: +SKIP
SemFilter [small] '{review} mentions delivery'  rows 330 [250, 410] · tokens 33.0k in / 330 out · $0.0123 ...
│  actual: rows 312 · calls 1.0k · tokens 31.9k in / 1.0k out · $0.0119 · 0.00 GPU-s
└─ SemClassify [cascade accuracy>=0.9184 delta=0.02] 'topic of {review}'  rows 1.0k [1.0k, 1.0k] · ...
   │  cascade accuracy >= 0.9184 (delta 0.02): embedding decides 5% [0%, 50%] of 1.0k rows · small ...
   └─ Scan csv:reviews.csv  rows 1.0k [1.0k, 1.0k]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from semray.cost_model.estimates import EmbeddingEstimate, Interval, OperatorEstimate, PlanEstimate
from semray.operators.base import Node
from semray.operators.plan_paths import child_paths, operator_paths


@dataclass(frozen=True, slots=True)
class Actual:
    """What one operator did in a finished run (None: not measured)."""

    rows: int | None = None
    calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    dollars: float | None = None
    gpu_seconds: float | None = None


def actuals_by_path(
    plan: Node,
    usage_by_operator: Mapping[str, object],
    operator_key: Callable[[Node], str],
    rows_by_operator: Mapping[str, int] | None = None,
) -> dict[str, Actual]:
    """Per-path actuals from a run's usage keyed by the engine's operator key.

    ``usage_by_operator`` values need ``calls``, ``tokens_in``, ``tokens_out`` and ``dollars``
    (the run's ``LLMUsage``); ``operator_key`` is the key function those are keyed by
    (the run journal's: ``semray.operators.keys.operator_key``).
    """
    found: dict[str, Actual] = {}
    for path, node in operator_paths(plan).items():
        key = operator_key(node)
        usage = usage_by_operator.get(key)
        rows = (rows_by_operator or {}).get(key)
        if usage is None and rows is None:
            continue
        found[path] = Actual(
            rows=rows,
            calls=getattr(usage, "calls", None),
            input_tokens=getattr(usage, "tokens_in", None),
            output_tokens=getattr(usage, "tokens_out", None),
            dollars=getattr(usage, "dollars", None),
        )
    return found


def render_estimates(plan: Node, estimate: PlanEstimate, actuals: Mapping[str, Actual] | None = None) -> str:
    """The plan tree, one line of estimates per operator, one line of actuals under it when given,
    and the plan's totals."""
    by_path = {operator.path: operator for operator in estimate.operators}
    lines: list[str] = []

    def visit(node: Node, path: str, prefix: str, connector: str) -> None:
        operator = by_path.get(path)
        text = f"{prefix}{connector}{node.label()}"
        lines.append(text + ("  " + describe_operator(operator, node.calls_llm) if operator else ""))
        children = child_paths(node, path)
        child_prefix = prefix + ("   " if connector == "└─ " else "│  " if connector else "")
        split = getattr(operator, "cascade", None)
        if split is not None:
            lines.append(f"{child_prefix}{'│  ' if children else '   '}{describe_cascade(split)}")
        stop = getattr(operator, "early_stop", "")
        if stop:
            lines.append(f"{child_prefix}{'│  ' if children else '   '}{stop}")
        for part in getattr(operator, "embeddings", ()):
            lines.append(f"{child_prefix}{'│  ' if children else '   '}{describe_embedding(part)}")
        actual = (actuals or {}).get(path)
        if actual is not None:
            lines.append(f"{child_prefix}{'│  ' if children else '   '}actual: {describe_actual(actual)}")
        for position, (child_path, child) in enumerate(children):
            visit(child, child_path, child_prefix, "└─ " if position == len(children) - 1 else "├─ ")

    visit(plan, "", "", "")
    lines.append("")
    lines.append(
        f"Estimated total: rows {_interval(estimate.rows)} · {_dollars(estimate.dollars.value)} "
        f"[{_dollars(estimate.dollars.low)}, {_dollars(estimate.dollars.high)}] · "
        f"{estimate.gpu_seconds.value:.2f} GPU-s · {estimate.latency_s.value:.1f} s · quality >= {estimate.quality:.3f}"
    )
    if actuals:
        spent = sum(actual.dollars or 0.0 for actual in actuals.values())
        calls = sum(actual.calls or 0 for actual in actuals.values())
        lines.append(f"Actual total: {calls} model calls · {_dollars(spent)}")
    return "\n".join(lines)


def describe_operator(operator: OperatorEstimate, calls_llm: bool) -> str:
    """``rows 330 [250, 410] · tokens 33.0k in / 330 out · $0.0123 · 0.00 GPU-s · small``, then
    ``assumed: selectivity, ...`` when figures came from the cost model's documented defaults."""
    parts = [f"rows {_interval(operator.rows_out)}"]
    if calls_llm:
        parts.append(f"tokens {_count(operator.input_tokens.value)} in / {_count(operator.output_tokens.value)} out")
        parts.append(
            f"{_dollars(operator.dollars.value)} [{_dollars(operator.dollars.low)}, {_dollars(operator.dollars.high)}]"
        )
        parts.append(f"{operator.gpu_seconds.value:.2f} GPU-s")
        parts.append(f"{operator.tier} (quality {operator.quality:.3f})")
    assumed = getattr(operator, "assumed", ())
    if assumed:
        parts.append(f"assumed: {', '.join(assumed)}")  # documented defaults, nothing measured them
    return " · ".join(parts)


def describe_embedding(part: EmbeddingEstimate) -> str:
    """``embeds the left side: 2.0k texts · 200.0k tokens · $0.0040``: what an operator embeds
    besides its model calls, on the embedding tier (in the operator's tokens and dollars)."""
    texts = "1 text" if part.calls.value == 1 else f"{_count(part.calls.value)} texts"
    return (
        f"embeds the {part.what}: {texts} · {_count(part.input_tokens.value)} tokens · {_dollars(part.dollars.value)}"
    )


def describe_cascade(split: Any) -> str:
    """A cascade's target and its expected split (a ``semray.cost_model.cascade_cost.CascadeSplit``):
    ``cascade accuracy >= 0.9 (delta 0.05): embedding decides 5% [0%, 50%] of 10.0k rows · small
    answers 9.5k [5.0k, 10.0k], decides 35% [0%, 90%] · large answers 6.1k [200, 10.0k]: 200
    labels + 60% [0%, 100%] of the rest``."""
    target = split.target
    parts = [f"cascade {target.metric} >= {target.level} (delta {target.delta}):"]
    if split.embedding_rows.high > 0:
        parts.append(
            f"embedding decides {_share(split.embedding_share)} of {_count(split.embedding_rows.value)} rows ·"
        )
    if split.small_rows.high > 0:
        parts.append(f"small answers {_interval(split.small_rows)}, decides {_share(split.small_share)} ·")
    parts.append(
        f"large answers {_interval(split.large_rows)}: {_count(split.labels.value)} labels + "
        f"{_share(split.large_share)} of the rest"
    )
    return " ".join(parts)


def _share(share: Interval) -> str:
    return f"{share.value:.0%} [{share.low:.0%}, {share.high:.0%}]"


def describe_actual(actual: Actual) -> str:
    parts = []
    if actual.rows is not None:
        parts.append(f"rows {actual.rows:,}")  # counted, so exact
    if actual.calls is not None:
        parts.append(f"calls {_count(actual.calls)}")
    if actual.input_tokens is not None and actual.output_tokens is not None:
        parts.append(f"tokens {_count(actual.input_tokens)} in / {_count(actual.output_tokens)} out")
    if actual.dollars is not None:
        parts.append(_dollars(actual.dollars))
    if actual.gpu_seconds is not None:
        parts.append(f"{actual.gpu_seconds:.2f} GPU-s")
    return " · ".join(parts) or "no figures"


def _interval(interval: Interval) -> str:
    return f"{_count(interval.value)} [{_count(interval.low)}, {_count(interval.high)}]"


def _count(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _dollars(value: float) -> str:
    return f"${value:.4f}" if value < 100 else f"${value:,.0f}"
