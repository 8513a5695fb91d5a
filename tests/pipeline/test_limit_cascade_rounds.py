"""A cascade under a LIMIT in round trips on the driver (``CascadeRounds`` in ``limited_rows``),
without Ray: fake tiers answer by row id, a real run journal records what was paid.

The first round is the calibration population; later rounds are routed row by row with the
thresholds found there, and every call made is in the run's journal when the LIMIT stops.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from semray.pipeline.stages.semantic import CascadeStage, SemanticTask
from semray.pipeline.workers.cascade_rounds import CascadeRounds
from semray.pipeline.workers.limit_rounds import limited_rows
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.serving.contract import ModelRequest, ModelResponse, Usage
from semray.settings import Settings
from semray.transactions import Run, open_run
from semray.transactions.registry import load_state

ROWS = 2_000


@dataclass
class Tickets:
    """Rows ``r00000``... whose text says ``urgent`` or ``calm`` (a tenth ``mixed``: only a model tells)."""

    truth: dict[str, bool]
    texts: dict[str, str]

    @classmethod
    def generate(cls, rows: int = ROWS, seed: int = 7) -> Tickets:
        rng = random.Random(seed)
        truth, texts = {}, {}
        for index in range(rows):
            row_id, urgent = f"r{index:05d}", rng.random() < 0.6
            kind = "mixed" if rng.random() < 0.1 else ("urgent" if urgent else "calm")
            truth[row_id], texts[row_id] = urgent, f"{kind} ticket {index}"
        return cls(truth, texts)

    def batches(self, size: int = 100) -> Iterator[pa.Table]:
        ids = list(self.texts)
        for start in range(0, len(ids), size):
            part = ids[start : start + size]
            yield pa.table({"_rowid": part, "text": [self.texts[row_id] for row_id in part]})


@dataclass
class FakeTiers:
    """Stands in for ``TierHandles``. The embedding puts ``urgent`` texts near the instruction and
    ``mixed`` ones halfway (``informative=False``: every text at random). The large tier answers the
    truth; the small tier answers it sure (0.95) except for a fifth of the mixed rows, where it
    is wrong and unsure (0.55) (``informative=False``: right or wrong at random, always at 0.55)."""

    tickets: Tickets
    informative: bool = True
    calls: Counter[str] = field(default_factory=Counter)
    asked: dict[str, set[str]] = field(default_factory=lambda: {"small": set(), "large": set()})
    embedded: list[str] = field(default_factory=list)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return np.array([self._vector(text) for text in texts])

    def embedding_dollars(self, tokens: int) -> float:
        return 0.0

    @property
    def embedded_rows(self) -> int:
        """Rows' texts embedded (a call each in the journal), not the instruction's or labels'."""
        return sum("ticket" in text for text in self.embedded)

    def _vector(self, text: str) -> list[float]:
        rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
        noise = [rng.gauss(0, 0.05), rng.gauss(0, 0.05)]
        if not self.informative:
            return [rng.random(), rng.random()]
        base = [1.0, 0.0] if "urgent" in text else [0.7, 0.7] if "mixed" in text else [0.0, 1.0]
        return [base[0] + noise[0], base[1] + noise[1]]

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        self.calls[tier] += len(requests)
        self.asked[tier].update(request.request_id for request in requests)
        return [self._answer(tier, request.request_id) for request in requests]

    def _answer(self, tier: str, row_id: str) -> ModelResponse:
        truth = self.tickets.truth[row_id]
        value, confidence = truth, 0.95
        rng = random.Random(row_id)
        if tier == "small" and not self.informative:
            value, confidence = rng.random() < 0.5, 0.55
        elif tier == "small" and "mixed" in self.tickets.texts[row_id] and rng.random() < 0.2:
            value, confidence = not truth, 0.55
        usage = Usage(input_tokens=8, output_tokens=1)
        text = "Yes" if value else "No"
        return ModelResponse(text=text, value=value, confidence=confidence, usage=usage, request_id=row_id, tier=tier)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with open_run(Settings(state_dir=tmp_path), plan={"test": "limit cascade"}, output=None) as opened:
        yield opened


def cascade(labels: int = 200) -> CascadeStage:
    task = SemanticTask(kind="filter", instruction="{text} is urgent", tier="cascade")  # type: ignore[arg-type]
    return CascadeStage(task=task, operator_key="c0ffee00" * 3, batch_rows=32, actors=1, labels=labels)


@dataclass
class Counted:
    """A step that counts the rows it was given (what the rounds drew)."""

    step: Callable[[pa.Table], pa.Table]
    rows: list[int] = field(default_factory=list)

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.rows.append(batch.num_rows)
        return self.step(batch)


def journaled_calls(run: Run) -> int:
    return load_state(run.path).usage.calls


