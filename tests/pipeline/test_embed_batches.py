"""A journaled embed stage (a run-scoped SemSearch's rows, a blocked join's sides, a top-k's prefilter)
counts its calls and tokens in the run's usage and a resume reuses its vectors; an unjournaled one
commits nothing (``workers/embed_batches.py``); so does a text no row owns (a top-k's criterion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from semray.pipeline.lowering.driver import lower
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.set_ops import VECTOR, EmbedStage
from semray.pipeline.workers.embed_batches import EmbedBatchUDF, journaled_embedding
from semray.readers import from_arrow
from semray.serving.config import Prices
from semray.settings import Settings
from semray.transactions import BatchLedger
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal
from semray.transactions.records import BatchCommitted

PRICES = Prices(input_per_million=0.02)


class FakeTiers:
    """An embedding tier of 3-dimensional vectors from each text's length, recording what it embeds."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embedding_dollars(self, tokens: int) -> float:
        return PRICES.dollars(tokens, 0)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return np.array([[len(text), 1.0, 0.0] for text in texts], dtype=np.float32)


def _batch(ids: list[str]) -> pa.Table:
    return pa.table({"_rowid": ids, "text": [f"note number {value}" for value in ids]})


def _commits(run_dir: Path) -> list[BatchCommitted]:
    return [record for record in read_journal(run_dir / JOURNAL_NAME).records if isinstance(record, BatchCommitted)]


def test_journaled_embeddings_are_counted_and_reused_on_resume(tmp_path: Path) -> None:
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    tiers = FakeTiers()
    first = EmbedBatchUDF("{text}", tiers, "op-embed", BatchLedger(tmp_path, attempt=1))  # type: ignore[arg-type]
    out = first(_batch(["a", "b", "c"]))
    assert out.column(VECTOR).to_pylist()[0] == [len("note number a"), 1.0, 0.0]
    (commit,) = _commits(tmp_path)
    assert (commit.operator_key, sorted(commit.row_ids)) == ("op-embed", ["a", "b", "c"])
    assert commit.usage.calls == 3 and commit.usage.tokens_in >= 9  # one call per text, the texts' tokens
    assert commit.usage.dollars == pytest.approx(commit.usage.tokens_in * 0.02 / 1e6)

    resumed = EmbedBatchUDF("{text}", tiers, "op-embed", BatchLedger(tmp_path, attempt=2))  # type: ignore[arg-type]
    again = resumed(_batch(["c", "d", "a"]))  # re-batched: two rows known, one new
    assert tiers.texts == [f"note number {value}" for value in ("a", "b", "c", "d")]  # only d embedded again
    assert again.column(VECTOR).to_pylist() == [[len(f"note number {value}"), 1.0, 0.0] for value in "cda"]
    assert [len(commit.row_ids) for commit in _commits(tmp_path)] == [3, 1]


def test_an_unjournaled_embedding_commits_nothing(tmp_path: Path) -> None:
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    tiers = FakeTiers()
    udf = EmbedBatchUDF("{text}", tiers, None, BatchLedger(tmp_path, attempt=1))  # type: ignore[arg-type]
    assert udf(_batch(["a"])).num_rows == 1 and tiers.texts == ["note number a"]
    assert _commits(tmp_path) == []


def _embeds(stage: Stage) -> list[EmbedStage]:
    own = [stage] if isinstance(stage, EmbedStage) else []
    return [*own, *(found for child in stage.inputs for found in _embeds(child))]


def test_every_embedding_a_run_pays_is_journaled(tmp_path: Path) -> None:
    """A run-scoped search's rows, both sides of a blocked join and a top-k's prefilter."""
    settings = Settings(state_dir=tmp_path)
    notes = from_arrow(pa.table({"id": [1, 2], "text": ["apple pie", "boats"]}), "notes", settings)
    (search,) = _embeds(lower(notes.sem_search("text", "apple", k=1).plan, settings))
    assert search.journaled and "journaled" in search.describe()
    assert _embeds(lower(notes.sem_search("text", "apple", k=1, mode="fts").plan, settings)) == []
    others = from_arrow(pa.table({"id": [3], "text": ["ships"]}), "others", settings)
    blocked = _embeds(lower(notes.sem_join(others, "{l.text} is like {r.text}", "blocked").plan, settings))
    assert len(blocked) == 2 and all(stage.journaled for stage in blocked)
    assert len({stage.operator_key for stage in blocked}) == 2  # each side under its own key
    (both,) = _embeds(lower(notes.sem_join(notes, "{l.text} is like {r.text}", "blocked").plan, settings))
    assert both.journaled  # a self-join's sides are the same texts: embedded once
    (prefilter,) = _embeds(lower(notes.sem_topk("the sweetest {text}", k=1).plan, settings))
    assert prefilter.journaled


def test_a_criterion_embedding_is_counted_once_and_reused_on_resume(tmp_path: Path) -> None:
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    tiers = FakeTiers()
    first = journaled_embedding("the sweetest", "op-topk", "criterion", tiers, BatchLedger(tmp_path, attempt=1))  # type: ignore[arg-type]
    (commit,) = _commits(tmp_path)
    assert (commit.operator_key, commit.row_ids, commit.usage.calls) == ("op-topk", (), 1)
    assert commit.usage.dollars == pytest.approx(commit.usage.tokens_in * 0.02 / 1e6) and commit.usage.tokens_in >= 1
    again = journaled_embedding("the sweetest", "op-topk", "criterion", tiers, BatchLedger(tmp_path, attempt=2))  # type: ignore[arg-type]
    assert tiers.texts == ["the sweetest"] and again.tolist() == first.tolist()  # read back, not paid again
    assert len(_commits(tmp_path)) == 1
