"""Prompts of the catalog: a dataset's summary and a proposed schema for a file without a clear one.

Versioned (``CATALOG_PROMPT_VERSION``) like every prompt; the expected output schema sits next
to each template. Profiles are rendered as JSON text inside the prompt, never re-parsed.
"""

from __future__ import annotations

from typing import Any

CATALOG_PROMPT_VERSION = "catalog-prompts/1"

SUMMARY_SYSTEM = "You describe datasets for analysts who have not seen them. Be factual and brief."
SUMMARY_TEMPLATE = (
    "Dataset {name!r} ({kind}, {rows} rows). Its columns with statistics, and sample rows, as JSON:\n"
    "{profile}\n\n"
    "Write two or three sentences: what one row is, what the main columns hold, and what questions "
    "the dataset can answer. Do not invent values that the statistics and samples do not show."
)
SUMMARY_MAX_TOKENS = 200

SCHEMA_SYSTEM = "You infer table schemas from raw data. Answer with JSON only."
SCHEMA_TEMPLATE = (
    "These are the first lines of the file {name!r}, read as {kind}: {status}.\n{lines}\n\n"
    "The reader found these columns (name and DuckDB type), in order: {columns}.\n"
    "Propose a name (lower_snake_case) and a DuckDB type for each of these columns, in the same order."
)
SCHEMA_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "columns": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                "required": ["name", "type"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["columns"],
    "additionalProperties": False,
}
SCHEMA_MAX_TOKENS = 400
