"""Problems found in a plan, with the JSON path of each, and the category that routes them.

``data`` problems (a table, column or type the data does not have) go back to the profiling
agent, ``semantic`` ones (the plan's logic does not answer the question) to the planning agent,
``grammar`` ones (malformed JSON, fields, expressions, templates) to the manipulation agent.

>>> PlanIssue("plan.filter.predicate", "column 'ratng' not found", "column").category
'data'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorCategory = Literal["data", "semantic", "grammar"]
CATEGORY_OF_CODE: dict[str, ErrorCategory] = {
    "json": "grammar",
    "schema": "grammar",
    "expression": "grammar",
    "template": "grammar",
    "operator": "grammar",
    "table": "data",
    "column": "data",
    "type": "data",
    "join_key": "data",
    "source": "data",
    "aggregate": "semantic",
    "judge": "semantic",
    "execution": "semantic",
    "span": "grammar",  # a weakly grounded span (spans.py): only the agent that wrote it drafts again
    "reflection": "semantic",  # an answer that does not answer the question (reflection.py): plan it again
    "reflection_data": "data",  # an answer about the wrong data: choose the datasets again
}
ROUTE: dict[ErrorCategory, str] = {"data": "profiling", "semantic": "planning", "grammar": "manipulation"}
"""Which agent a category of error goes back to."""


@dataclass(frozen=True, slots=True)
class PlanIssue:
    """One problem: where (a JSON path into the plan document), what, and its kind (``code``)."""

    path: str
    message: str
    code: str
    correction: str = ""

    @property
    def category(self) -> ErrorCategory:
        return CATEGORY_OF_CODE.get(self.code, "grammar")

    @property
    def signature(self) -> str:
        """What makes two occurrences the same error: code and message without the path."""
        return f"{self.code}: {self.message}"

    def line(self) -> str:
        fix = f" Correction: {self.correction}" if self.correction else ""
        return f"- [{self.category}/{self.code}] at {self.path}: {self.message}{fix}"


def feedback_text(issues: tuple[PlanIssue, ...]) -> str:
    """The feedback block a prompt shows, one line per issue ("none" when there are none)."""
    return "\n".join(issue.line() for issue in issues) or "none"
