"""Prompt templates of the planning agents (versioned data, output schemas beside them)."""

from semray.planner.agents.prompts.agents import AGENT_PROMPT_VERSION, PROMPTS, AgentPrompt

__all__ = ["AGENT_PROMPT_VERSION", "PROMPTS", "AgentPrompt"]
