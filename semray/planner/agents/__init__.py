"""Natural-language questions -> validated JSON plans: profiling, planning and manipulation
agents, grammar and semantic validators, smart memory, all steps through one ``StepRunner``.

No Ray here: execution is injected (``plan_question(..., executor=...)``) by ``semray.asking``.

>>> from semray.planner.agents import LoopConfig
>>> LoopConfig().judges
3
"""

from semray.planner.agents.catalog_view import (
    CatalogView,
    ColumnProfile,
    DatasetHit,
    DatasetProfile,
    MemoryRecord,
    MemoryView,
    SegmentHit,
)
from semray.planner.agents.errors import (
    AgentError,
    BudgetExceededError,
    PlannerModelError,
    PlanningFailedError,
    PlanningNeedsModelError,
    RecordingExhaustedError,
)
from semray.planner.agents.grammar import GrammarReport, check_plan_document, check_plan_text
from semray.planner.agents.issues import PlanIssue
from semray.planner.agents.loop import LoopConfig, PlanningResult, plan_question
from semray.planner.agents.models import AgentCall, AgentModel, TierModel, require_planning_tier
from semray.planner.agents.recorded import RecordedAnswer, RecordedModel, RecordingModel
from semray.planner.agents.source_view import ListMemory, SourceCatalog, profile_source
from semray.planner.agents.step import AgentStep, StepRunner, Trace

__all__ = [
    "AgentCall",
    "AgentError",
    "AgentModel",
    "AgentStep",
    "BudgetExceededError",
    "CatalogView",
    "ColumnProfile",
    "DatasetHit",
    "DatasetProfile",
    "GrammarReport",
    "ListMemory",
    "LoopConfig",
    "MemoryRecord",
    "MemoryView",
    "PlanIssue",
    "PlannerModelError",
    "PlanningFailedError",
    "PlanningNeedsModelError",
    "PlanningResult",
    "RecordedAnswer",
    "RecordedModel",
    "RecordingExhaustedError",
    "RecordingModel",
    "SegmentHit",
    "SourceCatalog",
    "StepRunner",
    "TierModel",
    "Trace",
    "check_plan_document",
    "check_plan_text",
    "plan_question",
    "profile_source",
    "require_planning_tier",
]
