"""Which per-row property a semantic join's pair predicate compares, read from its wording.

A pair predicate ``p(l, r)`` *factorizes* when it is ``f(l) R g(r)`` for a per-row property
``f`` and a relation ``R``: equal ("the same X"), different ("different X", "opposite X"), or
ordered ("{l.a} is more X than {r.b}"). Such a join can ask each side once (n + m calls) and
join the answers relationally instead of asking about every pair (n x m).

Two detectors, both pure and syntactic:

* `detect_factorization`: whole-instruction templates of the common forms. Its ``exact``
  answers ("same X", "different X", "not the same X") are equal-or-not predicates by their form,
  so rule 7 applies them without measuring; the others (ordered, "opposite") leave room for the
  per-row answers to disagree with the pairwise ones (ties on a scale, a neutral middle) and are
  used only after verification (``pipeline/runs/plan_time/join_factorization.py``).
* `find_factorization`: one "same X" / "different X" / "differ in X" / "opposite X" phrase in a
  free-form, multi-sentence instruction ("Here are two tickets. Answer yes only if they concern
  the same product."). Always verified before use.

>>> detect_factorization("{l.a} and {r.b} have different sentiments")
Factorization(factor='sentiments', relation='<>', labels=(), exact=True)
>>> detect_factorization("Is {l.a} more urgent than {r.b}?")
Factorization(factor='urgent', relation='>', labels=(), exact=False)
>>> find_factorization("Here is a ticket: {l.t}. Here is another: {r.t}. Are they about the same product?")
Factorization(factor='product', relation='=', labels=(), exact=False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from semray.operators.templates import split_side, template_columns

Relation = Literal["=", "<>", "<", ">"]
"""How the two sides' values relate for a pair to hold (``<``/``>``: left value vs right value)."""

FLIPPED: dict[Relation, Relation] = {"=": "=", "<>": "<>", "<": ">", ">": "<"}


@dataclass(frozen=True, slots=True)
class Factorization:
    """A factorized form of a pair predicate: ``factor(l) relation factor(r)``.

    ``labels``: the property's values when they are a known small set (asked as a choice);
    ``exact``: the wording alone makes the predicate this comparison (no verification needed).
    """

    factor: str
    relation: Relation
    labels: tuple[str, ...] = ()
    exact: bool = False

    @property
    def ordered(self) -> bool:
        return self.relation in ("<", ">")


_A, _B = (r"\{(?P<" + name + r">[lr])\.[^{}]+\}" for name in ("a", "b"))
_X = r"(?P<property>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,3})"
_LEAD = r"^\s*(?:(?:do|does|are|is)\s+)?"
_END = r"\s*[?.]?\s*$"
_PREP = r"(?:about|in|of|from|on)"
_FORMS: tuple[tuple[str, Relation, bool], ...] = (
    # (pattern body, relation of a to b, exact)
    (_A + r"\s+and\s+" + _B + r"\s+(?:have|share)\s+the\s+same\s+" + _X, "=", True),
    (_A + r"\s+and\s+" + _B + r"\s+(?:(?:are|is)\s+)?" + _PREP + r"\s+the\s+same\s+" + _X, "=", True),
    (_A + r"\s+(?:has|have|shares|share)\s+the\s+same\s+" + _X + r"\s+as\s+" + _B, "=", True),
    (_A + r"\s+(?:(?:is|are)\s+)?" + _PREP + r"\s+the\s+same\s+" + _X + r"\s+as\s+" + _B, "=", True),
    (_A + r"\s+and\s+" + _B + r"\s+(?:have|are\s+of|are\s+in|are\s+about|are\s+from)\s+different\s+" + _X, "<>", True),
    (_A + r"\s+and\s+" + _B + r"\s+differ\s+in\s+(?:their\s+)?" + _X, "<>", True),
    (_A + r"\s+(?:has|have)\s+a\s+different\s+" + _X + r"\s+(?:than|from)\s+" + _B, "<>", True),
    (_A + r"\s+and\s+" + _B + r"\s+(?:do|does)\s+not\s+(?:have|share)\s+the\s+same\s+" + _X, "<>", True),
    (_A + r"\s+(?:does|do)\s+not\s+(?:have|share)\s+the\s+same\s+" + _X + r"\s+as\s+" + _B, "<>", True),
    (_A + r"\s+and\s+" + _B + r"\s+(?:have|are\s+of)\s+opposite\s+" + _X, "<>", False),
    (_A + r"\s+(?:has|have)\s+the\s+opposite\s+" + _X + r"\s+(?:of|to|from)\s+" + _B, "<>", False),
    (_A + r"\s+(?:(?:is|are)\s+)?more\s+" + _X + r"\s+than\s+" + _B, ">", False),
    (_A + r"\s+(?:(?:is|are)\s+)?less\s+" + _X + r"\s+than\s+" + _B, "<", False),
    (_A + r"\s+(?:has|have)\s+a\s+(?:higher|greater|larger|bigger)\s+" + _X + r"\s+than\s+" + _B, ">", False),
    (_A + r"\s+(?:has|have)\s+a\s+(?:lower|smaller)\s+" + _X + r"\s+than\s+" + _B, "<", False),
)
_PATTERNS = tuple((re.compile(_LEAD + body + _END, re.IGNORECASE), relation, exact) for body, relation, exact in _FORMS)
_NOT_A_PROPERTY = frozenset(
    {"not", "no", "more", "less", "similar", "related", "different", "same", "than", "or", "and", "but", "as"}
)

