"""Errors of the question planner: each says what to do next.

>>> raise PlanningNeedsModelError("...")  # doctest: +SKIP
"""

from __future__ import annotations

from semray.errors import SemrayError


class AgentError(SemrayError):
    """Base of the errors the planning agents raise on purpose."""


class PlanningNeedsModelError(AgentError):
    """Only simulated tiers are configured: the simulator answers row questions from labels, it
    cannot write plans. Raised instead of fabricating one."""


class PlannerModelError(AgentError):
    """The planner's model tier refused or failed a call (the request, not the reply's content):
    raised rather than fed back to the loop as if the model had written a bad plan."""


class PlanningFailedError(AgentError):
    """The draft -> validate -> repair loop ran out of iterations; ``issues`` are the last ones found."""

    def __init__(self, message: str, issues: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.issues = issues


class RetryLimitError(AgentError):
    """A unit was asked for more attempts than ``agent_max_retries`` + 1 allows."""


class BudgetExceededError(AgentError):
    """The agent steps spent the ``max_cost`` the caller allowed."""


class RecordingExhaustedError(AgentError):
    """A recorded-response model was asked for more answers than its file holds for a step."""


class RecordingFormatError(AgentError):
    """A file of recorded responses is malformed."""
