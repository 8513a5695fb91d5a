"""The ingest's optional model pass: documents without headings get the sections a model proposed
(recorded replies), documents with headings are never sent, simulated tiers are refused, and the CLI
flags reach the ingest. In process, no Ray."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from semray.catalog.ingest import add_server
from semray.catalog.section_writer import SectionsNeedModelError, SectionWriter
from semray.catalog.store import Catalog
from semray.cli import main
from semray.serving.profiles import resolve_serving
from semray.settings import Settings

MEMO = "Dear all, lunch is at noon on Friday.\n\nBudget: we are over plan for the third quarter.\n"
NOTES = "# Harbour\n\nBoats leave at dawn.\n"
REPLIES = {
    "sections:memo.txt": json.dumps(
        {"sections": [{"title": "Lunch", "first_words": "Dear all"}, {"title": "Money", "first_words": "Budget:"}]}
    ),
    "sections:notes.md": json.dumps({"sections": [{"title": "Never asked", "first_words": "Boats"}]}),
}


def _folder(root: Path) -> Path:
    folder = root / "office"
    folder.mkdir()
    (folder / "memo.txt").write_text(MEMO)
    (folder / "notes.md").write_text(NOTES)
    return folder


def _paths(settings: Settings, document: str) -> set[tuple[str, ...]]:
    segments = Catalog.open(settings).rows("segments").to_pylist()
    return {tuple(row["path"]) for row in segments if row["document_id"] == document and row["level"] == "section"}


def test_documents_without_headings_get_the_proposed_sections(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    add_server(settings, str(_folder(tmp_path)), engine="local", sections=SectionWriter.replaying(REPLIES))
    assert _paths(settings, "memo.txt") == {("memo.txt", "Lunch"), ("memo.txt", "Money")}
    assert _paths(settings, "notes.md") == {("notes.md", "Harbour")}  # its own heading; the model is not asked
    money = [
        row
        for row in Catalog.open(settings).rows("segments").to_pylist()
        if row["level"] == "section" and row["path"] == ["memo.txt", "Money"]
    ]
    assert [MEMO[row["start"] : row["end"]] for row in money] == ["Budget: we are over plan for the third quarter."]
    plain = Settings(state_dir=tmp_path / "plain")
    add_server(plain, str(tmp_path / "office"), engine="local")
    assert _paths(plain, "memo.txt") == set()  # without the pass: paragraphs under the document


def test_a_missing_or_unusable_reply_keeps_the_structure(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    writer = SectionWriter.replaying({"sections:memo.txt": '{"sections": [{"title": "X", "first_words": "absent"}]}'})
    add_server(settings, str(_folder(tmp_path)), engine="local", sections=writer)
    assert _paths(settings, "memo.txt") == set()


def test_simulated_tiers_cannot_propose_sections_and_the_writer_travels_to_ray() -> None:
    with pytest.raises(SectionsNeedModelError, match="needs a real LLM tier"):
        SectionWriter.from_tier(resolve_serving(Settings().models))
    writer = SectionWriter.replaying(REPLIES)
    assert pickle.loads(pickle.dumps(writer)) == writer  # the reading actors get a copy


def test_the_cli_flags_reach_the_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(REPLIES))
    monkeypatch.setenv("SEMRAY_STATE_DIR", str(tmp_path / "state"))
    folder = _folder(tmp_path)
    assert main(["catalog", "add", str(folder), "--in-process", "--sections-replay", str(replies)]) == 0
    assert _paths(Settings(state_dir=tmp_path / "state"), "memo.txt") == {("memo.txt", "Lunch"), ("memo.txt", "Money")}
    assert main(["catalog", "refresh", "office", "--in-process", "--propose-sections"]) != 0  # simulated tiers
