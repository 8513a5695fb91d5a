"""Workflow materialization: a plan that was validated and ran becomes a skill a later question reuses.

A skill is a memory of category ``skill`` in long-term memory (the catalog's memory table, or a
``ListMemory``), found by the question like any memory. It holds the question, the validated plan
document, the datasets it reads, its validation evidence (the checks it passed, the run) and its
parameters: the plan's constants (filter values, limits, ``k``; ``spans.py``) that appear as a word
of the question. The question with those words as slots is the skill's template: a new question
matches when it has the template's words, case aside, with any words in the slots, and the plan is
rebound to them (``rating >= 4`` for "... at least 4?", ``rating >= 2`` for "... at least 2?").

A question of other words is matched by meaning: when no template fits, a stored skill whose question
is similar enough (``Similarity``: the embedding tier's cosine with the catalog memory, else
``lexical_similarity``; ``agent_skill_similarity``) is re-filled: its numeric parameters take the new
question's numbers in order (as many as it has numeric slots); a word parameter (a category, a
product, a label a filter compares with) keeps its value when the new question states it, and else
takes the word (or two or three words) of the new question that its column holds in the data
(``value_lookup.py``: the parameter's column, recorded with the skill, read once; the value spelled
as the data spells it), the new question's own words first. That check is the re-fill's validation
before use: a word no column holds fills nothing. A question whose numbers or words do not fill
every slot is no match.

A match is only a candidate: the loop validates the rebound plan like a draft (grammar, judges, the
run) and, when it passes, plans nothing. A skill whose reuse fails validation is demoted, forgotten
from memory so it is not retrieved again, and the question is planned as if there were none.

>>> round(lexical_similarity("How many reviews have a rating of at least 4?", "Count reviews rated at least 2"), 2)
1.0
>>> template, parameters = question_template("How many reviews have a rating of at least 4?", (("4", "p"),))
>>> bind(template, "How many reviews have a rating of at least 2?")
{'p0': '2'}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from semray.errors import SemrayError
from semray.log import get_logger
from semray.operators.expressions import parse_expression, referenced_columns
from semray.planner.agents.catalog_view import CatalogView, MemoryView
from semray.planner.agents.spans import PlanSpan, decision_spans
from semray.planner.agents.step import StepRunner
from semray.planner.agents.value_lookup import ColumnValues, ValueLookup

log = get_logger(__name__)

SKILL = "skill"
SKILL_VERSION = 1
CANDIDATES = 5
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|\w+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
PARAMETER_KINDS = frozenset({"filter value", "constant"})
SIMILARITY = 0.75
"""The default least similarity of two questions for a skill of one to be re-filled for the other."""
_STOP_WORDS = (
    "a an the of at to in on for by with from is are was be have has had what how which who do does did many much "
    "number count there that this it its me give show list tell all any each per"
)
_STOP = frozenset(_STOP_WORDS.split())
_SUFFIXES = ("ings", "ing", "ed", "es", "s")

Similarity = Callable[[str, str], float]
"""How alike two questions are, in [0, 1] (1: the same meaning)."""


def lexical_similarity(first: str, second: str) -> float:
    """Cosine of the two questions' content words (stop words and numbers out, crude stems): 0..1."""
    left, right = _content(first), _content(second)
    if not left or not right:
        return 0.0
    return len(left & right) / math.sqrt(len(left) * len(right))


def embedding_similarity(embed: Callable[[Sequence[str]], Any]) -> Similarity:
    """The cosine of two questions under ``embed`` (texts -> one vector a row: the memory's embedding tier)."""

    def similarity(first: str, second: str) -> float:
        vectors = embed([first, second])
        a, b = [float(x) for x in vectors[0]], [float(x) for x in vectors[1]]
        norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(x * x for x in b))
        return 0.0 if norm == 0.0 else max(0.0, sum(x * y for x, y in zip(a, b, strict=True)) / norm)

    return similarity


def _content(question: str) -> frozenset[str]:
    stems = set()
    for token in _TOKEN.findall(question.lower()):
        if token in _STOP or _NUMBER.fullmatch(token):
            continue
        for suffix in _SUFFIXES:
            if token.endswith(suffix) and len(token) - len(suffix) >= 3:
                token = token[: -len(suffix)]
                break
        stems.add(token)
    return frozenset(stems)


def catalog_values(catalog: CatalogView) -> ValueLookup:
    """The value check of re-filled words over a catalog view (``value_lookup.ColumnValues``)."""
    return ColumnValues(catalog)


