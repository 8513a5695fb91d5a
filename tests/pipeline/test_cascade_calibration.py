"""A cascade's calibration on the driver (`pipeline/workers/cascade_calibration.py`), without Ray: the fake tiers of
`test_limit_cascade_rounds` answer by row id, a real run journal records what was paid.

What keeps a cascade's wall time down: the calibration sample goes to a tier in batches that are
in flight together (one round trip of the tier, not one per batch), and the small tier is asked
only about the drawn rows before the route is chosen (the other rows are asked while they are
routed, in the same pass as the large tier's calls).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_limit_cascade_rounds import FakeTiers, Tickets, cascade, journaled_calls

from semray.cost_model import cascade_routes as router
from semray.pipeline.stages.semantic import SemanticTask
from semray.pipeline.workers.cascade_calibration import answer_at_once, calibrate
from semray.pipeline.workers.cascade_tiers import EMBEDDING_SUFFIX, PROXY, PROXY_LABEL, ProxyUDF
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF
from semray.serving.contract import ModelRequest, ModelResponse
from semray.settings import Settings
from semray.transactions import Run, open_run, resume_run
from semray.transactions.journal import JOURNAL_NAME, read_journal
from semray.transactions.records import BatchCommitted


@dataclass
class OverlapTiers(FakeTiers):
    """`FakeTiers` that note how many batches are in flight at once. A batch waits (up to
    ``patience_s``) for a second one to arrive before it answers, so batches sent together are
    seen together whatever the scheduling; batches sent one after another never are."""

    patience_s: float = 5.0
    in_flight: dict[str, int] = field(default_factory=lambda: {"now": 0, "most": 0})
    """Shared with the copies the calibration makes per thread (so not plain int fields)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _together: threading.Event = field(default_factory=threading.Event)

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        with self._lock:
            self.in_flight["now"] += 1
            self.in_flight["most"] = max(self.in_flight["most"], self.in_flight["now"])
            if self.in_flight["now"] >= 2:
                self._together.set()
        try:
            self._together.wait(self.patience_s)
            with self._lock:
                return super().generate(tier, requests)
        finally:
            with self._lock:
                self.in_flight["now"] -= 1


