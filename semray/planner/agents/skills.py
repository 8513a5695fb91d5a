"""Workflow materialization: a plan that was validated and ran becomes a skill a later question reuses.

A skill is a memory of category ``skill`` in long-term memory (the catalog's memory table, or a
``ListMemory``), found by the question like any memory. It holds the question, the validated plan
document, the datasets it reads, its validation evidence (the checks it passed, the run) and its
parameters: the plan's constants (filter values, limits, ``k``; ``spans.py``) that appear as a word
of the question. The question with those words as slots is the skill's template: a new question
matches when it has the template's words, case aside, with any words in the slots, and the plan is
rebound to them (``rating >= 4`` for "... at least 4?", ``rating >= 2`` for "... at least 2?").

A match is only a candidate: the loop validates the rebound plan like a draft (grammar, judges, the
run) and, when it passes, plans nothing. A skill whose reuse fails validation is demoted, forgotten
from memory so it is not retrieved again, and the question is planned as if there were none.

>>> template, parameters = question_template("How many reviews have a rating of at least 4?", (("4", "p"),))
>>> bind(template, "How many reviews have a rating of at least 2?")
{'p0': '2'}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semray.log import get_logger
from semray.planner.agents.catalog_view import MemoryView
from semray.planner.agents.spans import PlanSpan, decision_spans
from semray.planner.agents.step import StepRunner

log = get_logger(__name__)

SKILL = "skill"
SKILL_VERSION = 1
CANDIDATES = 5
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|\w+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
PARAMETER_KINDS = frozenset({"filter value", "constant"})


@dataclass(frozen=True, slots=True)
class Parameter:
    """A plan constant that is a word of the question: where it sits in the plan and its value there."""

    name: str
    path: str
    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class SkillMatch:
    """A stored skill that fits a question, its plan rebound to the question's words."""

    memory_id: str
    question: str
    document: dict[str, Any]
    datasets: tuple[str, ...]
    evidence: tuple[str, ...]
    bound: tuple[tuple[str, str], ...]

    @property
    def plan_text(self) -> str:
        return json.dumps(self.document)

    def line(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in self.bound) or "no parameters"
        return (
            f"skill {self.memory_id} of {self.question!r} ({values}); validated before by: {'; '.join(self.evidence)}"
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

    def __init__(self, runner: StepRunner, store: MemoryView) -> None:
        self.runner = runner
        self.store = store

    def find(self, question: str) -> SkillMatch | None:
        """The first stored skill whose template fits ``question``, rebound; one recorded step."""
        found: list[SkillMatch] = []

        def work() -> tuple[str, str | None]:
            for record in self.store.recall(question, CANDIDATES, SKILL):
                match = _match(record.memory_id, record.memory, question)
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
        spans = [span for span in decision_spans(document["plan"]) if span.kind in PARAMETER_KINDS]
        template, names = question_template(question, [(span.text, span.path) for span in spans])
        parameters = _parameters(spans, template, names, question)
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
    return {"name": parameter.name, "path": parameter.path, "kind": parameter.kind, "value": parameter.value}


def _parameters(
    spans: Sequence[PlanSpan], template: Sequence[str], names: Sequence[str], question: str
) -> list[Parameter]:
    """Each slot's plan constants: every span whose value is the slot's word of the question."""
    words: dict[str, str] = {}
    for word, token in zip(template, _TOKEN.findall(question), strict=True):
        if word.startswith("{") and word[1:-1] in names:
            words.setdefault(word[1:-1], token)
    return [
        Parameter(name, span.path, span.kind, span.text)
        for name, word in words.items()
        for span in spans
        if span.text.lower() == word.lower()
    ]


def _match(memory_id: str, memory: str, question: str) -> SkillMatch | None:
    try:
        payload = json.loads(memory)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or payload.get("version") != SKILL_VERSION:
        return None
    bound = bind([str(word) for word in payload.get("template", [])], question)
    if bound is None:
        return None
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
