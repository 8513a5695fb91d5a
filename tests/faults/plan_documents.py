"""Plan documents for the JSON-plan fault corpus and the mutations that break them.

``plan_documents`` (the ``documents`` fixture of ``conftest.py``) gives one valid plan document
per operator family, written by the Python API over a small CSV; a ``PlanCase`` names a
document, a ``Mutation`` of a deep copy and the typed error (with patterns its message must
match) that loading the result must raise.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from semray.api import read_csv
from semray.errors import SemrayError
from semray.operators import Node, plan_from_json

CSV = "review_id,product,rating,review\n1,lamp,4,great lamp\n2,desk,1,late delivery\n3,lamp,5,bright\n"
SCAN_UNDER_LIMIT = "plan.input.input"
"""Raw path of the Scan in the ``limit`` document (limit -> filter -> scan)."""
SCAN_PATH = r"plan\.limit\.input\.filter\.input\.scan"
"""How errors name that Scan: every operator's ``op`` is part of the path."""


def write_reviews(folder: Path) -> Path:
    path = folder / "reviews.csv"
    path.write_text(CSV, encoding="utf-8")
    return path


def plan_documents(reviews_csv: Path) -> dict[str, dict[str, Any]]:
    """A valid plan document per operator family, written by the Python API."""
    reviews = read_csv(reviews_csv)
    queries = {
        "limit": reviews.filter("rating >= 2").limit(5, offset=1),
        "topk": reviews.sem_topk("{review} is funny", k=2),
        "search": reviews.sem_search("review", "late delivery", k=3),
        "score": reviews.sem_score("How positive is {review}?", "stars", lo=1, hi=5),
        "map": reviews.sem_map("Summarize {review}", "gist"),
        "classify": reviews.sem_classify("Mood of {review}", "positive|negative", output="mood"),
        "extract": reviews.sem_extract("From {review} take the issue", "issue: text, severity: int"),
        "agg": reviews.sem_agg("Summarize {review}", by="product"),
        "project": reviews.select("review", doubled="rating * 2"),
        "aggregate": reviews.aggregate(by="product", n="count(*)"),
        "sort": reviews.sort("rating", descending=True),
        "union": reviews.union(reviews),
        "semfilter": reviews.sem_filter("{review} is positive", quality=0.9),
    }
    return {name: json.loads(query.to_json()) for name, query in queries.items()}


# -- helpers that mutate a document -------------------------------------------------------

Mutation = Callable[[dict[str, Any]], Any]
"""Takes a deep copy of a document; returns the document to load (dict, text or bytes), or None
to load the (mutated in place) copy."""


def _walk(document: Any, path: str) -> tuple[Any, str | int]:
    parts: list[str | int] = [int(part) if part.isdigit() else part for part in path.split(".")]
    target = document
    for part in parts[:-1]:
        target = target[part]
    return target, parts[-1]


def put(path: str, value: Any) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target, key = _walk(document, path)
        target[key] = value

    return mutate


def drop(path: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target, key = _walk(document, path)
        del target[key]

    return mutate


def text_with(placeholder: str, literal: str, path: str) -> Mutation:
    """Put a placeholder at ``path``, dump the document, and splice raw JSON text in its place
    (for values ``json.dumps`` cannot write: 5,000 digits, NaN, bad escapes)."""

    def mutate(document: dict[str, Any]) -> str:
        put(path, placeholder)(document)
        return json.dumps(document).replace(json.dumps(placeholder), literal)

    return mutate


def repeated_key(found: str, replacement: str) -> Mutation:
    """The document as text with its first ``found`` replaced: a way to write a key twice."""

    def mutate(document: dict[str, Any]) -> str:
        text = json.dumps(document)
        assert found in text, found
        return text.replace(found, replacement, 1)

    return mutate


def replace(value: Any) -> Mutation:
    return lambda document: value


def nested_limits(depth: int) -> Mutation:
    """``depth`` Limits over the document's root, written as text (``json.dumps`` itself recurses)."""

    def mutate(document: dict[str, Any]) -> str:
        inner = json.dumps(document["plan"])
        return '{"version": 1, "plan": ' + '{"op": "limit", "count": 1, "input": ' * depth + inner + "}" * depth + "}"

    return mutate


def nested_unions(depth: int) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        scan = json.dumps(document["plan"]["input"]["input"])
        text = scan
        for _ in range(depth):
            text = '{"op": "union", "inputs": [' + text + ", " + scan + "]}"
        return '{"version": 1, "plan": ' + text + "}"

    return mutate


def encoded(encoding: str, extra: str = "") -> Mutation:
    """The document as text in ``encoding``; ``extra`` is spliced into the predicate unescaped."""

    def mutate(document: dict[str, Any]) -> bytes:
        document["plan"]["input"]["predicate"] = f"review <> '{extra or 'x'}'"
        return json.dumps(document, ensure_ascii=False).encode(encoding)

    return mutate


def nested_value(depth: int) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        value = "[" * depth + "1" + "]" * depth
        return json.dumps(document).replace('"options": {}', '"options": {"deep": ' + value + "}", 1)

    return mutate


@dataclass(frozen=True)
class PlanCase:
    id: str
    base: str
    mutate: Mutation
    error: type[SemrayError] | None
    """None: the plan loads (a documented correct result)."""
    patterns: tuple[str, ...] = ()


SCAN = SCAN_UNDER_LIMIT
DIGITS = "9" * 5000


def check_plan_case(case: PlanCase, documents: dict[str, dict[str, Any]]) -> None:
    """Load the mutated document: the case's error naming its patterns, or a plan."""
    document = copy.deepcopy(documents[case.base])
    produced = case.mutate(document)
    text = document if produced is None else produced
    if isinstance(text, dict):
        text = json.dumps(text)
    if case.error is None:
        assert isinstance(plan_from_json(text), Node)
        return
    with pytest.raises(case.error) as raised:
        plan_from_json(text)
    message = str(raised.value)
    for pattern in case.patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
