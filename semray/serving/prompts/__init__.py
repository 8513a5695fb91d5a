"""Prompt text of the serving layer, as versioned data (see ``formats.py``).

Operators own their instructions; serving only adds how to answer (format instructions) and
the one repair re-ask, and renders ``{column}`` templates over row cells safely.
"""

from __future__ import annotations

from semray.serving.prompts.formats import PROMPT_VERSION, format_instruction, repair_prompt
from semray.serving.prompts.render import RenderedPrompt, render_prompt

__all__ = ["PROMPT_VERSION", "RenderedPrompt", "format_instruction", "render_prompt", "repair_prompt"]
