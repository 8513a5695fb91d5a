"""Recorded model answers: replay a file of answers keyed by agent step, or record one.

A recording is JSON: ``{"version": 1, "model": "...", "answers": {"manipulation/fill": [...]}}``,
each answer ``{"text": "...", "input_tokens": 812, "output_tokens": 240}`` (``"json"`` may hold an
object instead of ``"text"``; tokens default to a length estimate, four characters a token).
The n-th call of a step gets the n-th answer of its key (sub-agents calling at once from threads get
one answer each, in the order their calls arrive). Replay is for demos and tests
(``semray ask --replay FILE``): the answers are what a real model said, not fabricated plans.

>>> from semray.serving.contract import ModelRequest
>>> model = RecordedModel({"planning/outline": [RecordedAnswer('{"steps": []}')]})
>>> model.answer(AgentCall("planning", "outline", ModelRequest(prompt="q"))).text
'{"steps": []}'
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semray.cost_model.prices import TierProfile
from semray.planner.agents.errors import RecordingExhaustedError, RecordingFormatError
from semray.planner.agents.models import AgentCall, AgentModel
from semray.serving.contract import ModelResponse, Usage

RECORDING_VERSION = 1
DEFAULT_PROFILE = TierProfile("recorded", 0.0, 0.0, 0.0, float("inf"), 1)
"""Recorded answers cost nothing again unless the caller prices them with a tier's profile."""


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    """One recorded reply and the tokens it cost when it was recorded."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None


def estimate_tokens(text: str) -> int:
    """About four characters a token (recordings without usage). ``estimate_tokens("abcdefgh") == 2``."""
    return max(1, len(text) // 4)


class RecordedModel:
    """Replays answers in order per ``agent/step``; running out raises RecordingExhaustedError."""

    def __init__(
        self,
        answers: Mapping[str, Sequence[RecordedAnswer]],
        profile: TierProfile = DEFAULT_PROFILE,
        name: str = "recorded",
        structured: bool = False,
    ) -> None:
        self._answers = {key: tuple(items) for key, items in answers.items()}
        self._used: dict[str, int] = {}
        self._profile = profile
        self._name = name
        self._structured = structured
        self._lock = threading.Lock()  # sub-agents call from threads: each answer is handed out once

    @classmethod
    def from_file(cls, path: Path, profile: TierProfile = DEFAULT_PROFILE) -> RecordedModel:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RecordingFormatError(f"cannot read recorded answers {str(path)!r}: {error}") from None
        if not isinstance(document, dict) or document.get("version") != RECORDING_VERSION:
            raise RecordingFormatError(
                f"{str(path)!r} is not a version-{RECORDING_VERSION} recording "
                '({"version": 1, "answers": {"agent/step": [...]}})'
            )
        answers = {
            str(key): [_answer(item, f"{path}: {key}") for item in items]
            for key, items in dict(document.get("answers", {})).items()
        }
        return cls(answers, profile, str(document.get("model", "recorded")))

    @property
    def profile(self) -> TierProfile:
        return self._profile

    @property
    def name(self) -> str:
        return self._name

    @property
    def structured_output(self) -> bool:
        return self._structured

    def remaining(self) -> dict[str, int]:
        """Answers not replayed yet, per key (a test checks every recorded answer was used)."""
        return {key: len(items) - self._used.get(key, 0) for key, items in self._answers.items()}

    def answer(self, call: AgentCall) -> ModelResponse:
        key = f"{call.agent}/{call.step}"
        items = self._answers.get(key, ())
        with self._lock:
            position = self._used.get(key, 0)
            if position >= len(items):
                raise RecordingExhaustedError(
                    f"the recording has {len(items)} answer(s) for {key}, and call {position + 1} asked for another; "
                    "record the session again (the prompts or the loop changed)"
                )
            self._used[key] = position + 1
        item = items[position]
        usage = Usage(
            input_tokens=item.input_tokens if item.input_tokens is not None else estimate_tokens(call.request.prompt),
            output_tokens=item.output_tokens if item.output_tokens is not None else estimate_tokens(item.text),
        )
        return ModelResponse(
            text=item.text,
            value=None,
            confidence=None,
            usage=usage,
            tier="recorded",
            model=self._name,
            request_id=call.request.request_id,
        )


class RecordingModel:
    """Wraps a real model and keeps every answer, to be saved as a recording for replay."""

    def __init__(self, inner: AgentModel) -> None:
        self._inner = inner
        self._answers: dict[str, list[dict[str, Any]]] = {}

    @property
    def profile(self) -> TierProfile:
        return self._inner.profile

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def structured_output(self) -> bool:
        return self._inner.structured_output

    def answer(self, call: AgentCall) -> ModelResponse:
        response = self._inner.answer(call)
        self._answers.setdefault(f"{call.agent}/{call.step}", []).append(
            {
                "text": response.text,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
            }
        )
        return response

    def save(self, path: Path) -> None:
        document = {"version": RECORDING_VERSION, "model": self.name, "answers": self._answers}
        path.write_text(json.dumps(document, indent=1), encoding="utf-8")


def _answer(item: Any, where: str) -> RecordedAnswer:
    if not isinstance(item, dict) or not ("text" in item or "json" in item):
        raise RecordingFormatError(f'{where}: each answer is an object with "text" (or "json")')
    text = item["text"] if "text" in item else json.dumps(item["json"])
    return RecordedAnswer(str(text), item.get("input_tokens"), item.get("output_tokens"))
