"""An ingest shows semray's own progress: files done of the total, segments, embeddings/s, ETA; a bar on a
terminal, log lines elsewhere (catalog/ingest_progress.py, cli_progress.py). No Ray: the in-process engine."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from semray.catalog import document_pipeline
from semray.catalog.ingest import add_server, refresh
from semray.catalog.ingest_progress import IngestLogReporter, IngestProgress
from semray.cli import main
from semray.cli_progress import IngestBar, ingest_detail, ingest_reporter_for
from semray.cluster import connect
from semray.settings import Settings


class Recorder:
    def __init__(self) -> None:
        self.updates: list[IngestProgress] = []
        self.closed: list[IngestProgress] = []

    def update(self, progress: IngestProgress) -> None:
        self.updates.append(progress)

    def close(self, progress: IngestProgress) -> None:
        self.closed.append(progress)


def _notes(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    for number in range(count):
        (folder / f"n{number:02d}.md").write_text(f"# Note {number}\n\nThe harbour opens at {number} am.\n")
    return folder


def test_an_ingest_reports_files_segments_and_rate_after_each_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(document_pipeline, "EMBED_BATCH_TEXTS", 40)  # a batch of 16 notes (64 segments) each
    folder = _notes(tmp_path / "notes", 40)
    recorder = Recorder()
    settings = Settings(state_dir=tmp_path / "state")
    report = add_server(settings, str(folder), engine="local", progress=recorder)

    reading = [progress for progress in recorder.updates if progress.phase == "reading"]
    assert [progress.files_done for progress in reading] == [0, 16, 32, 40]
    assert [progress.segments for progress in reading] == [0, 64, 128, 160]
    assert {progress.files_total for progress in recorder.updates} == {40}
    assert reading[1].embeddings_per_s is not None and reading[1].eta_s is not None
    assert reading[-1].eta_s == 0.0
    assert recorder.updates[-1].phase == "publishing" and recorder.updates[-1].eta_s is None
    assert recorder.closed == [recorder.updates[-1]] and report.segments == 160

    (folder / "n00.md").write_text("# Note 0\n\nChanged.\n")
    again = Recorder()
    refresh(settings, "notes", engine="local", progress=again)
    assert [(progress.files_done, progress.files_total) for progress in again.updates][-1] == (1, 1)  # changed only
    assert len(again.closed) == 1


def test_a_failed_ingest_still_closes_its_progress(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "image.png").write_bytes(b"\x89PNG")
    recorder = Recorder()
    with pytest.raises(Exception, match="nothing readable"):
        add_server(Settings(state_dir=tmp_path / "state"), str(folder), engine="local", progress=recorder)
    assert len(recorder.closed) == 1


def test_log_lines_come_at_most_every_interval_and_at_each_new_phase(capsys: pytest.CaptureFixture[str]) -> None:
    now = [0.0]
    reporter = IngestLogReporter(10.0, now=lambda: now[0])
    for moment, phase in ((0.0, "reading"), (4.0, "reading"), (10.0, "reading"), (12.0, "publishing")):
        now[0] = moment
        reporter.update(IngestProgress("notes", files_done=int(moment), files_total=20, elapsed_s=moment, phase=phase))
    err = capsys.readouterr().err
    assert err.count("catalog_ingest_progress") == 3  # at 0, 10, and the publishing phase at 12
    IngestLogReporter(0.0).update(IngestProgress("notes"))
    assert "catalog_ingest_progress" not in capsys.readouterr().err


def test_the_bar_shows_files_segments_rate_and_eta() -> None:
    from rich.console import Console

    screen = io.StringIO()
    bar = IngestBar(Console(file=screen, force_terminal=True, width=140))
    bar.update(IngestProgress("notes", files_done=250, files_total=1000, segments=1000, elapsed_s=10.0))
    bar.close(IngestProgress("notes", 1000, 1000, 4000, 40.0, phase="publishing"))
    shown = screen.getvalue()
    assert "ingest notes" in shown and "1000/1000" in shown and "4000 segments, 100.0 embeddings/s, publishing" in shown
    assert ingest_detail(IngestProgress("notes", 0, 10)) == "0 segments"


def test_the_cli_draws_the_bar_on_a_terminal_and_logs_lines_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(connect._TERMINAL_BARS, "semray", False)
    assert isinstance(ingest_reporter_for(Settings(), terminal=True), IngestBar)
    assert not connect.ray_data_progress_bars(terminal=True)  # Ray Data's bars stay off beside semray's
    lines = ingest_reporter_for(Settings(), terminal=False)
    assert isinstance(lines, IngestLogReporter) and lines.level == "warning"

    monkeypatch.setenv("SEMRAY_PROGRESS_INTERVAL_S", "3600")  # the first line and each new phase's, however slow
    folder = _notes(tmp_path / "notes", 3)
    state = ["--state-dir", str(tmp_path / "state")]
    assert main([*state, "--log-format", "json", "catalog", "add", str(folder), "--in-process"]) == 0
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.err.splitlines() if "catalog_ingest_progress" in line]
    assert [(event["phase"], event["files_done"], event["files_total"]) for event in events] == [
        ("reading", 0, 3),
        ("publishing", 3, 3),
    ]
    assert events[-1]["segments"] == 12 and "3 new" in captured.out