@dataclass
class BothTiersTiers(FakeTiers):
    """`FakeTiers` whose batches wait (up to ``patience_s``) until the other tier has a batch in
    flight too: ``together`` turns True only when the small and the large tier are asked at once."""

    patience_s: float = 2.0
    started: dict[str, threading.Event] = field(
        default_factory=lambda: {"small": threading.Event(), "large": threading.Event()}
    )
    together: list[bool] = field(default_factory=list)

    def generate(self, tier: str, requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        self.started[tier].set()
        other = "large" if tier == "small" else "small"
        if self.started[other].wait(self.patience_s) and not self.together:
            self.together.append(True)
        return super().generate(tier, requests)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with open_run(Settings(state_dir=tmp_path), plan={"test": "cascade calibration"}, output=None) as opened:
        yield opened


def _udf(tiers: FakeTiers, opened: Run, tier: str, key: str) -> SemanticBatchUDF:
    task = SemanticTask(kind="filter", instruction="{text} is urgent", tier=tier)  # type: ignore[arg-type]
    return SemanticBatchUDF(task, key, tiers, opened.ledger)  # type: ignore[arg-type]


def test_a_calibration_sample_goes_to_the_tier_in_batches_at_once(run: Run) -> None:
    tickets = Tickets.generate(200)
    tiers = OverlapTiers(tickets)
    rows = next(tickets.batches(200))
    answers = answer_at_once(_udf(tiers, run, "large", "a" * 24), rows, 32)
    assert sorted(answers.column("_rowid").to_pylist()) == sorted(rows.column("_rowid").to_pylist())
    assert tiers.in_flight["most"] >= 2, "the sample's 7 batches were sent one after another"
    assert tiers.calls["large"] == 200 and journaled_calls(run) == 200  # each row asked and paid once


def test_the_tiers_are_asked_only_about_drawn_rows_and_at_once_before_the_route_is_chosen(run: Run) -> None:
    tickets = Tickets.generate(1_000)
    tiers = BothTiersTiers(tickets)
    stage = cascade()
    proxied = ProxyUDF(stage.task, tiers, tiers.embed(["is urgent"])[0], None)(next(tickets.batches(1_000)))  # type: ignore[arg-type]
    proxied = proxied.sort_by("_rowid")
    ids = [str(value) for value in proxied.column("_rowid").to_pylist()]
    proxy = proxied.column(PROXY).to_numpy()
    large, small = (
        _udf(tiers, run, "large", stage.operator_key),
        _udf(tiers, run, "small", stage.operator_key + ":small"),
    )

    def rows_of(row_ids: list[str]) -> pa.Table:
        return proxied.filter(pc.is_in(proxied.column("_rowid"), pa.array(row_ids, pa.string())))

    target = router.Target("filter", "accuracy", 0.9, 0.05, stage.labels)
    calibration = calibrate(
        stage, target, large, small, ids, proxy, proxied.column(PROXY_LABEL).to_numpy(), rows_of, 1, run.ledger
    )
    route = calibration.route
    assert math.isfinite(route.small_confidence), "the route is whole: the small tier's threshold is chosen"
    drawn = set(calibration.sample)
    assert tiers.asked["large"] == drawn
    assert tiers.asked["small"] == drawn, "the small tier answers the draws while the large tier labels them"
    assert len(drawn) < len(ids)
    assert tiers.together, "the two tiers were asked at once"
    assert run.ledger.committed(stage.operator_key + ":calibration", "route") is not None, "the route is journaled"


def test_a_resumed_calibration_pays_for_nothing_again(tmp_path: Path) -> None:
    """What the whole-input cascade's calibration task does before the large tier routes
    (`calibrate`), in a run and again in its resumed attempt: the second attempt asks no tier
    anything and reaches the same route, journaled once."""
    tickets = Tickets.generate(1_000)
    stage = cascade()
    settings = Settings(state_dir=tmp_path)

    def calibrate_in(opened: Run, tiers: FakeTiers) -> router.Route:
        proxied = ProxyUDF(stage.task, tiers, tiers.embed(["is urgent"])[0], None)(next(tickets.batches(1_000)))  # type: ignore[arg-type]
        proxied = proxied.sort_by("_rowid")
        ids = [str(value) for value in proxied.column("_rowid").to_pylist()]
        proxy = proxied.column(PROXY).to_numpy()
        large = _udf(tiers, opened, "large", stage.operator_key)
        small = _udf(tiers, opened, "small", stage.operator_key + ":small")

        def rows_of(row_ids: list[str]) -> pa.Table:
            return proxied.filter(pc.is_in(proxied.column("_rowid"), pa.array(row_ids, pa.string())))

        target = router.Target("filter", "accuracy", 0.9, 0.05, stage.labels)
        label = proxied.column(PROXY_LABEL).to_numpy()
        return calibrate(stage, target, large, small, ids, proxy, label, rows_of, 1, opened.ledger).route

    first_tiers = FakeTiers(tickets)
    with open_run(settings, plan={"test": "cascade resume"}, output=None) as first:
        route = calibrate_in(first, first_tiers)
        paid = journaled_calls(first)
        run_id = first.run_id
        first.finish("cancelled", "stopped before routing")
    assert first_tiers.calls["large"] > 0 and first_tiers.calls["small"] > 0
    assert paid == first_tiers.calls["large"] + first_tiers.calls["small"]

    again_tiers = FakeTiers(tickets)
    with resume_run(settings, run_id) as again:
        assert calibrate_in(again, again_tiers) == route
        assert journaled_calls(again) == paid
        journaled = again.ledger.committed(stage.operator_key + ":calibration", "route")
    assert (again_tiers.calls["large"], again_tiers.calls["small"]) == (0, 0)
    assert journaled is not None and journaled.attempt == 1, "the route is journaled by the first attempt only"


def test_the_proxies_are_counted_once_and_a_resume_embeds_no_row_again(tmp_path: Path) -> None:
    """Each row's embedding is a call in the run's journal (``<key>:embedding``: one call per text,
    its tokens), and a resumed attempt reads the proxies back instead of embedding the rows again,
    whatever batches it cuts."""
    tickets = Tickets.generate(100)
    stage = cascade()
    settings = Settings(state_dir=tmp_path)
    key = stage.operator_key + EMBEDDING_SUFFIX
    rows = next(tickets.batches(100))

    def proxies(opened: Run, tiers: FakeTiers, batches: list[pa.Table]) -> pa.Table:
        udf = ProxyUDF(stage.task, tiers, tiers.embed(["is urgent"])[0], None, operator_key=key, ledger=opened.ledger)  # type: ignore[arg-type]
        return pa.concat_tables([udf(batch) for batch in batches]).sort_by("_rowid")

    first_tiers = FakeTiers(tickets)
    with open_run(settings, plan={"test": "proxy usage"}, output=None) as first:
        proxied = proxies(first, first_tiers, [rows.slice(0, 60)])
        assert journaled_calls(first) == first_tiers.embedded_rows == 60
        records = read_journal(first.path / JOURNAL_NAME).records
        commits = [c for c in records if isinstance(c, BatchCommitted) and c.operator_key == key]
        assert sum(c.usage.tokens_in for c in commits) >= 60  # the texts' tokens
        run_id = first.run_id
        first.finish("cancelled", "stopped mid-pass")

    again_tiers = FakeTiers(tickets)
    with resume_run(settings, run_id) as again:
        resumed = proxies(again, again_tiers, [rows.slice(0, 30), rows.slice(30, 70)])
        assert again_tiers.embedded_rows == 40, "only the 40 rows never embedded"
        assert journaled_calls(again) == 100
    assert resumed.slice(0, 60).column(PROXY).to_pylist() == proxied.column(PROXY).to_pylist()
