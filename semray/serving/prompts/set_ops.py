"""Prompts of the set-level semantic operators (joins, top-k, aggregation), as versioned data.

Pairs of a join are judged as a row-wise ``filter`` over a pair row (``operators.build_request``);
this module holds what has no row-wise counterpart: the per-side question of a factorized join,
the pairwise comparison of a top-k, and the leaf and combine steps of an aggregation.

>>> side_template("{l.text} and {r.text} share a topic", "l").split(". It")[0]
'Consider the condition: "the first text and the second text share a topic"'
"""

from __future__ import annotations

import string

from semray.serving.contract import ModelRequest, OutputConstraint

SET_PROMPT_VERSION = "set-prompts/2"

SIDE_NAMES = {"l": "the first text", "r": "the second text"}
SIDE_TEMPLATE = (
    'Consider the condition: "{condition}". It compares one property of the two texts. '
    "Give that property of this text, in a few words and nothing else:\n\n{cells}"
)
FACTOR_TEMPLATE = (
    'Consider the condition: "{condition}". It compares the {factor} of the two texts. '
    "Give the {factor} of this text, in a few words and nothing else:\n\n{cells}"
)
FACTOR_LABEL_TEMPLATE = 'the {factor} of this text (the condition "{condition}" compares it):\n\n{cells}'
FACTOR_SCORE_TEMPLATE = (
    'Consider the condition: "{condition}". It compares the two texts by how {factor} they are. '
    "How {factor} is this text?\n\n{cells}"
)
RIGHT_LABELS_TEMPLATE = (
    'this first text by the second text for which the condition "{condition}" holds:\n\n{cells}'
)
FACTOR_SCALE = (1.0, 10.0)
"""The scale an ordered factorization scores each side on."""
PROPOSE_SYSTEM = "You analyse conditions that compare two texts. You answer in JSON."
PROPOSE_USER = (
    'A join keeps the pairs of texts for which this condition holds: "{condition}".\n\n'
    "Does the condition only compare one property of each text, so that it can be decided by "
    "finding that property of each text on its own and comparing the two values? If so, name the "
    'property, the relation ("same", "different", "greater": the first text has more of it, or "less"), '
    "and its possible values when they are a small fixed set (else an empty list). If the "
    "condition needs both texts at once (similarity, one text mentioning the other, several "
    'properties), answer "factorizes": false.'
)
PROPOSE_OUTPUT: dict[str, object] = {
    "type": "object",
    "properties": {
        "factorizes": {"type": "boolean"},
        "property": {"type": "string"},
        "relation": {"type": "string", "enum": ["same", "different", "greater", "less"]},
        "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
    },
    "required": ["factorizes", "property", "relation", "labels"],
    "additionalProperties": False,
}
"""The expected output of a factorization proposal (``factorization_request``)."""
PROPOSE_MAX_TOKENS = 256
COMPARE_SYSTEM = "You compare two items against a criterion. You answer Yes or No."
COMPARE_USER = (
    "Criterion: {criterion}\n\nFirst item:\n{first}\n\nSecond item:\n{second}\n\n"
    "Is the first item better than the second item for the criterion? Answer Yes or No."
)
AGG_SYSTEM = "You answer questions over a set of records, exactly and briefly."
AGG_LEAF = (
    "{question}\n\nGive partial counts: one 'value: count' line per value, for these records only."
    "\n\nRecords:\n{records}"
)
AGG_ANSWER = "{question}\n\nRecords:\n{records}"
AGG_COMBINE = "{question}\n\nCombine the answers below, each from a different part of the records.\n\n{parts}"
AGG_COMBINE_PARTIAL = (
    "{question}\n\nGive partial counts: one 'value: count' line per value. Combine the answers below, "
    "each from a different part of the records.\n\n{parts}"
)
AGG_MAX_TOKENS = 256


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def side_template(
    instruction: str, side: str, factor: str | None = None, *, labels: bool = False, ordered: bool = False
) -> str:
    """The template asking one side of a factorized join for the property the condition compares.

    ``{l.col}`` references become ``{col}`` cells (for ``side="l"``); the condition is shown with
    both sides' cells replaced by "the first text" / "the second text". With a named ``factor``
    the question names it: as free text, as the instruction of a classification (``labels``) or
    of a score (``ordered``).

    >>> side_template("{l.a} is more formal than {r.b}", "r", "formal", ordered=True)[-29:]
    'How formal is this text?\\n\\n{b}'
    """
    condition: list[str] = []
    cells: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(instruction):
        condition.append(literal)
        if field is None:
            continue
        reference_side, _, column = field.partition(".")
        condition.append(SIDE_NAMES.get(reference_side, "the text"))
        if reference_side == side and f"{{{column}}}" not in cells:
            cells.append(f"{{{column}}}")
    shown = _escape(" ".join("".join(condition).split()))
    if factor is None:
        text = SIDE_TEMPLATE.format(condition=shown, cells="{cells}")
    else:
        template = FACTOR_SCORE_TEMPLATE if ordered else FACTOR_LABEL_TEMPLATE if labels else FACTOR_TEMPLATE
        text = template.format(condition=shown, factor=_escape(factor), cells="{cells}")
    return text.replace("{cells}", "\n\n".join(cells))