@dataclass(frozen=True, slots=True)
class Parameter:
    """A plan constant that is a word of the question: where it sits in the plan, its value there, and (for a
    word compared with a column) that column."""

    name: str
    path: str
    kind: str
    value: str
    column: str | None = None


@dataclass(frozen=True, slots=True)
class SkillMatch:
    """A stored skill that fits a question, its plan rebound to the question's words."""

    memory_id: str
    question: str
    document: dict[str, Any]
    datasets: tuple[str, ...]
    evidence: tuple[str, ...]
    bound: tuple[tuple[str, str], ...]
    similarity: float | None = None
    """How alike the skill's question and the new one are, when it matched by meaning (None: by its template)."""

    @property
    def plan_text(self) -> str:
        return json.dumps(self.document)

    def line(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in self.bound) or "no parameters"
        similar = "" if self.similarity is None else f", similarity {self.similarity:.2f}"
        return (
            f"skill {self.memory_id} of {self.question!r} ({values}{similar}); "
            f"validated before by: {'; '.join(self.evidence)}"
        )


def question_template(question: str, constants: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The question's words with each constant's word(s) as a slot ``{pN}``; the slot names, in order.

    ``constants`` are (value, key) pairs; a value that is no single word of the question is no slot.
    """
    tokens = _TOKEN.findall(question)
    slots: dict[str, str] = {}
    for value, _ in constants:
        if value.lower() in slots or not any(token.lower() == value.lower() for token in tokens):
            continue
        slots[value.lower()] = f"p{len(slots)}"
    template = [f"{{{slots[token.lower()]}}}" if token.lower() in slots else token.lower() for token in tokens]
    return template, list(slots.values())


def bind(template: Sequence[str], question: str) -> dict[str, str] | None:
    """The slot values that make ``question`` the template, or None when it does not fit."""
    tokens = _TOKEN.findall(question)
    if len(tokens) != len(template):
        return None
    bound: dict[str, str] = {}
    for word, token in zip(template, tokens, strict=True):
        if word.startswith("{") and word.endswith("}"):
            name = word[1:-1]
            if bound.setdefault(name, token) != token:
                return None
        elif word != token.lower():
            return None
    return bound


class SkillBook:
    """Skills in a ``MemoryView``: find one for a question, store a validated plan, demote a failed one."""

    def __init__(
        self,
        runner: StepRunner,
        store: MemoryView,
        similarity: Similarity = lexical_similarity,
        threshold: float = SIMILARITY,
        values: ValueLookup | None = None,
    ) -> None:
        self.runner = runner
        self.store = store
        self.similarity = similarity
        self.threshold = threshold
        self.values = values
        """Checks a re-filled word against the data (None: word parameters are kept as they are)."""

    def find(self, question: str) -> SkillMatch | None:
        """The first stored skill whose template fits ``question``, else the most similar one that re-fills
        for it (at least ``threshold`` alike), rebound; one recorded step."""
        found: list[SkillMatch] = []

        def work() -> tuple[str, str | None]:
            records = [
                (record.memory_id, payload)
                for record in self.store.recall(question, CANDIDATES, SKILL)
                if (payload := _payload(record.memory)) is not None
            ]
            for memory_id, payload in records:
                bound = bind([str(word) for word in payload.get("template", [])], question)
                match = None if bound is None else _rebound(memory_id, payload, bound)
                if match is not None:
                    found.append(match)
                    return match.line(), None
            similar = sorted(
                (
                    (self.similarity(question, _unparameterised(payload)), memory_id, payload)
                    for memory_id, payload in records
                ),
                key=lambda item: -item[0],
            )
            for score, memory_id, payload in similar:
                if score < self.threshold:
                    break
                bound = _refill(payload, question, self.values)
                match = None if bound is None else _rebound(memory_id, payload, bound, score)
                if match is not None:
                    found.append(match)
                    return match.line(), None
            return "none", None

        self.runner.run("memory", "skill", {"task": question}, work)
        return found[0] if found else None

    def remember(
        self,
        question: str,
        document: Mapping[str, Any],
        datasets: Sequence[str],
        evidence: Sequence[str],
        run_id: str | None = None,
    ) -> None:
        """Store a plan that was validated and ran as a skill of ``question``; one recorded step."""
        found = decision_spans(document["plan"])
        spans = [span for span in found if span.kind in PARAMETER_KINDS]
        predicates = {span.path: span.text for span in found if span.kind == "filter predicate"}
        template, names = question_template(question, [(span.text, span.path) for span in spans])
        parameters = _parameters(spans, template, names, question, predicates)
        payload = {
            "version": SKILL_VERSION,
            "question": question,
            "template": template,
            "parameters": [_stored(parameter) for parameter in parameters],
            "plan": document,
            "datasets": list(datasets),
            "evidence": list(evidence),
        }

        def work() -> tuple[str, str | None]:
            self.store.remember(question, json.dumps(payload, sort_keys=True), SKILL, None, run_id)
            return f"skill of {question!r} with {len(parameters)} parameter(s): {' '.join(template)}", None

        self.runner.run("memory", "skill_write", {"task": question}, work)

    def demote(self, match: SkillMatch, reason: str) -> None:
        """Forget a skill whose reuse failed validation: it is not retrieved again."""

        def work() -> tuple[str, str | None]:
            self.store.forget(match.memory_id)
            log.info("skill_demoted", memory_id=match.memory_id, reason=reason[:200])
            return f"demoted {match.memory_id}: {reason}", None

        self.runner.run("memory", "skill_demote", {"skill": match.memory_id}, work)


def _stored(parameter: Parameter) -> dict[str, str]:
    stored = {"name": parameter.name, "path": parameter.path, "kind": parameter.kind, "value": parameter.value}
    return stored if parameter.column is None else {**stored, "column": parameter.column}


def _parameters(
    spans: Sequence[PlanSpan],
    template: Sequence[str],
    names: Sequence[str],
    question: str,
    predicates: Mapping[str, str],
) -> list[Parameter]:
    """Each slot's plan constants: every span whose value is the slot's word of the question."""
    words: dict[str, str] = {}
    for word, token in zip(template, _TOKEN.findall(question), strict=True):
        if word.startswith("{") and word[1:-1] in names:
            words.setdefault(word[1:-1], token)
    return [
        Parameter(name, span.path, span.kind, span.text, _column_of(span, predicates))
        for name, word in words.items()
        for span in spans
        if span.text.lower() == word.lower()
    ]


def _column_of(span: PlanSpan, predicates: Mapping[str, str]) -> str | None:
    """The column a filter's word value is compared with (``category`` of ``category = 'kitchen'``)."""
    predicate = predicates.get(span.path)
    if span.kind != "filter value" or _NUMBER.fullmatch(span.text) or predicate is None:
        return None
    try:
        tree = parse_expression(predicate, "Filter")
    except SemrayError:
        return None
    for literal in tree.find_all(exp.Literal):
        if literal.is_string and literal.this == span.text:
            node: exp.Expr | None = literal.parent
            while node is not None:
                columns = referenced_columns(node)
                if columns:
                    return columns[0]
                node = node.parent
    return None


def _payload(memory: str) -> dict[str, Any] | None:
    try:
        payload = json.loads(memory)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or payload.get("version") != SKILL_VERSION:
        return None
    return payload


def _refill(payload: Mapping[str, Any], question: str, values: ValueLookup | None = None) -> dict[str, str] | None:
    """Slot values for a question of other words: its numbers in order for the numeric slots; a word slot keeps
    its value when the question states it, else takes a word of the question its column holds (``values``).
    None when the question does not fill the slots."""
    slots: dict[str, str] = {}
    columns: dict[str, str] = {}
    for item in payload.get("parameters", []):
        slots.setdefault(str(item["name"]), str(item["value"]))
        if item.get("column"):
            columns.setdefault(str(item["name"]), str(item["column"]))
    numeric = [name for name, value in slots.items() if _NUMBER.fullmatch(value)]
    numbers = _NUMBER.findall(question)
    if len(numbers) != len(numeric):
        return None
    words = {token.lower() for token in _TOKEN.findall(question)}
    bound = dict(zip(numeric, numbers, strict=True))
    offered = _offered_words(question, str(payload.get("question", "")))
    datasets = [str(name) for name in payload.get("datasets", [])]
    for name, value in slots.items():
        if name in bound:
            continue
        if value.lower() in words:
            bound[name] = value
            continue
        column = columns.get(name)
        found = None if values is None or column is None else _held(values, datasets, column, offered)
        if found is None:
            return None
        word, held = found
        offered.remove(word)  # one word fills one slot
        bound[name] = held
        log.info("skill_word_refilled", slot=name, old=value, new=held, column=column)
    return bound


def _unparameterised(payload: Mapping[str, Any]) -> str:
    """A skill's question without its word parameters' values, as its numbers are left out of the comparison:
    the average rating "of the lamp" and "of the kettle" are the same question of another value."""
    values = {
        str(item["value"]).lower()
        for item in payload.get("parameters", [])
        if not _NUMBER.fullmatch(str(item["value"])) and _refillable(item)
    }
    question = str(payload.get("question", ""))
    if not values:
        return question
    return " ".join(token for token in _TOKEN.findall(question) if token.lower() not in values)


def _refillable(item: Mapping[str, Any]) -> bool:
    """Whether a stored parameter can be re-filled by a word (it records the column its value is compared with)."""
    return bool(item.get("column"))


def _offered_words(question: str, skill_question: str) -> list[str]:
    """Runs of one to three content words of the question that could be a value, its new words first."""
    tokens = [token for token in _TOKEN.findall(question) if not _NUMBER.fullmatch(token)]
    known = {token.lower() for token in _TOKEN.findall(skill_question)}
    runs: list[str] = []
    for size in (1, 2, 3):
        for start in range(len(tokens) - size + 1):
            run = tokens[start : start + size]
            if run[0].lower() in _STOP or run[-1].lower() in _STOP:
                continue
            runs.append(" ".join(run))
    fresh = [run for run in runs if any(word.lower() not in known for word in run.split())]
    return list(dict.fromkeys([*fresh, *runs]))


def _held(values: ValueLookup, datasets: Sequence[str], column: str, offered: list[str]) -> tuple[str, str] | None:
    """The first offered word the column holds, and its spelling in the data."""
    for word in offered:
        try:
            held = values(datasets, column, word)
        except SemrayError as error:  # the data cannot be read: no re-fill
            log.info("skill_value_check_failed", column=column, error=str(error)[:200])
            return None
        if held is not None:
            return word, held
    return None


def _rebound(
    memory_id: str, payload: Mapping[str, Any], bound: Mapping[str, str], similarity: float | None = None
) -> SkillMatch | None:
    document = json.loads(json.dumps(payload["plan"]))  # a copy to rebind
    for item in payload.get("parameters", []):
        parameter = Parameter(str(item["name"]), str(item["path"]), str(item["kind"]), str(item["value"]))
        if not _rebind(document, parameter, bound[parameter.name]):
            return None
    return SkillMatch(
        memory_id,
        str(payload["question"]),
        document,
        tuple(str(name) for name in payload.get("datasets", [])),
        tuple(str(line) for line in payload.get("evidence", [])),
        tuple(sorted(bound.items())),
        similarity,
    )


def _rebind(document: dict[str, Any], parameter: Parameter, value: str) -> bool:
    """Put ``value`` where the parameter's constant is in the plan; False when it cannot stand there."""
    located = _field(document, parameter.path)
    if located is None:
        return False
    node, field = located
    old, numeric = parameter.value, _NUMBER.fullmatch(parameter.value) is not None
    if numeric and _NUMBER.fullmatch(value) is None:
        return False  # a number's slot takes a number
    if parameter.kind == "constant":
        if not value.isdigit():
            return False
        node[field] = int(value)
        return True
    text = node.get(field)
    if not isinstance(text, str):
        return False
    quoted = "'" + old.replace("'", "''") + "'"
    if quoted in text:
        node[field] = text.replace(quoted, "'" + value.replace("'", "''") + "'")
    elif numeric:
        node[field] = re.sub(rf"(?<![\w.']){re.escape(old)}(?![\w.'])", value, text)
    else:
        return False
    return True


def _field(document: dict[str, Any], path: str) -> tuple[dict[str, Any], str] | None:
    """The node and field a span path names (``plan.limit.input.filter.predicate``)."""
    parts = path.split(".")
    node: Any = document.get("plan")
    position = 1
    while isinstance(node, dict) and position + 1 < len(parts):
        if node.get("op") != parts[position]:
            return None
        field = parts[position + 1]
        if field == "inputs" and position + 2 < len(parts):
            inputs = node.get("inputs")
            index = int(parts[position + 2]) if parts[position + 2].isdigit() else -1
            node = inputs[index] if isinstance(inputs, list) and 0 <= index < len(inputs) else None
            position += 3
        elif field in ("input", "left", "right"):
            node = node.get(field)
            position += 2
        else:
            return (node, field) if position + 2 == len(parts) else None
    return None
