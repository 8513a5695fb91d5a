"""Counters of what the simulator served: calls and tokens per model, and prompts it could not place.

``calls`` counts every request; a model's ``calls`` only those it answered (and charged).
A prompt without a label (``no_label``: no row matched, no task, a null label) is answered
with an error and charged nothing, unless the config's ``unlabelled`` is ``answer``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

MAX_SAMPLES = 20
SAMPLE_CHARS = 200


class ModelUsage(BaseModel):
    model_config = ConfigDict(frozen=True)

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rejected: int = 0
    no_label: int = 0
    cost_usd: float = 0.0


class SimulatorStats(BaseModel):
    """A snapshot, e.g. ``simulator.stats().no_match_rate``; served as ``GET /stats``."""

    model_config = ConfigDict(frozen=True)

    simulated: bool = True
    calls: int
    no_match: int
    no_match_rate: float
    no_task: int
    no_label: int = 0
    """Requests refused for want of a label (HTTP 422, per-row code ``no_label``), not charged."""
    models: dict[str, ModelUsage]
    tasks: dict[str, int]
    no_match_samples: list[str]


@dataclass
class StatsRecorder:
    """Thread-safe counters behind ``Simulator.stats()``."""

    models: dict[str, ModelUsage] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    no_match: int = 0
    no_task: int = 0
    no_label: int = 0
    samples: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        task: str | None,
        matched: bool,
        prompt: str,
    ) -> None:
        with self._lock:
            usage = self.models.get(model, ModelUsage())
            self.models[model] = usage.model_copy(
                update={
                    "calls": usage.calls + 1,
                    "prompt_tokens": usage.prompt_tokens + prompt_tokens,
                    "completion_tokens": usage.completion_tokens + completion_tokens,
                    "cost_usd": usage.cost_usd + cost_usd,
                }
            )
            self.calls += 1
            self._count_place(task, matched, prompt)

    def record_no_label(self, model: str, task: str | None, matched: bool, prompt: str) -> None:
        """A request answered with ``NoLabelError``: counted, never charged."""
        with self._lock:
            usage = self.models.get(model, ModelUsage())
            self.models[model] = usage.model_copy(update={"no_label": usage.no_label + 1})
            self.calls += 1
            self.no_label += 1
            self._count_place(task, matched, prompt)

    def _count_place(self, task: str | None, matched: bool, prompt: str) -> None:
        if task is None:
            self.no_task += 1
        else:
            self.tasks[task] = self.tasks.get(task, 0) + 1
        if not matched:
            self.no_match += 1
            if len(self.samples) < MAX_SAMPLES:
                self.samples.append(" ".join(prompt.split())[:SAMPLE_CHARS])

    def record_rejection(self, model: str) -> None:
        with self._lock:
            usage = self.models.get(model, ModelUsage())
            self.models[model] = usage.model_copy(update={"rejected": usage.rejected + 1})

    def snapshot(self) -> SimulatorStats:
        with self._lock:
            return SimulatorStats(
                calls=self.calls,
                no_match=self.no_match,
                no_match_rate=self.no_match / self.calls if self.calls else 0.0,
                no_task=self.no_task,
                no_label=self.no_label,
                models=dict(self.models),
                tasks=dict(self.tasks),
                no_match_samples=list(self.samples),
            )
