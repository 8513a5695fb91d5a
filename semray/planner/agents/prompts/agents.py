"""Prompts of the planning agents, as versioned data with their output schemas beside them.

Templates use ``str.format`` fields filled by the agents; replies are parsed strictly against
``output_schema`` (JSON) or a choice list, never evaluated. ``AGENT_PROMPT_VERSION`` is recorded
with every step, so a recorded answer is never replayed under a changed prompt unnoticed.

>>> PROMPTS["judge"].output_schema["required"]
['verdict', 'mismatch', 'correction']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AGENT_PROMPT_VERSION = "agent-prompts/2"
"""2: the reflection prompt was added (the others are those of version 1)."""


@dataclass(frozen=True, slots=True)
class AgentPrompt:
    """System text, a user template and the schema the reply must satisfy (None: the plan schema)."""

    system: str
    user: str
    max_tokens: int
    output_schema: dict[str, Any] | None = None
    choices: tuple[str, ...] = field(default=())

    def render(self, **values: str) -> str:
        return self.user.format(**values)


_CHOOSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"datasets": {"type": "array", "items": {"type": "string"}}, "reason": {"type": "string"}},
    "required": ["datasets", "reason"],
    "additionalProperties": False,
}

_INSPECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "relevant": {"type": "boolean"},
        "columns": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "string"},
    },
    "required": ["relevant", "columns", "notes"],
    "additionalProperties": False,
}

_OUTLINE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "operator": {"type": "string"},
                    "dataset": {"type": ["string", "null"]},
                    "purpose": {"type": "string"},
                },
                "required": ["operator", "purpose"],
            },
            "minItems": 1,
        }
    },
    "required": ["steps"],
}

_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["accept", "reject"]},
        "mismatch": {"type": "string"},
        "correction": {"type": "string"},
    },
    "required": ["verdict", "mismatch", "correction"],
    "additionalProperties": False,
}

_REFLECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["plausible", "implausible"]},
        "reason": {"type": "string"},
        "cause": {"enum": ["none", "data", "logic"]},
        "correction": {"type": "string"},
    },
    "required": ["verdict", "reason", "cause", "correction"],
    "additionalProperties": False,
}

PROMPTS: dict[str, AgentPrompt] = {
    "choose_datasets": AgentPrompt(
        system="You are the profiling agent of a query planner. You pick the datasets a question needs.",
        user=(
            "Question: {question}\n\nCandidate datasets, best search matches first:\n{candidates}\n\n"
            "Domain notes found in documents:\n{segments}\n\nWhat earlier tasks taught:\n{knowledge}\n\n"
            "Problems the last plan had with the data:\n{feedback}\n\n"
            "Name the datasets needed to answer the question (fewest that suffice) and why."
        ),
        max_tokens=300,
        output_schema=_CHOOSE_SCHEMA,
    ),
    "inspect_dataset": AgentPrompt(
        system=(
            "You are a profiling sub-agent of a query planner. You read one dataset and say whether a question "
            "needs it, which of its columns, and what the planner should know about them."
        ),
        user=(
            "Question: {question}\n\nThe dataset (the only one you see):\n{dataset}\n\n"
            "Domain notes about it:\n{segments}\n\nWhat earlier tasks taught:\n{knowledge}\n\n"
            "Problems with the last plan or your last reply:\n{feedback}\n\n"
            "Does the question need this dataset? Name the columns it needs (exactly as in the schema) and note "
            "what the plan must know: value domains, keys that join it to other data, units."
        ),
        max_tokens=400,
        output_schema=_INSPECT_SCHEMA,
    ),
    "outline": AgentPrompt(
        system=(
            "You are the planning agent of a query planner. You break a question into steps, each one "
            "operator of the plan language below, from the sources to the answer."
        ),
        user=(
            "Question: {question}\n\nDatasets:\n{datasets}\n\nOperators:\n{operators}\n\n"
            "What earlier tasks taught:\n{knowledge}\n\nFeedback on the previous attempt:\n{feedback}\n\n"
            "List the steps, leaves first: operator, dataset it reads (scans only) and purpose."
        ),
        max_tokens=800,
        output_schema=_OUTLINE_SCHEMA,
    ),
    "fill": AgentPrompt(
        system=(
            "You are the manipulation agent of a query planner. You write the complete JSON plan document "
            '{"version": 1, "plan": {...}}: every operator with every attribute filled (SQL predicates '
            "and expressions, keys, aggregate functions, extraction fields and types, instructions that "
            "reference columns as {column}). Scans copy source and source_schema exactly from the dataset."
        ),
        user=(
            "Question: {question}\n\nSteps to implement:\n{outline}\n\nDatasets (the only ones to use):\n"
            "{datasets}\n\nOperators (the only ones to use):\n{operators}\n\nHints:\n{hints}\n\n"
            "Previous draft:\n{previous}\n\nProblems found in it (fix every one):\n{feedback}\n\n"
            "Reply with the JSON plan document only."
        ),
        max_tokens=2000,
    ),
    "judge": AgentPrompt(
        system=(
            "You are a semantic validator of query plans. You check that a plan answers the question "
            "completely and correctly: right data, filters, groupings, aggregates and output."
        ),
        user=(
            "Judge {judge} of {judges}.\n\nQuestion: {question}\n\nGuidelines:\n{guidelines}\n\n"
            "Plan (operators, root first):\n{tree}\n\nPlan JSON:\n<plan>\n{plan}\n</plan>\n\n"
            "Accept the plan, or reject it naming the mismatch with the question and the correction."
        ),
        max_tokens=300,
        output_schema=_JUDGE_SCHEMA,
    ),
    "reflect": AgentPrompt(
        system=(
            "You check the answer of a query plan after it ran, before it is reported: does it plausibly answer "
            "the question? You see the question, the plan and what the answer holds."
        ),
        user=(
            "Question: {question}\n\nPlan (operators, root first):\n{tree}\n\nThe answer:\n{answer}\n\n"
            "Does this answer plausibly answer the question? Implausible, for example: no rows for a question that "
            "expects some, a column the question asks for that is all nulls, many rows that failed, values or "
            "columns about other data than the question is about. Say why; the cause: 'data' (the plan read the "
            "wrong data or columns), 'logic' (its filters, joins, groupings or output are wrong) or 'none' when "
            "plausible; and what the plan should do instead."
        ),
        max_tokens=300,
        output_schema=_REFLECT_SCHEMA,
    ),
    "classify_error": AgentPrompt(
        system="You sort errors of query plans into data, semantic or grammar errors.",
        user=(
            "A plan for the question {question!r} failed with:\n{error}\n\n"
            "data: the plan assumed data that is not there (table, column, type, values). semantic: the plan's "
            "logic does not answer the question. grammar: the plan is malformed (JSON, fields, syntax). Which?"
        ),
        max_tokens=4,
        choices=("data", "semantic", "grammar"),
    ),
}
