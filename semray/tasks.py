"""What a semantic operator asks a model of each row: the task kinds, and one question as plain values.

One vocabulary for the plan IR (each semantic node declares its ``question()``), lowering
(``pipeline.stages.semantic.SemanticTask.kind``), the prompts (``serving.prompts.operators`` keys its
templates by kind and builds every row request from a `Question`) and the cost model (which
counts the tokens of that same request). It lives at the package root, next to ``errors``,
because both ``operators`` and ``serving`` use it and neither may import the other.

A `TaskKind` is a ``StrEnum``: it equals, hashes and serializes as its string (``"filter"``), so
journals, JSON plans and logs read as before.

>>> TaskKind.FILTER == "filter", TaskKind("score").cascades
(True, True)
>>> Question(TaskKind.CLASSIFY, "topic of {text}", choices=("a", "b")).fields
()
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskKind(StrEnum):
    """The kinds of per-row question a semantic operator sends (one prompt template each)."""

    FILTER = "filter"
    """Does the statement hold? Yes or No (a SemFilter; a SemJoin asks it per pair)."""
    MAP = "map"
    """Free text or a free typed value (a SemMap without a scale; a SemAgg is priced as one)."""
    SCORE = "score"
    """A number on a scale ``lo`` to ``hi`` (a SemMap with ``lo``/``hi``; a SemTopK is priced as one)."""
    CLASSIFY = "classify"
    """One of N labels (a SemClassify)."""
    EXTRACT = "extract"
    """Typed fields as JSON (a SemExtract)."""

    @property
    def cascades(self) -> bool:
        """Whether the cascade router can route this kind (embedding -> small -> large tier)."""
        return self in CASCADE_KINDS


CASCADE_KINDS: frozenset[TaskKind] = frozenset({TaskKind.FILTER, TaskKind.CLASSIFY, TaskKind.SCORE})
"""The kinds a cascade routes: a filter's proxy is its similarity to the instruction, a
classification's its nearest label, a score has no embedding proxy (small, then large tier)."""


@dataclass(frozen=True, slots=True)
class Question:
    """What an operator asks of every row before the row is rendered into it.

    ``instruction`` is the operator's template over ``{column}`` cells; ``choices`` the labels of
    a classification; ``lo``/``hi`` a score's scale; ``fields`` the (name, semray value type) of
    an extraction. ``serving.prompts.operators.row_request`` turns it and one row into a request.
    """

    kind: TaskKind
    instruction: str
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    fields: tuple[tuple[str, str], ...] = ()
