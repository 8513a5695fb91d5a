"""Span divergence: how much the exploration evidence supports each decision-relevant span of a plan.

The decision-relevant spans of a JSON plan are found statically: filter predicates and the values
they compare with, join conditions, group and sort keys, aggregate expressions, limits, semantic
instructions' key terms (the columns they reference and their content words), classification
labels and search queries. Each span is scored by the scorer tier twice, as the continuation of
the question with the exploration evidence (the chosen datasets' schemas, statistics and samples,
domain notes, recalled knowledge) and without it; its confidence is ``exp(mean token logprob)``
(``confidence.py``). A span's divergence is the confidence with the evidence minus the confidence
without it: how much of the span the evidence explains. A plan whose largest span divergence is
below ``UnitPolicy.span_divergence`` (0.50) was not grounded in what the agents explored: the
draft is retried once, its least-grounded spans named in the feedback (a later draft is not sent
back for its spans again: the retry is the signal's whole remedy, and a model that writes the same
spans again would only spend drafts). A span the question states word for word (a value it names)
is left out: the question, in both contexts, grounds it.

>>> [span.text for span in decision_spans({"op": "filter", "predicate": "city = 'Oslo'", "input": {"op": "scan"}})]
["city = 'Oslo'", 'Oslo']
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semray.operators.plan_paths import raw_document_paths
from semray.planner.agents.confidence import Scorer, confidence
from semray.planner.agents.issues import PlanIssue

MAX_SPANS = 16
"""Spans scored per draft (two scorer passes each), root first: a large plan keeps its top decisions."""
NAMED_IN_FEEDBACK = 3
_LITERAL = re.compile(r"'((?:[^']|'')*)'|(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w.])")
_COLUMN_REF = re.compile(r"\{(\w+)\}")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_STOPWORD_TEXT = (
    "a an and are as at be by does each for from has have if in into is it its of on or over per that the "
    "their them then there this to was were what when where which who whose with without"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True, slots=True)
class PlanSpan:
    """One decision of a plan: its kind, its JSON path in the plan document, and its text."""

    kind: str
    path: str
    text: str

    def label(self) -> str:
        return f"{self.kind} {self.text!r} at {self.path}"


@dataclass(frozen=True, slots=True)
class SpanScore:
    """A span's confidence with and without the evidence; divergence is their difference."""

    span: PlanSpan
    with_evidence: float
    without_evidence: float

    @property
    def divergence(self) -> float:
        return self.with_evidence - self.without_evidence

    def line(self) -> str:
        return (
            f"{self.span.label()} (confidence {self.with_evidence:.3f} with the evidence, "
            f"{self.without_evidence:.3f} without: divergence {self.divergence:.3f})"
        )


@dataclass(frozen=True, slots=True)
class SpanReport:
    """Every scored span of a draft; ``largest`` is the signal the threshold is applied to."""

    scores: tuple[SpanScore, ...]

    @property
    def largest(self) -> float | None:
        return max((score.divergence for score in self.scores), default=None)

    def least_grounded(self, count: int = NAMED_IN_FEEDBACK) -> tuple[SpanScore, ...]:
        return tuple(sorted(self.scores, key=lambda score: score.divergence)[:count])


def decision_spans(node: Mapping[str, Any], path: str = "plan") -> tuple[PlanSpan, ...]:
    """The decision-relevant spans of a plan node (a ``plan`` dict of a plan document), root first."""
    return tuple(dict.fromkeys(span for raw, here in raw_document_paths(node, path) for span in _spans(raw, here)))