def test_a_cascade_calibrates_on_the_first_round_and_routes_the_later_ones(run: Run) -> None:
    tickets = Tickets.generate()
    tiers = FakeTiers(tickets)
    step = CascadeRounds(cascade(), tiers, run.ledger)  # type: ignore[arg-type]
    counted = Counted(step)
    out = limited_rows(tickets.batches(), [counted], wanted=400, first_rows=400, growth=2, max_rows=400)
    kept = [str(row_id) for table in out for row_id in table.column("_rowid").to_pylist()]
    drawn = sum(counted.rows)
    assert len(counted.rows) >= 2 and counted.rows[0] == 400  # a calibration round, then routed ones
    assert len(kept) >= 400 and drawn < 900  # ~400 / 0.6 rows, not the 2,000 of the input
    assert sum(tickets.truth[row_id] for row_id in kept) >= 0.9 * len(kept)  # the accuracy target
    assert len(tiers.embedded) == drawn + 1  # proxies of the drawn rows (and the instruction) only
    assert step.calibrations == 1 and step.route is not None
    # The large tier labelled at most 200 calibration rows and what the cheaper tiers left; the
    # small tier only rows the embedding tier could not decide (the mixed tenth, about).
    assert tiers.calls["large"] <= 200 + 0.1 * drawn
    assert tiers.calls["small"] <= 0.25 * drawn
    later = {row_id for row_id in list(tickets.texts)[400:drawn]}
    assert len(later & tiers.asked["large"]) <= 0.1 * len(later)  # routed, not asked of the large tier
    # Nothing is in flight when the LIMIT is reached: every call made is journaled with the run.
    assert journaled_calls(run) == tiers.calls["small"] + tiers.calls["large"] + tiers.embedded_rows


def test_a_route_that_decides_nothing_below_the_large_tier_recalibrates_once_the_rows_doubled(run: Run) -> None:
    tickets = Tickets.generate()
    tiers = FakeTiers(tickets, informative=False)
    step = CascadeRounds(cascade(labels=40), tiers, run.ledger)  # type: ignore[arg-type]
    counted = Counted(step)
    limited_rows(tickets.batches(), [counted], wanted=200, first_rows=100, growth=2, max_rows=100)
    assert step.route is not None and step.route.small_confidence == float("inf")
    assert step.route.embed_low == -float("inf") and step.route.embed_high == float("inf")
    # 100 rows calibrated, then 200 seen (twice as many) calibrated again with twice the draws.
    assert step.calibrations >= 2 and counted.rows[0] == 100
    # Between calibrations the small tier, which decides nothing, is not asked.
    assert tiers.calls["small"] <= step.calibrated_rows
    assert journaled_calls(run) == tiers.calls["small"] + tiers.calls["large"] + tiers.embedded_rows


def test_a_row_wise_filter_in_rounds_journals_every_call_it_made(run: Run) -> None:
    tickets = Tickets.generate()
    tiers = FakeTiers(tickets)
    task = SemanticTask(kind="filter", instruction="{text} is urgent", tier="large")  # type: ignore[arg-type]
    udf = SemanticBatchUDF(task, "f" * 24, tiers, run.ledger)  # type: ignore[arg-type]
    out = limited_rows(tickets.batches(), [udf], wanted=5, first_rows=10)
    assert sum(table.num_rows for table in out) >= 5
    assert tiers.calls["large"] <= 3 * 5 / 0.6 + 32
    assert journaled_calls(run) == tiers.calls["large"]


@dataclass
class LabelTiers(FakeTiers):
    """`FakeTiers` for a classification into ``urgent`` / ``calm`` (label names embedded like texts)."""

    def _answer(self, tier: str, row_id: str) -> ModelResponse:
        answer = super()._answer(tier, row_id)
        label = "urgent" if answer.value else "calm"
        return answer.model_copy(update={"value": label, "text": label})


def test_a_cascaded_classification_under_a_limit_labels_the_rows_it_routes(run: Run) -> None:
    tickets = Tickets.generate()
    tiers = LabelTiers(tickets)
    task = SemanticTask(
        kind="classify",  # type: ignore[arg-type]
        instruction="how pressing is {text}",
        tier="cascade",
        outputs=(("label", "text"),),
        choices=("urgent", "calm"),
    )
    stage = CascadeStage(task=task, operator_key="c1a55000" * 3, batch_rows=32, actors=1, labels=200)
    step = CascadeRounds(stage, tiers, run.ledger)  # type: ignore[arg-type]
    out = limited_rows(tickets.batches(), [step], wanted=500, first_rows=250, growth=2, max_rows=250)
    rows = [row for table in out for row in table.to_pylist()]
    assert len(rows) == 500  # a classification keeps every row: two rounds of 250
    right = sum(row["label"] == ("urgent" if tickets.truth[row["_rowid"]] else "calm") for row in rows)
    assert right >= 0.9 * len(rows)
    assert step.calibrations == 1 and tiers.calls["large"] <= 200 + 0.1 * len(rows)
    assert journaled_calls(run) == tiers.calls["small"] + tiers.calls["large"] + tiers.embedded_rows
