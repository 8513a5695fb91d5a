"""Deciding the answer (right or deterministically wrong) and writing it in the requested format.

Wrong answers: a filter or pair flips; a label becomes another choice (picked by hash); a score
moves by ``score_error_shift`` (down or up by hash, staying in range); an extraction corrupts one
field (picked by hash) to another value of its column; free text becomes another row's text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semray.serving.simulator.config import TaskSpec
from semray.serving.simulator.draws import choose_index
from semray.serving.simulator.truth import Answer, LabelStore
from semray.serving.simulator.understanding import OutputFormat, normalize_name

NO_ANSWER_TEXT = "I cannot tell from the text provided."
FREE_TEXT_WITHOUT_LABEL = "The text gives no further detail beyond what is quoted."
REASONING_TEXT = "I read the text and weighed what it says against the question."
_ANSWER_FIELD_NAMES = frozenset(
    {"answer", "label", "result", "value", "output", "decision", "prediction", "category", "class", "score", "rating"}
)
_REASONING_FIELD_NAMES = frozenset({"reasoning", "explanation", "rationale", "reason", "thoughts", "thinking"})
_JSON_TYPES: Mapping[type, tuple[str, ...]] = {
    bool: ("boolean",),
    int: ("integer", "number"),
    float: ("number",),
    str: ("string",),
}


def wrong_answer(task: TaskSpec, truth: Answer, store: LabelStore, question: tuple[str | int, ...]) -> Answer:
    """A deterministic wrong answer for ``task`` whose right answer is ``truth``."""
    if task.kind in ("filter", "pair"):
        return not truth
    if task.kind == "label":
        others = [choice for choice in store.choices(task) if _same(choice, truth) is False]
        return others[choose_index(len(others), "wrong", *question)] if others else truth
    if task.kind == "score":
        return _shift_score(task, truth, question)
    if task.kind == "extract" and isinstance(truth, dict):
        name = sorted(task.fields)[choose_index(len(task.fields), "wrong-field", *question)]
        corrupted = dict(truth)
        corrupted[name] = _other_value(store.distinct(task, task.fields[name]), truth[name], question)
        return corrupted
    if task.kind == "free_text" and task.label_column is not None:
        other = _other_value(store.distinct(task, task.label_column), truth, question)
        return None if other is None else str(other)
    return truth


def _same(left: Any, right: Any) -> bool:
    return str(left).strip().casefold() == str(right).strip().casefold()


def _other_value(values: Sequence[Any], current: Any, question: tuple[str | int, ...]) -> Any:
    others = [value for value in values if not _same(value, current)]
    if others:
        return others[choose_index(len(others), "wrong-value", *question)]
    if isinstance(current, int | float) and not isinstance(current, bool):
        return current + 1
    return None


def _shift_score(task: TaskSpec, truth: Answer, question: tuple[str | int, ...]) -> Answer:
    if not isinstance(truth, int | float) or isinstance(truth, bool):
        return truth
    low, high = task.score_range
    step = task.score_error_shift
    first, second = (-step, step) if choose_index(2, "wrong-direction", *question) == 0 else (step, -step)
    for shift in (first, second):
        moved = truth + shift
        if low <= moved <= high:
            return int(moved) if float(moved).is_integer() else moved
    return truth


def option_count(task: TaskSpec | None, store: LabelStore) -> int:
    """How many answers the model chooses among (sets the confidence floor ``1/n``)."""
    if task is None:
        return 2
    if task.kind == "label":
        return max(len(store.choices(task)), 2)
    if task.kind == "score":
        low, high = task.score_range
        steps = (high - low) / task.score_error_shift + 1
        return max(round(steps), 2)
    return 2


def default_answer(task: TaskSpec | None, store: LabelStore) -> Answer:
    """What the simulator says when no row matched: a fixed, uninformed answer."""
    if task is None:
        return NO_ANSWER_TEXT
    if task.kind in ("filter", "pair"):
        return False
    if task.kind == "label":
        choices = store.choices(task)
        return choices[0] if choices else NO_ANSWER_TEXT
    if task.kind == "score":
        low = task.score_range[0]
        return int(low) if low.is_integer() else low
    if task.kind == "extract":
        return dict.fromkeys(task.fields)
    return NO_ANSWER_TEXT


def alternatives(task: TaskSpec | None, value: Answer, store: LabelStore) -> tuple[Answer, ...]:
    """Other answers the model could have given, most plausible first (for top_logprobs)."""
    if task is None or isinstance(value, dict):
        return ()
    if isinstance(value, bool):
        return (not value,)
    if task.kind == "label":
        return tuple(choice for choice in store.choices(task) if not _same(choice, value))
    if task.kind == "score" and isinstance(value, int | float):
        low, high = task.score_range
        step = task.score_error_shift
        near = sorted(
            (value + k * step for k in range(-int((high - low) / step), int((high - low) / step) + 1) if k),
            key=lambda v: (abs(v - value), v),
        )
        return tuple(int(v) if float(v).is_integer() else v for v in near if low <= v <= high)
    return ()


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of output text; ``answer`` pieces carry the answer's confidence on their first word."""

    text: str
    answer: bool = False
    alternatives: tuple[str, ...] = ()


