"""Documents over ``Settings.catalog_stream_bytes`` are read in parts, not whole (catalog/streamed_documents.py).

The threshold and the part size are lowered here (a few KiB) instead of writing 64 MiB files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.catalog import document_pipeline
from semray.catalog.document_pipeline import DocumentReader
from semray.catalog.ingest import add_server
from semray.catalog.store import Catalog
from semray.settings import Settings

PART_CHARS = 2_000


def _long_markdown(sections: int = 12) -> str:
    parts = ["# Handbook", ""]
    for number in range(sections):
        parts += [f"## Chapter {number}", ""]
        for paragraph in range(3):
            words = " ".join(f"word{number}x{paragraph}y{index}" for index in range(40))
            parts += [f"Paragraph {paragraph} of chapter {number}: {words}.", ""]
        if number == 9:
            parts += ["| item | maker |", "| --- | --- |", "| pen | Nordic |", "| ink | Osaka |", ""]
    return "\n".join(parts)


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", catalog_stream_bytes=4096)


def _segments_of(catalog: Catalog, document_id: str) -> list[dict[str, object]]:
    rows = catalog.rows("segments").to_pylist()
    return sorted((row for row in rows if row["document_id"] == document_id), key=lambda row: row["start"])


def test_a_large_markdown_document_is_read_in_parts_and_its_spans_slice_the_whole_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(document_pipeline, "PART_CHARS", PART_CHARS)
    folder = tmp_path / "docs"
    folder.mkdir()
    text = _long_markdown()
    (folder / "big.md").write_text(text, encoding="utf-8")
    (folder / "small.md").write_text("# Note\n\nA small note about pens.\n", encoding="utf-8")
    assert len(text.encode()) > 4096 * 4  # several parts

    settings = _settings(tmp_path)
    report = add_server(settings, str(folder), engine="local")
    assert report.skipped == () and report.documents_read == 2

    catalog = Catalog.open(settings)
    documents = {row["document_id"]: row for row in pq.read_table(catalog.scan("docs").path).to_pylist()}
    # no part holds the whole text: the documents dataset keeps its length, not the text
    assert documents["big.md"]["text"] is None and documents["big.md"]["chars"] == len(text)
    assert documents["small.md"]["text"].startswith("# Note") and documents["big.md"]["encoding"] == "utf-8"

    segments = _segments_of(catalog, "big.md")
    (root,) = [row for row in segments if row["level"] == "document"]
    assert (root["start"], root["end"], root["parent_id"]) == (0, len(text), None)
    ids = [row["segment_id"] for row in segments]
    assert len(set(ids)) == len(ids)
    by_id = {row["segment_id"]: row for row in segments}
    for row in segments:
        if row is root:
            continue
        assert row["text"] == text[row["start"] : row["end"]], row  # spans are offsets in the whole text
        parent = by_id[row["parent_id"]]
        assert parent["start"] <= row["start"] and row["end"] <= parent["end"]
    top = sorted((row for row in segments if row["parent_id"] == root["segment_id"]), key=lambda row: row["start"])
    assert [row["ordinal"] for row in top] == list(range(len(top)))  # ordinals run on across the parts
    # every word of the document lies in exactly one leaf
    parents = {row["parent_id"] for row in segments}
    leaves = [row for row in segments if row["segment_id"] not in parents]
    assert " ".join(str(row["text"]) for row in leaves).split() == text.split()
    # the sections of every part are there, with their headings in their paths
    assert {f"Chapter {number}" for number in range(12)} <= {row["path"][-1] for row in segments}

    (snippet,) = catalog.rows("snippets").to_pylist()
    holder = by_id[snippet["segment_id"]]
    assert json.loads(snippet["rows_json"]) == [["pen", "Nordic"], ["ink", "Osaka"]]
    assert "| pen | Nordic |" in str(holder["text"]) and holder["level"] != "document"


def test_the_reader_holds_one_part_at_a_time_and_never_reads_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from semray.catalog.servers import open_server
    from semray.sources import documents

    path = tmp_path / "docs" / "big.md"
    path.parent.mkdir()
    text = _long_markdown(sections=40)
    path.write_text(text, encoding="utf-8")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("read_document read a streamed file whole")

    monkeypatch.setattr(documents, "read_document", refuse)
    monkeypatch.setattr(documents.Path, "read_bytes", refuse)
    files = open_server(str(path.parent)).profile({}).documents
    reader = DocumentReader("docs", stream_bytes=4096, part_chars=PART_CHARS)
    tables = list(reader(document_pipeline.input_table(files)))
    parts = [part for table in tables for part in table.column("part").to_pylist()]
    assert parts == list(range(len(parts))) and len(parts) >= len(text) // PART_CHARS
    assert max(table.num_rows for table in tables) <= document_pipeline.READ_BATCH_DOCUMENTS
    for table in tables:
        for row in table.to_pylist():
            leaves = {segment["parent_id"] for segment in row["segments"]}
            held = sum(len(segment["text"]) for segment in row["segments"] if segment["segment_id"] not in leaves)
            assert held <= 2 * PART_CHARS  # one part's leaves (the root holds the first part's text)
            assert row["text"] is None


def test_large_documents_that_cannot_be_streamed_or_decoded_are_skipped_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(document_pipeline, "PART_CHARS", PART_CHARS)
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "ok.txt").write_text("A small note about pens.\n")
    (folder / "page.html").write_text("<html><body>" + "<p>pens and ink</p>" * 400 + "</body></html>")
    # valid UTF-8 for many parts, then a byte no encoding reads (a NUL rules out the single-byte fallback)
    (folder / "broken.txt").write_bytes(_long_markdown().encode() + b"\n\x00\xff tail\n")
    (folder / "latin.txt").write_bytes(("Caf\xe9 cr\xe8me, na\xefve r\xe9sum\xe9.\n\n" * 300).encode("latin-1"))

    settings = _settings(tmp_path)
    report = add_server(settings, str(folder), engine="local")
    skipped = dict(report.skipped)
    assert set(skipped) == {"page.html", "broken.txt"}, skipped
    assert "over the 0.0 MiB above which documents are read in parts" in skipped["page.html"]
    assert "catalog_stream_bytes" in skipped["page.html"]
    assert "not valid utf-8: byte 0xff" in skipped["broken.txt"]
    assert report.documents_read == 2

    catalog = Catalog.open(settings)
    assert not _segments_of(catalog, "broken.txt")  # refused before any part of it was segmented
    latin = _segments_of(catalog, "latin.txt")
    assert any("Café crème" in str(row["text"]) for row in latin)
    files = {row["path"]: row for row in catalog.files("mixed")}
    assert files["latin.txt"]["encoding"] == "iso8859-1" and files["latin.txt"]["status"] == "read"


def test_an_undecodable_part_is_found_before_any_part_is_yielded(tmp_path: Path) -> None:
    from semray.catalog.servers import open_server

    path = tmp_path / "docs" / "bad.md"
    path.parent.mkdir()
    path.write_bytes(b"# Title\n\n" + b"plain words here\n\n" * 2000 + b"\x00\xfe\n")
    files = open_server(str(path.parent)).profile({}).documents
    tables = list(
        DocumentReader("docs", stream_bytes=1024, part_chars=PART_CHARS)(document_pipeline.input_table(files))
    )
    (row,) = pa.concat_tables(tables).to_pylist()
    assert row["status"] == "skipped" and row["segments"] == [] and "byte 0xfe" in row["reason"]


@pytest.mark.slow  # starts Ray: 15-50 s on 2 cores
@pytest.mark.ray
def test_ray_data_reads_a_large_document_in_the_same_parts_as_the_in_process_engine(
    tmp_path: Path, ray_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(document_pipeline, "PART_CHARS", PART_CHARS)
    folder = tmp_path / "docs"
    folder.mkdir()
    text = _long_markdown()
    (folder / "big.md").write_text(text, encoding="utf-8")
    (folder / "small.md").write_text("# Note\n\nA small note about pens.\n", encoding="utf-8")

    def segments(engine: str) -> list[tuple[object, ...]]:
        settings = Settings(
            state_dir=ray_settings.state_dir, catalog_dir=tmp_path / f"catalog-{engine}", catalog_stream_bytes=4096
        )
        report = add_server(settings, str(folder), engine=engine)  # type: ignore[arg-type]
        assert report.documents_read == 2 and report.skipped == ()
        rows = Catalog.open(settings).rows("segments").to_pylist()
        return sorted((row["segment_id"], row["parent_id"], row["start"], row["end"], row["text"]) for row in rows)

    on_ray = segments("ray")
    assert on_ray == segments("local")
    assert sum(1 for row in on_ray if row[1] is None) == 2  # one root per document, the big one's from part 0
