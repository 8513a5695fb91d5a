"""Format instructions appended to prompts, and the repair re-ask. Versioned: the version is
part of every cache key, so editing a template here invalidates cached answers.

Wording avoids the words a label-driven simulator reads as task cues ("one of", "label",
"classify"), so adding a format instruction never changes which question is being asked.
"""

from __future__ import annotations

import json

from semray.serving.contract import OutputConstraint

PROMPT_VERSION = "serving-prompts/1"

CHOICE_INSTRUCTION = "Respond with a single option from this list, and nothing else: {options}."
CHOICE_LISTED_INSTRUCTION = "Respond with the option only, and nothing else."
JSON_INSTRUCTION = "Respond with a JSON object only, no prose, that validates against this JSON schema: {schema}"
REPAIR_TEMPLATE = (
    "{prompt}\n\nYour previous reply was:\n{reply}\n\nIt could not be used because {reason}. {instruction}"
)


def format_instruction(constraint: OutputConstraint, *, native_json: bool, prompt: str = "") -> str | None:
    """The sentence telling the model how to answer, or None when nothing needs saying.

    With ``native_json`` the schema travels as ``response_format`` instead of as text. Options
    the prompt already names are not listed again (a repeated list of labels can read as a
    different question).

    >>> format_instruction(OutputConstraint.choice("Yes", "No"), native_json=True)
    'Respond with a single option from this list, and nothing else: Yes, No.'
    """
    if constraint.kind == "choice":
        lowered = prompt.casefold()
        if prompt and all(choice.casefold() in lowered for choice in constraint.choices):
            return CHOICE_LISTED_INSTRUCTION
        return CHOICE_INSTRUCTION.format(options=", ".join(constraint.choices))
    if constraint.kind == "json_schema" and not native_json:
        return JSON_INSTRUCTION.format(schema=json.dumps(constraint.json_schema, sort_keys=True))
    return None


def repair_prompt(prompt: str, reply: str, reason: str, constraint: OutputConstraint) -> str:
    """The one re-ask after an unparseable reply: the original prompt, the reply and what was wrong."""
    instruction = format_instruction(constraint, native_json=False) or "Answer again."
    return REPAIR_TEMPLATE.format(prompt=prompt, reply=reply[:2000], reason=reason, instruction=instruction)