# The free-form finder: one comparison phrase, property words up to a word that ends it.
_PHRASE_FORMS: tuple[tuple[str, Relation], ...] = (
    (r"\bnot\s+(?:[a-z]+\s+){0,2}?the\s+same\s+", "<>"),
    (r"\bthe\s+same\s+", "="),
    (r"\bdifferent\s+", "<>"),
    (r"\bdiffer(?:s)?\s+in\s+(?:their\s+)?", "<>"),
    (r"\b(?:the\s+)?opposite\s+", "<>"),
)
_PHRASES = tuple((re.compile(pattern, re.IGNORECASE), relation) for pattern, relation in _PHRASE_FORMS)
_ENDS = frozenset(
    [
        "as",
        "than",
        "from",
        "to",
        "with",
        "or",
        "and",
        "but",
        "if",
        "in",
        "on",
        "at",
        "for",
        "by",
        "so",
        "otherwise",
        "yes",
        "no",
        "is",
        "are",
        "was",
        "were",
        "be",
        "do",
        "does",
        "between",
        "each",
        "both",
        "either",
        "the",
        "a",
        "an",
        "that",
        "which",
        "who",
        "whose",
        "when",
        "where",
        "whether",
        "they",
        "them",
        "it",
        "its",
        "this",
        "these",
    ]
)
_DOUBT = re.compile(
    r"\b(?:similar|related|close|closely|like|alike|resembl\w*|comparable|overlap\w*|roughly|partly|either|"
    r"never|n't|cannot|unless|except)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|no)\b", re.IGNORECASE)
_ANSWER_WORDS = re.compile(
    r"\b(?:yes\s*(?:,|or|/)\s*no|no\s*(?:or|/)\s*yes|(?:answer|say|otherwise|else)\s*,?\s*(?:with\s+)?no|no\s+otherwise)\b",
    re.IGNORECASE,
)
_MAX_WORDS = 3


def _one_column_per_side(instruction: str) -> bool:
    references = template_columns(instruction, "SemJoin")
    return sorted(split_side(reference, "SemJoin")[0] for reference in references) == ["l", "r"]


def detect_factorization(instruction: str) -> Factorization | None:
    """The factorization a whole instruction states in one of the common forms, or None.

    Forms (case-insensitive, optional leading Do/Does/Are/Is and trailing ``?``/``.``, either
    side first): "{a} and {b} have|share the same X", "... are about|in|of|from the same X",
    "{a} has the same X as {b}", "{a} is about the same X as {b}"; "{a} and {b} have different
    X", "{a} and {b} differ in X", "{a} has a different X than|from {b}", "... do not have the
    same X"; "{a} and {b} have opposite X", "{a} has the opposite X of {b}"; "{a} is more|less
    X than {b}", "{a} has a higher|greater|larger|lower|smaller X than {b}". X is one to four
    words and none of "similar", "related", "more", ... An instruction that reads more than one
    column of a side is never factorized.

    >>> detect_factorization("{r.b} is less formal than {l.a}").relation
    '>'
    >>> detect_factorization("{l.a} and {r.b} have a similar topic") is None
    True
    """
    if not _one_column_per_side(instruction):
        return None
    for pattern, relation, exact in _PATTERNS:
        match = pattern.match(instruction)
        if match is None:
            continue
        words = match.group("property").lower().split()
        if set(words) & _NOT_A_PROPERTY:
            continue
        first_is_left = match.group("a") == "l"
        return Factorization(" ".join(words), relation if first_is_left else FLIPPED[relation], exact=exact)
    return None


def find_factorization(instruction: str) -> Factorization | None:
    """One comparison of a single property in free-form wording, or None (never ``exact``).

    The instruction must read one column per side and state exactly one property comparison
    ("the same X", "different X", "differ in X", "opposite X", "not ... the same X"); words of
    doubt ("similar", "related", "roughly", ...) or any other negation leave it alone.

    >>> find_factorization("Do {l.t} and {r.t} differ in tone? Answer yes or no.")
    Factorization(factor='tone', relation='<>', labels=(), exact=False)
    >>> find_factorization("{l.t} and {r.t} are similar, or have the same topic") is None
    True
    """
    exact = detect_factorization(instruction)
    if exact is not None:
        return Factorization(exact.factor, exact.relation)
    if not _one_column_per_side(instruction) or _DOUBT.search(instruction):
        return None
    text = re.sub(r"\{[^{}]*\}", " , ", instruction)  # a cell ends a property phrase
    text = _ANSWER_WORDS.sub(" , ", text)  # "answer yes or no" negates nothing
    found: set[tuple[str, Relation]] = set()
    negations = len(_NEGATION.findall(text))
    for pattern, relation in _PHRASES:

        def record(match: re.Match[str], relation: Relation = relation) -> str:
            words = _property_words(match.string[match.end() :])
            found.add((" ".join(words), relation))
            return " , "  # "not ... the same X" is not also "the same X"

        before = text
        text = pattern.sub(record, text)
        if pattern is _PHRASES[0][0]:
            negations -= len(_NEGATION.findall(before)) - len(_NEGATION.findall(text))
    if len(found) != 1 or "" in {prop for prop, _ in found} or negations:
        return None
    prop, relation = found.pop()
    return Factorization(prop, relation)


def _property_words(rest: str) -> list[str]:
    words: list[str] = []
    for token in re.findall(r"[A-Za-z][A-Za-z-]*|[^\sA-Za-z]", rest):
        lowered = token.lower()
        if not token[0].isalpha() or lowered in _ENDS or len(words) == _MAX_WORDS:
            break
        words.append(lowered)
    if set(words) & _NOT_A_PROPERTY:
        return []
    return words
