"""A catalog publish streams the staged segments and snippets in batches, and publishes them whole.

The publish of a collection larger than one batch (``STAGED_BATCH_ROWS`` set to 7) writes exactly the
rows of a publish in one batch; the stream never hands the table more than one batch at a time.
Peak memory is measured by ``benchmarks/ingest.py``, not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.catalog import document_ingest, store
from semray.catalog.ingest import add_server
from semray.catalog.store import Catalog
from semray.catalog.tables import SEGMENTS, SNIPPETS
from semray.settings import Settings

BATCH = 7


def _collection(root: Path, documents: int = 12) -> Path:
    folder = root / "notes"
    folder.mkdir()
    for number in range(documents):
        sections = "\n\n".join(
            f"## Part {part}\n\nNote {number} part {part} says the harbour opens at {part + 6} am.\n\n"
            f"| boat | hour |\n|---|---|\n| b{number}-{part} | {part + 6} |\n| c{number}-{part} | {part + 7} |"
            for part in range(3)
        )
        (folder / f"note-{number:02d}.md").write_text(f"# Note {number}\n\n{sections}\n")
    return folder


def _published(settings: Settings, table: str) -> pa.Table:
    return Catalog.open(settings).rows(table).sort_by("segment_id")


def test_a_publish_larger_than_one_batch_is_complete_and_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _collection(tmp_path)
    whole = Settings(state_dir=tmp_path / "whole")
    add_server(whole, str(folder), engine="local")  # 4,096 rows a batch: one batch

    batches: list[int] = []
    read_staged = document_ingest._read_staged

    def counted(path: Path) -> pa.RecordBatchReader | None:
        reader = read_staged(path)
        if reader is None:
            return None

        def batches_of(stream: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
            for batch in stream:
                batches.append(batch.num_rows)
                yield batch

        return pa.RecordBatchReader.from_batches(reader.schema, batches_of(reader))

    monkeypatch.setattr(document_ingest, "STAGED_BATCH_ROWS", BATCH)
    monkeypatch.setattr(document_ingest, "_read_staged", counted)
    streamed = Settings(state_dir=tmp_path / "streamed")
    add_server(streamed, str(folder), engine="local")

    segments, expected = _published(streamed, SEGMENTS), _published(whole, SEGMENTS)
    snippets = Catalog.open(streamed).rows(SNIPPETS)
    assert segments.num_rows == expected.num_rows > 4 * BATCH  # the collection spans several batches
    assert snippets.num_rows == Catalog.open(whole).rows(SNIPPETS).num_rows > 0
    assert sum(batches) == segments.num_rows + snippets.num_rows  # every staged row went through the stream
    assert max(batches) <= BATCH and len(batches) > 2
    plain = [name for name in segments.column_names if name != "vector"]
    assert segments.select(plain).equals(expected.select(plain))
    assert np.allclose(np.array(segments["vector"].to_pylist()), np.array(expected["vector"].to_pylist()), atol=1e-6)


def _watched_parts(monkeypatch: pytest.MonkeyPatch, fail_after: int | None = None) -> list[int]:
    """Record the sizes of the segments' parts a publish streams to LanceDB; with ``fail_after``, the stream
    raises after that many parts (a disk error half way through the add)."""
    sizes: list[int] = []
    original = store.parts_of

    def watched(rows: pa.Table | pa.RecordBatchReader, size: int) -> Iterator[pa.Table]:
        for part in original(rows, size):
            if "level" in part.schema.names:  # the segments (snippets have no level)
                if len(sizes) == fail_after:
                    raise OSError("disk full (injected)")
                sizes.append(part.num_rows)
            yield part

    monkeypatch.setattr(store, "parts_of", watched)
    return sizes


def test_a_publish_streams_batches_of_the_set_size_in_one_add_and_the_catalog_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _collection(tmp_path)
    whole = Settings(state_dir=tmp_path / "whole")
    add_server(whole, str(folder), engine="local")
    sizes = _watched_parts(monkeypatch)
    parted = Settings(state_dir=tmp_path / "parted", catalog_publish_rows=5)
    add_server(parted, str(folder), engine="local")
    segments, expected = _published(parted, SEGMENTS), _published(whole, SEGMENTS)
    plain = [name for name in segments.column_names if name != "vector"]
    assert segments.num_rows > 5 * 5 and segments.select(plain).equals(expected.select(plain))
    assert sum(sizes) == segments.num_rows and max(sizes) == 5 and len(sizes) > 5
    # the whole stream is one add, one Lance version: as many versions as a publish in one batch
    assert Catalog.open(parted).manifest.tables[SEGMENTS] == Catalog.open(whole).manifest.tables[SEGMENTS]


def test_a_stream_that_fails_half_way_through_the_add_registers_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _collection(tmp_path)
    settings = Settings(state_dir=tmp_path / "state", catalog_publish_rows=5)
    sizes = _watched_parts(monkeypatch, fail_after=3)
    with pytest.raises(OSError, match="injected"):
        add_server(settings, str(folder), engine="local")
    assert sizes == [5, 5, 5]  # three batches went to LanceDB before the failure
    catalog = Catalog.open(settings)
    assert catalog.version() == 0 and catalog.datasets() == [] and catalog.table(SEGMENTS) is None
    assert not list((settings.catalog_path / "_staging").iterdir())
    monkeypatch.undo()
    report = add_server(settings, str(folder), engine="local")  # the next ingest publishes whole
    assert report.version == 1 and Catalog.open(settings).rows(SEGMENTS).num_rows == report.segments


@pytest.mark.parametrize("rows", [0, 4, 5, 10, 11])
def test_a_stream_is_cut_into_parts_of_at_most_size_rows_in_order(rows: int) -> None:
    table = pa.table({"a": list(range(rows))})
    stream = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3))
    parts = list(store.parts_of(stream, 5))
    assert [part.num_rows for part in parts] == ([5] * (rows // 5) + ([rows % 5] if rows % 5 else [])) or [0]
    assert [value for part in parts for value in part.column("a").to_pylist()] == list(range(rows))


def test_staged_files_are_written_in_large_row_groups_and_streamed_in_bounded_memory(tmp_path: Path) -> None:
    noise = np.random.default_rng(0).normal(size=2048 * 256).astype(np.float32)  # vectors do not compress
    chunk = pa.table({"vector": pa.FixedSizeListArray.from_arrays(pa.array(noise), 256)})
    staged = document_ingest.StagedWriter(tmp_path / "staged.parquet", chunk.schema)
    plain = pq.ParquetWriter(tmp_path / "plain.parquet", chunk.schema)
    for _ in range(40):  # 40 chunks of 2,048 rows, 2 MiB each, as pipeline batches arrive
        staged.write(chunk)
        plain.write_table(chunk)
    staged.close()
    plain.close()
    assert document_ingest.staged_file(tmp_path / "staged.parquet").num_row_groups == 5  # 16,384 rows each
    file = document_ingest.staged_file(tmp_path / "plain.parquet")  # 40 row groups: pre_buffer would keep them all
    assert file.num_row_groups == 40
    before, most = pa.total_allocated_bytes(), 0
    for batch in file.iter_batches(batch_size=4096):
        most = max(most, pa.total_allocated_bytes() - before)
        del batch
    assert most < 32 << 20  # a row group or two at a time (12 MiB), not the 80 MiB file (113 MiB with pre_buffer)


def test_in_process_embedding_calls_gather_read_batches_up_to_the_text_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from semray.catalog import document_pipeline
    from semray.catalog.servers import open_server
    from semray.serving.profiles import resolve_serving

    folder = tmp_path / "notes"
    folder.mkdir()
    for number in range(30):  # 4 segments each: document, section, heading, paragraph
        (folder / f"n{number:02d}.md").write_text(f"# Note {number}\n\nThe harbour opens at {number} am.\n")
    files = open_server(str(folder)).profile({}).documents
    embedding = resolve_serving(Settings().models).embedding

    def documents_per_call(budget: int) -> list[int]:
        monkeypatch.setattr(document_pipeline, "EMBED_BATCH_TEXTS", budget)
        batches = document_pipeline.run_documents(files, "notes", embedding, engine="local")
        return [batch.num_rows for batch in batches]

    assert documents_per_call(100) == [30]  # 120 segments: under the budget, one call for all
    assert documents_per_call(40) == [16, 14]  # a read batch (16 notes, 64 segments) passes it


def test_the_publish_holds_no_per_file_python_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vector index is built inside the publish, the ingest's memory peak: no per-file Python object (a
    document's ``DocumentFile``, dropped before the reading, or a ``FileState``, which documents never get: their
    states are Arrow columns) is alive in it, so none adds to it in proportion to the files. Counted among the live
    objects while the publish runs (the ingest itself still running)."""
    import gc

    from semray.catalog.servers.base import DocumentFile, FileState

    folder = _collection(tmp_path)
    alive: list[int] = []
    publish = Catalog.publish

    def counting(catalog: Catalog, change_set: store.ChangeSet) -> int:
        gc.collect()
        alive.append(
            sum(
                1
                for item in gc.get_objects()
                if type(item) in (DocumentFile, FileState) and item.relative.startswith("note-")
            )
        )
        return publish(catalog, change_set)

    monkeypatch.setattr(Catalog, "publish", counting)
    report = add_server(Settings(state_dir=tmp_path / "state"), str(folder), engine="local")
    assert report.documents_read == 12 and report.files.new == 12  # the report still counts every file
    assert alive == [0]


def test_the_reading_starts_with_no_document_file_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documents to read are Arrow columns by the time the reading starts: the ``DocumentFile``s of the
    discovery are freed first, so the reading's own objects do not land between them."""
    import gc

    from semray.catalog.servers.base import DocumentFile

    folder = _collection(tmp_path)
    alive: list[int] = []
    run_documents = document_ingest.run_documents

    def counting(documents: pa.Table, *args: object, **kwargs: object) -> Iterator[pa.Table]:
        gc.collect()
        alive.append(sum(1 for item in gc.get_objects() if type(item) is DocumentFile))
        return run_documents(documents, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(document_ingest, "run_documents", counting)
    report = add_server(Settings(state_dir=tmp_path / "state"), str(folder), engine="local")
    assert report.documents_read == 12
    assert alive == [0]
