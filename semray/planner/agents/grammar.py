"""The grammar validator: a drafted plan's text -> a built plan, or every problem with its JSON path.

In order: JSON decoding with repair (``json_repair``); a bare operator is wrapped into a plan
document; referential checks against the catalog on the raw document, so several are found at
once (every Scan reads a catalogued dataset, with its columns and types exactly); then the plan
loader (``operators.serialize``: the plan schema, strict field types, and each node's own
``derive_schema`` checks — columns, expression types, aggregates, ``{column}`` templates); then
join keys of compatible types. A scan of a dataset described from the catalog is pinned to the
catalog version it was described at (``DatasetProfile.catalog``), whatever pin the draft gave.

>>> report = check_plan_text('{"version": 1, "plan": {"op": "scan"}}', catalog, ("reviews",))  # doctest: +SKIP
>>> report.issues[0].path  # doctest: +SKIP
'plan.scan'
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semray.errors import ColumnNotFoundError, ExpressionError, PlanError, PlanFormatError, suggest
from semray.operators import Join, Node
from semray.operators.plan_paths import document_paths, raw_document_paths
from semray.operators.serialize import plan_from_dict
from semray.planner.agents.catalog_view import CatalogView, DatasetProfile
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.json_repair import JsonRepairError, decode_json

_QUOTED = re.compile(r"'([^']+)'")
_AT = re.compile(r"^invalid plan at (\S+): (.*)$", re.DOTALL)
_FAMILIES = (
    (
        "number",
        (
            "TINYINT",
            "SMALLINT",
            "INTEGER",
            "BIGINT",
            "HUGEINT",
            "UTINYINT",
            "USMALLINT",
            "UINTEGER",
            "UBIGINT",
            "FLOAT",
            "DOUBLE",
            "DECIMAL",
            "REAL",
        ),
    ),
    ("text", ("VARCHAR", "TEXT", "STRING", "UUID", "JSON")),
    ("time", ("DATE", "TIMESTAMP", "TIME")),
    ("boolean", ("BOOLEAN",)),
)


@dataclass(frozen=True, slots=True)
class GrammarReport:
    """What the validator found: the plan (None when any issue), issues, repairs made to the JSON."""

    plan: Node | None
    document: dict[str, Any] | None
    issues: tuple[PlanIssue, ...]
    repairs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.issues


def check_plan_text(text: str, catalog: CatalogView, datasets: Sequence[str]) -> GrammarReport:
    """Validate a drafted plan against the datasets it may read (names in ``catalog``)."""
    try:
        raw, repairs = decode_json(text)
    except JsonRepairError as error:
        return GrammarReport(None, None, (PlanIssue("$", str(error), "json"),))
    if isinstance(raw, dict) and "op" in raw and "plan" not in raw:
        raw, repairs = {"version": 1, "plan": raw}, (*repairs, "wrapped a bare operator into a plan document")
    if isinstance(raw, dict) and "plan" in raw and "version" not in raw:
        raw, repairs = {"version": 1, **raw}, (*repairs, 'added "version": 1')
    if not isinstance(raw, dict):
        return GrammarReport(None, None, (PlanIssue("$", "a plan is a JSON object", "schema"),), repairs)
    return check_plan_document(raw, catalog, datasets, repairs)


def check_plan_document(
    raw: dict[str, Any], catalog: CatalogView, datasets: Sequence[str], repairs: tuple[str, ...] = ()
) -> GrammarReport:
    """Validate a decoded plan document (``{"version": 1, "plan": {...}}``)."""
    profiles = [catalog.describe(name) for name in datasets]
    issues = list(_scan_issues(raw.get("plan"), profiles))
    if issues:
        return GrammarReport(None, raw, tuple(issues), repairs)
    raw, anchored = _anchor_scan_paths(raw, profiles)
    repairs = (*repairs, *anchored)
    try:
        plan = plan_from_dict(raw)
    except PlanError as error:
        return GrammarReport(None, raw, (_loader_issue(error, raw.get("plan")),), repairs)
    issues = list(_join_issues(plan))
    return GrammarReport(None if issues else plan, raw, tuple(issues), repairs)


def _scan_issues(root: Any, profiles: Sequence[DatasetProfile]) -> Iterator[PlanIssue]:
    by_uri = {_normal(profile.uri): profile for profile in profiles}
    for raw, path in raw_document_paths(root):
        if raw["op"] != "scan":
            continue
        source = raw.get("source")
        uri = source.get("path") if isinstance(source, dict) else None
        profile = by_uri.get(_normal(uri)) if isinstance(uri, str) else None
        if profile is None:
            known = ", ".join(f"{p.name} ({p.uri})" for p in profiles) or "none"
            yield PlanIssue(
                f"{path}.source.path", f"the scan reads {uri!r}, which is not a chosen dataset ({known})", "table"
            )
            continue
        yield from _schema_issues(raw.get("source_schema"), profile, f"{path}.source_schema")
        if isinstance(source, dict) and source.get("kind") != profile.kind:
            yield PlanIssue(
                f"{path}.source.kind",
                f"dataset {profile.name} is {profile.kind}, not {source.get('kind')!r}",
                "source",
                f'"kind": "{profile.kind}"',
            )


def _schema_issues(schema: Any, profile: DatasetProfile, path: str) -> Iterator[PlanIssue]:
    columns = schema.get("columns") if isinstance(schema, dict) else None
    if not isinstance(columns, list):
        yield PlanIssue(path, f"give the source_schema of {profile.name}: {_columns(profile)}", "source")
        return
    actual = {column.name: column.type for column in profile.columns}
    given = set()
    for position, column in enumerate(columns):
        name = column.get("name") if isinstance(column, dict) else None
        kind = column.get("type") if isinstance(column, dict) else None
        where = f"{path}.columns.{position}"
        if name not in actual:
            hint = suggest(str(name), actual)
            advice = f"did you mean {hint!r}?" if hint else f"its columns: {_columns(profile)}"
            yield PlanIssue(f"{where}.name", f"dataset {profile.name} has no column {name!r}; {advice}", "column")
            continue
        given.add(name)
        if kind != actual[name]:
            yield PlanIssue(
                f"{where}.type",
                f"column {name!r} of {profile.name} is {actual[name]}, not {kind!r}",
                "type",
                f'"type": "{actual[name]}"',
            )
    missing = [name for name in actual if name not in given]
    if missing:
        yield PlanIssue(
            f"{path}.columns",
            f"source_schema of {profile.name} lacks {missing}; copy all its columns: {_columns(profile)}",
            "source",
        )


def _loader_issue(error: PlanError, root: Any) -> PlanIssue:
    text = str(error.args[0]) if error.args else str(error)
    match = _AT.match(text)
    path, message = (match.group(1), match.group(2)) if match else ("plan", text)
    nodes = dict((where, raw) for raw, where in raw_document_paths(root))
    if path in nodes:
        wanted = [error.column] if isinstance(error, ColumnNotFoundError) else _QUOTED.findall(message)
        path = _field_path(nodes[path], path, wanted) or path
    return PlanIssue(path, message, _code(error, message))


def _field_path(raw: dict[str, Any], path: str, wanted: list[str]) -> str | None:
    """The path of the node's own field whose text holds what the error names, if one does."""
    leaves: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [
        (value, f"{path}.{name}")
        for name, value in raw.items()
        if name not in ("input", "left", "right", "inputs", "op")
    ]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            leaves.append((where, value))
        elif isinstance(value, dict):
            stack.extend((item, f"{where}.{key}") for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, f"{where}.{position}") for position, item in enumerate(value))
    leaves.sort()
    for text in wanted:
        exact = [where for where, leaf in leaves if leaf == text]
        within = [where for where, leaf in leaves if re.search(rf"\b{re.escape(text)}\b", leaf)]
        if exact or within:
            return (exact or within)[0]
    return None