def right_labels_template(instruction: str) -> str:
    """The classification of a left row into the right side's values (a join against a few categories).

    >>> right_labels_template("{l.review} is about {r.category}")[-16:]
    'holds:\\n\\n{review}'
    """
    cells = side_template(instruction, "l").rsplit(":\n\n", 1)[1]
    return RIGHT_LABELS_TEMPLATE.format(condition=_escape(plain_condition(instruction)), cells="{cells}").replace(
        "{cells}", cells
    )


def plain_condition(instruction: str) -> str:
    """The join condition with its cells named "the first text" / "the second text".

    >>> plain_condition("{l.a} and {r.b} differ in tone")
    'the first text and the second text differ in tone'
    """
    pieces: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(instruction):
        pieces.append(literal)
        if field is not None:
            pieces.append(SIDE_NAMES.get(field.partition(".")[0], "the text"))
    return " ".join("".join(pieces).split())


def factorization_request(instruction: str, request_id: str) -> ModelRequest:
    """Ask whether a join condition compares one per-row property, and which (JSON, ``PROPOSE_OUTPUT``)."""
    return ModelRequest(
        prompt=PROPOSE_USER.format(condition=plain_condition(instruction)),
        system=PROPOSE_SYSTEM,
        constraint=OutputConstraint.schema(PROPOSE_OUTPUT),
        max_tokens=PROPOSE_MAX_TOKENS,
        request_id=request_id,
    )


def pair_template(instruction: str, renames: dict[str, str]) -> str:
    """The join instruction over a pair row: ``{l.col}`` -> ``{col}``, ``{r.col}`` -> ``{renames[col]}``.

    >>> pair_template("{l.a} matches {r.a}", {"a": "a_right"})
    '{a} matches {a_right}'
    """
    pieces: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(instruction):
        pieces.append(_escape(literal))
        if field is None:
            continue
        side, _, column = field.partition(".")
        pieces.append("{" + (renames[column] if side == "r" else column) + "}")
    return "".join(pieces)


def plain_question(instruction: str) -> str:
    """An aggregate or ranking instruction with its ``{col}`` references named, not filled.

    >>> plain_question("Which diagnosis is most common among {symptoms}?")
    'Which diagnosis is most common among the symptoms?'
    """
    pieces: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(instruction):
        pieces.append(literal)
        if field is not None:
            pieces.append(f"the {field}")
    return "".join(pieces)


def comparison_request(criterion: str, first: str, second: str, request_id: str) -> ModelRequest:
    """Is ``first`` better than ``second`` for ``criterion``? (Yes/No)"""
    return ModelRequest(
        prompt=COMPARE_USER.format(criterion=criterion, first=first, second=second),
        system=COMPARE_SYSTEM,
        constraint=OutputConstraint.choice("Yes", "No"),
        max_tokens=4,
        request_id=request_id,
    )


def aggregate_request(question: str, records: list[str], *, partial: bool, request_id: str) -> ModelRequest:
    """One leaf of an aggregation: the question over ``records`` (partial: counts for a combine step)."""
    numbered = "\n".join(f"{position}. {record}" for position, record in enumerate(records, 1))
    template = AGG_LEAF if partial else AGG_ANSWER
    return ModelRequest(
        prompt=template.format(question=question, records=numbered),
        system=AGG_SYSTEM,
        constraint=OutputConstraint.text(),
        max_tokens=AGG_MAX_TOKENS,
        request_id=request_id,
    )


def combine_request(question: str, parts: list[str], *, partial: bool, request_id: str) -> ModelRequest:
    """One combine step: the question over the answers of parts of the records."""
    joined = "\n\n".join(f"Part {position}:\n{part}" for position, part in enumerate(parts, 1))
    template = AGG_COMBINE_PARTIAL if partial else AGG_COMBINE
    return ModelRequest(
        prompt=template.format(question=question, parts=joined),
        system=AGG_SYSTEM,
        constraint=OutputConstraint.text(),
        max_tokens=AGG_MAX_TOKENS,
        request_id=request_id,
    )


def leaf_overhead(question: str) -> str:
    """The text of a leaf prompt without its records (for budgeting records into the context)."""
    return f"{AGG_SYSTEM}\n{AGG_LEAF.format(question=question, records='')}"
