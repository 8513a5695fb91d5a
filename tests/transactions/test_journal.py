"""The journal: durable appends, and reads that survive any torn tail."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from semray.transactions.journal import JournalWriter, read_journal
from semray.transactions.records import (
    BatchCommitted,
    ErrorRecorded,
    LLMUsage,
    OutputTarget,
    RunFinished,
    RunStarted,
    encode_record,
)


def started() -> RunStarted:
    return RunStarted(
        run_id="20261130-101500-abcdef",
        plan={"op": "scan"},
        plan_fingerprint="f" * 64,
        output=OutputTarget(path="/tmp/x.parquet", kind="file"),
        base_version=None,
    )


def make_records() -> list[RunStarted | BatchCommitted | ErrorRecorded | RunFinished]:
    batches = [
        BatchCommitted(
            operator_key="op1",
            batch_key=f"k{index}",
            row_ids=(f"r{index}", f"r{index}b"),
            rows_out=1,
            file=f"batches/op1/k{index}.parquet",
            usage=LLMUsage(calls=2, tokens_in=100, tokens_out=4, dollars=0.002),
        )
        for index in range(3)
    ]
    return [
        started(),
        *batches,
        ErrorRecorded(error_type="Timeout", message="model timed out"),
        RunFinished(status="failed"),
    ]


RECORDS = make_records()


def some_records() -> list[RunStarted | BatchCommitted | ErrorRecorded | RunFinished]:
    return list(RECORDS)


def write_all(path: Path) -> list[bytes]:
    writer = JournalWriter.create(path)
    lines = []
    for record in some_records():
        writer.append(record)
        lines.append(encode_record(record))
    writer.close()
    return lines


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_all(path)
    read = read_journal(path)
    assert list(read.records) == some_records()
    assert read.skipped == ()
    assert read.end_offset == path.stat().st_size


def test_create_refuses_an_existing_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    JournalWriter.create(path).close()
    with pytest.raises(FileExistsError):
        JournalWriter.create(path)


def test_every_truncation_reads_as_a_prefix_of_records(tmp_path: Path) -> None:
    # A kill or power loss can cut the file at any byte; reading must never fail and must
    # return exactly the records whose lines are complete.
    full = tmp_path / "journal.jsonl"
    lines = write_all(full)
    data = full.read_bytes()
    boundaries = [sum(len(line) for line in lines[:count]) for count in range(len(lines) + 1)]
    cut = tmp_path / "cut.jsonl"
    for size in range(len(data) + 1):
        cut.write_bytes(data[:size])
        read = read_journal(cut)
        complete = max(count for count, boundary in enumerate(boundaries) if boundary <= size)
        # A line missing only its newline is still a complete record.
        if size + 1 in boundaries:
            complete += 1
        assert list(read.records) == some_records()[:complete], size
        assert len(read.skipped) == (0 if size in boundaries or size + 1 in boundaries else 1)


def test_append_after_a_torn_tail_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    lines = write_all(path)
    torn = lines[1][: len(lines[1]) // 2]
    path.write_bytes(lines[0] + torn)
    writer = JournalWriter(path)
    writer.append(RunFinished(status="cancelled"))
    writer.close()
    read = read_journal(path)
    assert [record.kind for record in read.records] == ["run_started", "run_finished"]
    assert len(read.skipped) == 1 and read.skipped[0].offset == len(lines[0])


def test_incremental_read_leaves_an_unterminated_line_for_later(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    lines = write_all(path)
    path.write_bytes(lines[0] + lines[1][:-1])
    first = read_journal(path, include_unterminated=False)
    assert [record.kind for record in first.records] == ["run_started"]
    assert first.end_offset == len(lines[0])
    path.write_bytes(lines[0] + lines[1])
    second = read_journal(path, offset=first.end_offset, include_unterminated=False)
    assert [record.kind for record in second.records] == ["batch_committed"]


def test_writer_pickles_without_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    writer = JournalWriter.create(path)
    writer.append(started())
    clone = pickle.loads(pickle.dumps(writer))
    clone.append(RunFinished(status="succeeded"))
    clone.close()
    writer.close()
    assert [record.kind for record in read_journal(path).records] == ["run_started", "run_finished"]


def test_records_are_one_json_line_with_a_kind(tmp_path: Path) -> None:
    line = encode_record(RunFinished(status="succeeded", message="ok"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b'"kind":"run_finished"' in line
