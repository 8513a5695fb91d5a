"""Atomic publish: results appear whole under the output name, or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.settings import Settings
from semray.transactions import (
    OutputTargetError,
    TransactionConflictError,
    TransactionError,
    begin_run,
    current_version,
    resume_run,
    show_run,
)
from semray.transactions import publish as publishing
from semray.transactions.records import OutputTarget


def table(*values: int) -> pa.Table:
    return pa.table({"_rowid": [f"r{value}" for value in values], "value": list(values)})


def visible(out_dir: Path) -> list[str]:
    """What a user listing the output folder sees (hidden sidecars excluded)."""
    return sorted(name for name in os.listdir(out_dir) if not name.startswith("."))


def test_file_output_is_a_real_file_with_the_results(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result.parquet"
    with begin_run(settings, {"plan": 1}, output) as run:
        version = run.publish(table(1, 2))
    assert output.is_file() and not output.is_symlink()
    assert pq.read_table(output).equals(table(1, 2))
    assert visible(out_dir) == ["result.parquet"]
    assert current_version(OutputTarget.from_path(output)) == version
    assert show_run(settings, run.run_id).published_version == version


def test_folder_output_is_replaced_as_a_whole(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result"
    versions = []
    for values in ((1, 2), (3,), (4, 5, 6)):
        with begin_run(settings, {"plan": 1}, output) as run:
            staged = run.staging_path()
            for value in values:  # a pipeline writes several files into the staging folder
                pq.write_table(table(value), staged / f"part-{value}.parquet")
            versions.append(run.publish())
        assert sorted(pq.read_table(output).column("value").to_pylist()) == list(values)
    kept = sorted(os.listdir(out_dir / ".result.semray" / "versions"))
    assert kept == sorted(versions), "superseded versions stay a while for readers still listing them"


def test_superseded_versions_are_removed_after_the_grace_period(
    settings: Settings, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publishing, "RETAIN_SUPERSEDED_S", 0.0)
    for kind, output in (("folder", out_dir / "result"), ("file", out_dir / "result.parquet")):
        for value in range(3):
            with begin_run(settings, {"plan": value}, output) as run:
                version = run.publish(table(value))
        versions = os.listdir(out_dir / f".{output.name}.semray" / "versions")
        assert versions == [version], kind
        assert pq.read_table(output).equals(table(2))


def test_a_failed_run_leaves_nothing_visible(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result.parquet"
    with pytest.raises(RuntimeError), begin_run(settings, {"plan": 1}, output) as run:
        pq.write_table(table(1), run.staging_path())
        raise RuntimeError("model endpoint down")
    assert visible(out_dir) == []
    assert list((out_dir / ".result.parquet.semray" / "staging").iterdir()) == []
    detail = show_run(settings, run.run_id)
    assert detail.status == "failed" and detail.errors[0].error_type == "RuntimeError"


def test_a_run_that_ends_without_publishing_fails(settings: Settings, out_dir: Path) -> None:
    with begin_run(settings, {"plan": 1}, out_dir / "result") as run:
        pass
    assert visible(out_dir) == []
    assert show_run(settings, run.run_id).status == "failed"


def test_publishing_over_a_file_semray_did_not_write(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result.parquet"
    pq.write_table(table(9), output)
    assert (current_version(OutputTarget.from_path(output)) or "").startswith("foreign:")
    with begin_run(settings, {"plan": 1}, output) as run:
        run.publish(table(1))
    assert pq.read_table(output).equals(table(1))


def test_a_foreign_file_changed_during_the_run_is_a_conflict(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result.parquet"
    pq.write_table(table(9), output)
    with pytest.raises(TransactionConflictError), begin_run(settings, {"plan": 1}, output) as run:
        pq.write_table(table(8, 9), output)  # someone else rewrites it meanwhile
        run.publish(table(1))
    assert pq.read_table(output).equals(table(8, 9))


def test_outputs_that_cannot_be_published_atomically_are_refused_up_front(settings: Settings, out_dir: Path) -> None:
    (out_dir / "existing").mkdir()
    with pytest.raises(OutputTargetError, match="not published by semray"):
        begin_run(settings, {"plan": 1}, out_dir / "existing")
    with pytest.raises(OutputTargetError, match="does not exist"):
        begin_run(settings, {"plan": 1}, out_dir / "missing" / "result.parquet")
    with pytest.raises(OutputTargetError, match="is a folder"):
        begin_run(settings, {"plan": 1}, OutputTarget.from_path(out_dir / "existing", kind="file"))


def test_publishing_nothing_is_an_error(settings: Settings, out_dir: Path) -> None:
    with pytest.raises(TransactionError, match="nothing staged"), begin_run(settings, {}, out_dir / "r.parquet") as run:
        run.publish()


def test_first_committer_wins_and_the_loser_can_resume(settings: Settings, out_dir: Path) -> None:
    output = out_dir / "result.parquet"
    slow = begin_run(settings, {"plan": "slow"}, output)
    with begin_run(settings, {"plan": "fast"}, output) as fast:
        fast.publish(table(1))
    with pytest.raises(TransactionConflictError, match=slow.run_id):
        slow.publish(table(2))
    assert pq.read_table(output).equals(table(1)), "the loser published nothing"
    slow.record_error("conflict")
    slow.finish("failed", "conflict")
    with resume_run(settings, slow.run_id) as again:
        again.publish(table(2))
    assert pq.read_table(output).equals(table(2))