def render(task: TaskSpec | None, value: Answer, others: Sequence[Answer], fmt: OutputFormat) -> list[Piece]:
    """Write ``value`` as the format asks: bare, JSON, or reasoning followed by the answer marker."""
    if fmt.style == "json":
        return _render_json(task, value, others, fmt)
    body = (
        _json_pieces(value, fmt)
        if isinstance(value, dict)
        else [Piece(_bare(value, fmt), True, tuple(_bare(other, fmt) for other in others))]
    )
    if fmt.style == "reasoning":
        return [Piece(f"Reasoning: {REASONING_TEXT}\n{fmt.marker} "), *body]
    return body


def _bare(value: Answer, fmt: OutputFormat) -> str:
    if isinstance(value, bool):
        return fmt.boolean_words[0] if value else fmt.boolean_words[1]
    if value is None:
        return NO_ANSWER_TEXT
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def _json_pieces(
    mapping: Mapping[str, Any],
    fmt: OutputFormat,
    answer_keys: frozenset[str] | None = None,
    alternatives_by_key: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Piece]:
    pieces = [Piece("{")]
    for position, (key, item) in enumerate(mapping.items()):
        prefix = ", " if position else ""
        pieces.append(Piece(f"{prefix}{json.dumps(key)}: "))
        is_answer = answer_keys is None or key in answer_keys
        alts = (alternatives_by_key or {}).get(key, ())
        pieces.append(
            Piece(
                json.dumps(_coerce(item, fmt.field_types.get(key, "")), ensure_ascii=False),
                is_answer and item is not None,
                alts,
            )
        )
    pieces.append(Piece("}"))
    return pieces


def _coerce(value: Any, json_type: str) -> Any:
    if value is None:
        return None
    if json_type == "string" and not isinstance(value, str):
        return str(value)
    return value


def _render_json(task: TaskSpec | None, value: Answer, others: Sequence[Answer], fmt: OutputFormat) -> list[Piece]:
    if isinstance(value, dict):
        by_name = {normalize_name(name): item for name, item in value.items()}
        fields = fmt.fields or tuple(value)
        return _json_pieces({name: by_name.get(normalize_name(name)) for name in fields}, fmt)
    fields = fmt.fields or ("answer",)
    key = _answer_field(task, value, fields, fmt)
    rendered = _match_enum(value, fmt.enums.get(key, ()))
    document: dict[str, Any] = {}
    for name in fields:
        if name == key:
            document[name] = rendered
        elif normalize_name(name) in _REASONING_FIELD_NAMES:
            document[name] = REASONING_TEXT
        else:
            document[name] = None
    alts = tuple(json.dumps(_match_enum(other, fmt.enums.get(key, ())), ensure_ascii=False) for other in others)
    return _json_pieces(document, fmt, frozenset({key}), {key: alts})


def _answer_field(task: TaskSpec | None, value: Answer, fields: Sequence[str], fmt: OutputFormat) -> str:
    names = {normalize_name(n) for n in (task.name, task.label_column or "") if n} if task else set()
    for name in fields:
        if normalize_name(name) in _ANSWER_FIELD_NAMES or normalize_name(name) in names:
            return name
    wanted = _JSON_TYPES.get(type(value), ())
    for name in fields:
        if fmt.field_types.get(name) in wanted and normalize_name(name) not in _REASONING_FIELD_NAMES:
            return name
    return fields[0]


def _match_enum(value: Answer, enum: Sequence[Any]) -> Answer:
    """The schema's enum entry that names ``value`` (ignoring case and punctuation), else ``value``."""
    if not enum or isinstance(value, bool | dict) or value is None:
        return value
    wanted = normalize_name(str(value))
    for entry in enum:
        if normalize_name(str(entry)) == wanted:
            return entry  # type: ignore[no-any-return]
    return value
