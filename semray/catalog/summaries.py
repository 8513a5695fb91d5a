"""Dataset summaries and proposed schemas, written by the configured LLM tier.

The tier is the first of ``small``, ``large`` whose backend is a real model. When both are the
simulator (the default), nothing is asked: the simulator answers labelled tasks only, so its
output is never stored as a summary, and profiles say ``NOT_SUMMARISED``. A proposed schema (for a
file whose schema had to be inferred) is kept only when it checks against the data
(``check_proposed_schema``): as many columns as the reader found, distinct names, and every
type cast-able (DuckDB ``TRY_CAST``) for at least ``CAST_AGREEMENT`` of the sampled values.

>>> llm_tier_name(ServingConfig())
>>> NOT_SUMMARISED
'not summarised: no LLM tier configured (simulated tiers only)'
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from semray.catalog.profiling import TableProfile
from semray.catalog.tier_calls import generate_with_tier
from semray.log import get_logger
from semray.operators.safe_sql import isolated_connection
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.prompts.catalog import (
    SCHEMA_MAX_TOKENS,
    SCHEMA_OUTPUT,
    SCHEMA_SYSTEM,
    SCHEMA_TEMPLATE,
    SUMMARY_MAX_TOKENS,
    SUMMARY_SYSTEM,
    SUMMARY_TEMPLATE,
)

log = get_logger(__name__)

NOT_SUMMARISED = "not summarised: no LLM tier configured (simulated tiers only)"
CAST_AGREEMENT = 0.95
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """One dataset to summarise (and, with ``sample_lines``, whose schema to propose)."""

    name: str
    kind: str
    profile: TableProfile
    schema_status: str = "declared"
    sample_lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Description:
    """What the tier wrote for one dataset."""

    summary: str | None
    summary_status: str
    proposed_schema: tuple[tuple[str, str], ...] | None = None


def llm_tier_name(config: ServingConfig) -> str | None:
    """The tier that writes summaries: the first of small, large that is not simulated; None when both are."""
    for name in ("small", "large"):
        if config.tier(name).backend != "simulated":
            return name
    return None


def describe_datasets(config: ServingConfig, requests: Sequence[SummaryRequest]) -> list[Description]:
    """A summary (and a checked schema proposal where asked) per request, in order, in one batch per kind."""
    tier_name = llm_tier_name(config)
    if tier_name is None or not requests:
        return [Description(None, NOT_SUMMARISED) for _ in requests]
    prompts = [_summary_request(request, index) for index, request in enumerate(requests)]
    schema_asks = [(index, request) for index, request in enumerate(requests) if request.sample_lines]
    prompts += [_schema_request(request, index) for index, request in schema_asks]
    responses = asyncio.run(generate_with_tier(config, tier_name, prompts))
    model = config.tier(tier_name).model
    descriptions: list[Description] = []
    for index, request in enumerate(requests):
        reply = responses[index]
        if reply.ok and isinstance(reply.value, str) and reply.value.strip():
            descriptions.append(Description(reply.value.strip(), f"summarised by the {tier_name} tier ({model})"))
        else:
            log.warning("catalog_summary_failed", dataset=request.name, error=reply.error)
            descriptions.append(Description(None, f"not summarised: the {tier_name} tier failed: {reply.error}"))
    for offset, (index, _request) in enumerate(schema_asks):
        reply = responses[len(requests) + offset]
        proposal = _proposal(reply)
        if proposal is not None:
            descriptions[index] = Description(descriptions[index].summary, descriptions[index].summary_status, proposal)
    return descriptions


def check_proposed_schema(
    sample: pa.Table, proposal: Sequence[tuple[str, str]], *, agreement: float = CAST_AGREEMENT
) -> list[str]:
    """Problems of a proposed schema (positional: one (name, DuckDB type) per column of ``sample``); [] when none.

    >>> check_proposed_schema(pa.table({"f0": ["1", "2"]}), [("n", "INTEGER")])
    []
    >>> check_proposed_schema(pa.table({"f0": ["x", "2"]}), [("n", "INTEGER")])
    ["column 1 'n': only 50% of the sampled values cast to INTEGER"]
    """
    problems: list[str] = []
    if len(proposal) != sample.num_columns:
        return [f"{len(proposal)} columns proposed, the data has {sample.num_columns}"]
    names = [name for name, _ in proposal]
    if len(set(names)) != len(names):
        problems.append("column names repeat")
    connection = isolated_connection()
    connection.register("sample_table", sample.rename_columns([f"c{i}" for i in range(sample.num_columns)]))
    for position, (name, kind) in enumerate(proposal):
        if not _NAME.match(name):
            problems.append(f"column {position + 1}: {name!r} is not a lower_snake_case name")
            continue
        try:
            total, cast = connection.execute(
                f"SELECT count(c{position}), count(TRY_CAST(CAST(c{position} AS VARCHAR) AS {_type(kind)})) "
                "FROM sample_table"
            ).fetchone() or (0, 0)
        except Exception as error:  # duckdb.Error: the type itself is not a DuckDB type
            problems.append(f"column {position + 1} {name!r}: {kind!r} is not a DuckDB type ({error})")
            continue
        if total and cast / total < agreement:
            problems.append(
                f"column {position + 1} {name!r}: only {cast / total:.0%} of the sampled values cast to {kind}"
            )
    connection.close()
    return problems


def _type(kind: str) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_ ]*(\(\d+(, *\d+)?\))?", kind.strip()):
        raise ValueError(f"{kind!r} is not a plain type name")
    return kind.strip()


def _summary_request(request: SummaryRequest, index: int) -> ModelRequest:
    profile = {
        "columns": [
            {
                "name": column.column,
                "type": column.type,
                "nulls": column.nulls,
                "distinct": column.distinct_estimate,
                "min": column.min,
                "max": column.max,
                "top": [value for value, _ in column.top_values],
            }
            for column in request.profile.columns
        ],
        "samples": list(request.profile.samples),
    }
    prompt = SUMMARY_TEMPLATE.format(
        name=request.name,
        kind=request.kind,
        rows=request.profile.row_count,
        profile=json.dumps(profile, ensure_ascii=False, default=str),
    )
    return ModelRequest(
        prompt=prompt, system=SUMMARY_SYSTEM, max_tokens=SUMMARY_MAX_TOKENS, logprobs=False, request_id=f"s{index}"
    )


def _schema_request(request: SummaryRequest, index: int) -> ModelRequest:
    columns = ", ".join(f"{name} {kind}" for name, kind in request.profile.schema)
    prompt = SCHEMA_TEMPLATE.format(
        name=request.name,
        kind=request.kind,
        status=request.schema_status,
        lines="\n".join(request.sample_lines),
        columns=columns,
    )
    return ModelRequest(
        prompt=prompt,
        system=SCHEMA_SYSTEM,
        constraint=OutputConstraint.schema(SCHEMA_OUTPUT),
        max_tokens=SCHEMA_MAX_TOKENS,
        logprobs=False,
        request_id=f"p{index}",
    )


def _proposal(reply: ModelResponse) -> tuple[tuple[str, str], ...] | None:
    value: Any = reply.value
    if not reply.ok or not isinstance(value, dict):
        return None
    return tuple((str(column["name"]), str(column["type"])) for column in value.get("columns", ()))
