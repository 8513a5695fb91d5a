"""Failed rows in the journal: committed with their batch, folded per operator over attempts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from semray.settings import Settings
from semray.transactions import LLMUsage, RowFailures, begin_run, list_runs, resume_run, show_run
from semray.transactions.journal import JOURNAL_NAME, read_journal
from semray.transactions.records import BatchCommitted


def table(*row_ids: str) -> pa.Table:
    return pa.table({"_rowid": pa.array(list(row_ids), pa.string())})


def no_label(*row_ids: str) -> tuple[RowFailures, ...]:
    return (RowFailures(reason="no_label", row_ids=row_ids, example="no_label: nothing for " + row_ids[0]),)


def test_failures_are_counted_per_operator_and_by_reason(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, {"p": 1}, None)
    broken = (RowFailures(reason="unparseable", row_ids=("c",), example="unparseable: 'Maybe'"),)
    run.ledger.commit("op", "b1", ["a"], table("a"), LLMUsage(calls=3), failed=(*no_label("b"), *broken))
    run.ledger.commit("op", "b1", ["a"], table("a"), LLMUsage(calls=3), failed=(*no_label("b"), *broken))  # retried
    run.ledger.commit("other", "b2", ["x"], table("x"), LLMUsage(calls=1))
    operators = run.state().operators
    assert (operators["op"].rows_in, operators["op"].rows_failed, operators["op"].rows_attempted) == (1, 2, 3)
    assert [(r.reason, r.rows, r.example) for r in operators["op"].failures] == [
        ("no_label", 1, "no_label: nothing for b"),
        ("unparseable", 1, "unparseable: 'Maybe'"),
    ]
    assert operators["other"].rows_failed == 0 and operators["other"].failures == ()
    run.finish("succeeded")
    (summary,) = list_runs(settings)
    assert summary.rows_failed == 2
    assert show_run(settings, summary.run_id).operators[0].rows_failed == 2


def test_a_row_answered_on_resume_is_no_longer_failed(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    first = begin_run(settings, {"p": 1}, None)
    first.ledger.commit("op", "b1", ["a"], table("a"), failed=no_label("b", "c"))
    first.finish("failed", "too many failed rows")
    second = resume_run(settings, first.run_id)
    second.ledger.commit("op", "b2", ["b"], table("b"), LLMUsage(calls=1))
    second.ledger.commit("op", "b3", [], table(), failed=no_label("c"))  # asked again, failed again
    (progress,) = second.state().operators.values()
    assert (progress.rows_in, progress.rows_failed) == (2, 1)  # c counted once over both attempts


def test_journals_written_before_failures_were_recorded_still_read(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    run = begin_run(settings, {"p": 1}, None)
    run.ledger.commit("op", "b1", ["a"], table("a"))
    run.finish("succeeded")
    path = run.path / JOURNAL_NAME
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record.pop("failed", None)  # an older record has no such field
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (commit,) = [record for record in read_journal(path).records if isinstance(record, BatchCommitted)]
    assert commit.failed == ()
    assert show_run(settings, run.run_id).rows_failed == 0
