"""Committed batch outputs: durable, found again, never paid for twice."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from semray.transactions.batches import INLINE_BYTES, BatchLedger
from semray.transactions.errors import TransactionError
from semray.transactions.journal import JOURNAL_NAME, JournalWriter, read_journal
from semray.transactions.keys import batch_key
from semray.transactions.records import BatchCommitted, LLMUsage


def scores(*row_ids: str, base: int = 0) -> pa.Table:
    return pa.table({"_rowid": list(row_ids), "score": [base + index for index in range(len(row_ids))]})


@pytest.fixture(params=[INLINE_BYTES, 0], ids=["inline", "file"])
def ledger(tmp_path: Path, request: pytest.FixtureRequest) -> BatchLedger:
    """A ledger whose small tables travel in their records (inline), and one that files every table."""
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    return BatchLedger(tmp_path, attempt=1, inline_bytes=request.param)


def test_commit_then_lookup(ledger: BatchLedger) -> None:
    key = batch_key("op", ["r1", "r2"])
    assert ledger.lookup("op", key) is None
    table = scores("r1", "r2")
    record = ledger.commit("op", key, ["r1", "r2"], table, LLMUsage(calls=2))
    if ledger.inline_bytes:
        assert record.rows_out == 2 and record.file == "" and record.inline is not None
        assert not (ledger.run_dir / "batches").exists()
    else:
        assert record.rows_out == 2 and record.inline is None and (ledger.run_dir / record.file).is_file()
    found = ledger.lookup("op", key)
    assert found is not None and found.equals(table)
    assert ledger.lookup("other-op", key) is None


def test_a_fresh_ledger_finds_batches_from_the_journal(ledger: BatchLedger) -> None:
    key = batch_key("op", ["r1"])
    ledger.commit("op", key, ["r1"], scores("r1"))
    again = BatchLedger(ledger.run_dir, attempt=2)
    found = again.lookup("op", key)
    assert found is not None and found.equals(scores("r1"))


def test_a_table_without_its_journal_record_is_not_committed(ledger: BatchLedger) -> None:
    # A kill between the table's rename and the journal append leaves an orphan file.
    key = batch_key("op", ["r1"])
    orphan = ledger.run_dir / "batches" / "op" / f"{key}.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"not even parquet")
    assert ledger.lookup("op", key) is None
    ledger.commit("op", key, ["r1"], scores("r1"))
    found = ledger.lookup("op", key)
    assert found is not None and found.equals(scores("r1"))


def test_a_batch_committed_twice_keeps_its_first_output(ledger: BatchLedger) -> None:
    # A retried actor may commit a batch again, with a different (nondeterministic) answer.
    key = batch_key("op", ["r1"])
    first = ledger.commit("op", key, ["r1"], scores("r1", base=1))
    second = BatchLedger(ledger.run_dir, attempt=1, inline_bytes=ledger.inline_bytes).commit(
        "op", key, ["r1"], scores("r1", base=2)
    )
    assert first.file != second.file or first.inline != second.inline
    for reader in (ledger, BatchLedger(ledger.run_dir, attempt=2)):
        found = reader.lookup("op", key)
        assert found is not None and found.equals(scores("r1", base=1))
        assert reader.lookup_rows("op", ["r1"]).table == scores("r1", base=1)


def test_empty_batches_commit_with_their_schema(ledger: BatchLedger) -> None:
    key = batch_key("filter", ["r1", "r2"])
    ledger.commit("filter", key, ["r1", "r2"], scores("r1").slice(0, 0))
    found = ledger.lookup("filter", key)
    assert found is not None and found.num_rows == 0 and found.schema.names == ["_rowid", "score"]


def test_lookup_rows_serves_rebatched_rows(ledger: BatchLedger) -> None:
    ledger.commit("op", batch_key("op", ["r1", "r2"]), ["r1", "r2"], scores("r1", "r2", base=10))
    # r3 was committed by a filter that kept nothing for it.
    ledger.commit("op", batch_key("op", ["r3", "r4"]), ["r3", "r4"], scores("r4", base=40))
    ledger.lookup_rows("op", ["r0"])  # builds the row index, which later commits must update
    ledger.commit("op", batch_key("op", ["r5"]), ["r5"], scores("r5", base=50))
    found = ledger.lookup_rows("op", ["r2", "r3", "r4", "r5", "r6"])
    assert found.missing == ("r6",)
    assert found.table is not None
    assert sorted(found.table.column("_rowid").to_pylist()) == ["r2", "r4", "r5"]
    assert ledger.lookup_rows("op", ["r9"]).table is None


def test_lookup_rows_needs_row_ids_in_the_table(ledger: BatchLedger) -> None:
    ledger.commit("agg", batch_key("agg", ["r1"]), ["r1"], pa.table({"n": [1]}))
    with pytest.raises(TransactionError, match="_rowid"):
        ledger.lookup_rows("agg", ["r1"])


def _commit_in_child(ledger: BatchLedger, index: int) -> None:
    row = f"c{index}"
    ledger.commit("op", batch_key("op", [row]), [row], scores(row), LLMUsage(calls=1))


def test_ledgers_in_other_processes_append_to_one_journal(ledger: BatchLedger) -> None:
    # Ray actors hold a pickled ledger each and commit concurrently.
    clone = pickle.loads(pickle.dumps(ledger))
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_commit_in_child, args=(clone, index)) for index in range(3)]
    for worker in workers:
        worker.start()
    for index in range(3, 6):
        _commit_in_child(ledger, index)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    read = read_journal(ledger.run_dir / JOURNAL_NAME)
    assert read.skipped == ()
    rows = sorted(record.row_ids[0] for record in read.records if isinstance(record, BatchCommitted))
    assert rows == [f"c{index}" for index in range(6)]
    for index in range(6):
        assert ledger.lookup("op", batch_key("op", [f"c{index}"])) is not None


def test_a_table_over_the_inline_limit_goes_to_a_file(tmp_path: Path) -> None:
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    ledger = BatchLedger(tmp_path, attempt=1, inline_bytes=2048)
    small, large = scores("r1"), scores(*(f"s{index}" for index in range(400)))
    kept = ledger.commit("op", batch_key("op", ["r1"]), ["r1"], small)
    filed = ledger.commit("op", batch_key("op", ["big"]), large.column("_rowid").to_pylist(), large)
    assert kept.inline is not None and filed.inline is None and (tmp_path / filed.file).is_file()
    again = pickle.loads(pickle.dumps(ledger))  # what an actor gets: the same limit
    assert again.inline_bytes == 2048
    assert again.lookup_rows("op", ["r1", "s399"]).table.sort_by("_rowid") == pa.concat_tables(
        [small, large.slice(399)]
    ).sort_by("_rowid")


@pytest.mark.parametrize(("inline_bytes", "fsyncs"), [(INLINE_BYTES, 1), (0, 3)])
def test_an_inline_commit_is_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_bytes: int, fsyncs: int
) -> None:
    # The journal line is the whole commit; a filed table adds its own fsync and its folder's.
    JournalWriter.create(tmp_path / JOURNAL_NAME).close()
    ledger = BatchLedger(tmp_path, attempt=1, inline_bytes=inline_bytes)
    ledger.commit("op", batch_key("op", ["r0"]), ["r0"], scores("r0"))  # creates batches/op when filing
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    ledger.commit("op", batch_key("op", ["r1"]), ["r1"], scores("r1"))
    assert len(calls) == fsyncs


def test_a_row_committed_in_two_batches_is_looked_up_in_the_first(ledger: BatchLedger) -> None:
    # e.g. a retried task cut differently: the index a fresh ledger builds agrees with a live one's.
    ledger.commit("op", batch_key("op", ["r1"]), ["r1"], scores("r1", base=1))
    ledger.commit("op", batch_key("op", ["r1", "r2"]), ["r1", "r2"], scores("r1", "r2", base=5))
    for reader in (ledger, BatchLedger(ledger.run_dir, attempt=2)):
        assert reader.lookup_rows("op", ["r1", "r2"]).table.sort_by("_rowid").column("score").to_pylist() == [1, 6]