def score_spans(
    scorer: Scorer, question: str, evidence: str, spans: Sequence[PlanSpan], limit: int = MAX_SPANS
) -> SpanReport:
    """Score each span (at most ``limit``) with and without ``evidence`` in the scorer's context.

    A span the question states word for word is not scored: the question grounds it, in both contexts.
    """
    scores = []
    for span in [span for span in spans if not _stated(span.text, question)][:limit]:
        prompt = f"In the plan answering it, the {span.kind} at {span.path} is:"
        with_evidence = f"Question: {question}\nWhat the data exploration found:\n{evidence}\n{prompt}"
        without_evidence = f"Question: {question}\n{prompt}"
        scores.append(
            SpanScore(
                span,
                confidence(scorer.token_logprobs(with_evidence, " " + span.text)),
                confidence(scorer.token_logprobs(without_evidence, " " + span.text)),
            )
        )
    return SpanReport(tuple(scores))


def span_issue(report: SpanReport, threshold: float) -> PlanIssue | None:
    """The retry's feedback when the largest span divergence is below ``threshold``; None otherwise.

    A plan without spans (a bare scan) has nothing to diverge and passes.
    """
    largest = report.largest
    if largest is None or largest >= threshold:
        return None
    weakest = report.least_grounded()
    first = weakest[0].span
    named = "; ".join(score.line() for score in weakest)
    return PlanIssue(
        first.path,
        f"the plan's decisions are weakly grounded in the explored data (largest span divergence "
        f"{largest:.3f}, below {threshold:.2f}): {named}",
        "span",
        "re-read the datasets' columns, statistics and sample values and set these spans from them",
    )


def _spans(node: Mapping[str, Any], here: str) -> Iterator[PlanSpan]:
    """The spans of one operator (not of its inputs), ``here`` its path."""
    op = node.get("op")
    if op == "filter" and isinstance(node.get("predicate"), str):
        yield PlanSpan("filter predicate", f"{here}.predicate", node["predicate"])
        yield from _values(node["predicate"], f"{here}.predicate")
    if op == "join" and isinstance(node.get("on"), str):
        yield PlanSpan("join condition", f"{here}.on", node["on"])
        yield from _values(node["on"], f"{here}.on")
    if op in ("aggregate", "sem_agg"):
        for number, key in enumerate(_strings(node.get("keys"))):
            yield PlanSpan("group key", f"{here}.keys.{number}", key)
    if op == "aggregate":
        for number, agg in enumerate(_items(node.get("aggs"))):
            if isinstance(agg.get("expr"), str):
                yield PlanSpan("aggregate", f"{here}.aggs.{number}.expr", agg["expr"])
    if op == "sort":
        for number, sort_key in enumerate(_items(node.get("keys"))):
            if isinstance(sort_key.get("column"), str):
                yield PlanSpan("sort key", f"{here}.keys.{number}.column", sort_key["column"])
    for field in ("count", "k"):
        if op in ("limit", "sem_topk") and isinstance(node.get(field), int):
            yield PlanSpan("constant", f"{here}.{field}", str(node[field]))
    if isinstance(node.get("instruction"), str):
        terms = _key_terms(node["instruction"])
        if terms:
            yield PlanSpan("instruction key terms", f"{here}.instruction", terms)
    for number, label in enumerate(_strings(node.get("labels"))):
        yield PlanSpan("label", f"{here}.labels.{number}", label)
    if op == "sem_search" and isinstance(node.get("query"), str):
        yield PlanSpan("search query", f"{here}.query", node["query"])


def _stated(text: str, question: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(text.lower())}(?!\w)", question.lower()) is not None


def _values(expression: str, path: str) -> Iterator[PlanSpan]:
    """The constants an expression compares with: quoted strings and numbers."""
    for match in _LITERAL.finditer(expression):
        text = match.group(1).replace("''", "'") if match.group(1) is not None else match.group(2)
        if text:
            yield PlanSpan("filter value", path, text)


def _key_terms(instruction: str) -> str:
    """The columns an instruction references and its content words, in order: its key terms."""
    columns = _COLUMN_REF.findall(instruction)
    words = [word for word in _WORD.findall(_COLUMN_REF.sub(" ", instruction)) if word.lower() not in _STOPWORDS]
    return " ".join(dict.fromkeys([*columns, *words]))


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _items(value: object) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