def _code(error: PlanError, message: str) -> str:
    lowered = message.lower()
    if isinstance(error, ColumnNotFoundError) or "not found in" in lowered:
        return "template" if "instruction" in lowered else "column"
    if "template" in lowered or "references no column" in lowered or ("{" in lowered and "reference" in lowered):
        return "template"
    if "unknown operator" in lowered:
        return "operator"
    if "aggregate" in lowered or ".aggs." in message:
        return "aggregate"
    if "cannot compare" in lowered or "no function matches" in lowered or ("type" in lowered and "not" in lowered):
        return "type"
    if isinstance(error, ExpressionError):
        return "expression"
    if isinstance(error, PlanFormatError):
        return "schema"
    return "schema"


def _join_issues(plan: Node) -> Iterator[PlanIssue]:
    for node, path in document_paths(plan):
        if not isinstance(node, Join):
            continue
        left, right = node.left.output_schema, node.right.output_schema
        for left_key, right_key in node.keys[0]:
            a, b = left.type_of(left_key), right.type_of(right_key)
            if type_family(a) != type_family(b):
                yield PlanIssue(
                    f"{path}.on",
                    f"join key l.{left_key} is {a} but r.{right_key} is {b}; "
                    "join on keys of one kind (or cast one side in a project)",
                    "join_key",
                )


def type_family(kind: str) -> str:
    """The kind of a DuckDB type for key compatibility: ``type_family("DECIMAL(18,3)") == "number"``."""
    base = kind.split("(")[0].strip().upper()
    for family, members in _FAMILIES:
        if any(base.startswith(member) for member in members):
            return family
    return base


def _anchor_scan_paths(raw: dict[str, Any], profiles: Sequence[DatasetProfile]) -> tuple[dict[str, Any], list[str]]:
    """A copy whose scans read each dataset's own URI: a relative path the check resolved against
    this process's folder would be read against a Ray worker's, which is another one."""
    by_uri = {_normal(profile.uri): profile for profile in profiles}
    anchored = copy.deepcopy(raw)
    repairs: list[str] = []
    for node, _ in raw_document_paths(anchored.get("plan")):
        source = node.get("source")
        if node["op"] != "scan" or not isinstance(source, dict) or not isinstance(source.get("path"), str):
            continue
        profile = by_uri[_normal(source["path"])]  # _scan_issues found every scan's dataset
        if source["path"] != profile.uri:
            repairs.append(f"scan path {source['path']!r} -> {profile.uri!r} (dataset {profile.name})")
            source["path"] = profile.uri
        repairs.extend(_pin_scan(source, profile))
    return anchored, repairs


def _pin_scan(source: dict[str, Any], profile: DatasetProfile) -> list[str]:
    """Pin a scan to the catalog version its dataset was described at (in place); the repair, if one was made.

    The model copies kind, path and options; the pin is the view's, not the model's: a scan of a catalogued
    dataset carries the profile's ``CatalogPin``, one of a file profiled on the fly none.
    """
    wanted = None if profile.catalog is None else profile.catalog.model_dump()
    given = source.get("catalog")
    if given == wanted:
        return []
    if wanted is None:
        source.pop("catalog")
        return [f"dropped the catalog pin of the scan of {profile.name} (not a catalogued dataset)"]
    source["catalog"] = wanted
    if given is None:
        return []  # the usual case: the drafted scan names the file, the validator pins it
    return [f"scan of {profile.name} pinned to catalog version {wanted['version']} (the version described)"]


def _normal(uri: str | None) -> str:
    return str(Path(uri).expanduser().resolve()) if uri else ""


def _columns(profile: DatasetProfile) -> str:
    return ", ".join(f"{column.name} {column.type}" for column in profile.columns)
