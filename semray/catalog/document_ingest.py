"""The documents dataset of one ingest: read, segment and embed the changed documents, stage them.

``DocumentsIngest`` runs ``document_pipeline.run_documents`` over the changed files, writes the
documents, segments and snippets to the ingest's staging folder as parquet, merges the unchanged
documents of the last version, profiles the result and gives the store the table changes to
publish (``catalog/ingest.py`` drives it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from semray.catalog.document_pipeline import input_table, run_documents
from semray.catalog.ingest_progress import IngestClock, IngestProgress
from semray.catalog.profiling import TableProfile, profile_batches
from semray.catalog.servers import ServerProfile
from semray.catalog.servers.base import combined_hash
from semray.catalog.store import TableChange, in_list
from semray.catalog.summaries import Description
from semray.catalog.tables import FILES_SCHEMA, SEGMENTS, SNIPPETS, SNIPPETS_SCHEMA, segments_schema
from semray.sql_quoting import quote_literal

if TYPE_CHECKING:
    from semray.catalog.ingest import _Ingest

DOCUMENT_COLUMNS = pa.schema(
    [
        pa.field("document_id", pa.string()),
        pa.field("format", pa.string()),
        pa.field("encoding", pa.string()),
        pa.field("title", pa.string()),
        pa.field("chars", pa.int64()),
        pa.field("text", pa.string()),
    ]
)
"""The documents dataset as a plan scans it: one row per document that was read."""
_STATE_COLUMNS = ("document_id", "content_hash", "size", "status", "reason", "encoding")
"""The pipeline's columns that make a document's state: its row of the ``files`` table, less server and dataset."""
STATES_SCHEMA = pa.schema(
    [FILES_SCHEMA.field(name).with_nullable(True) for name in FILES_SCHEMA.names if name not in ("server", "dataset")]
)
"""The documents' states as ``DocumentsIngest.states`` gives them: ``_STATE_COLUMNS``, named as in ``files``."""


class DocumentsIngest:
    """The documents dataset of one ingest: the pipeline's output staged as parquet, its profile and row."""

    def __init__(self, ingest: _Ingest, profile: ServerProfile) -> None:
        self.ingest = ingest
        self.dataset = ingest.name
        self.files = input_table(profile.documents)
        """The documents to read as Arrow columns: the ingest drops its ``DocumentFile``s before reading, so their
        memory is free again before the reading's own objects take theirs (docs/catalog.md, Memory)."""
        self._has_files = self.files.num_rows > 0
        self.unchanged = set(profile.unchanged_documents)
        self._states: list[pa.Table] = []
        """The documents' states, a table per pipeline batch: Arrow columns, not a Python object per document,
        whose memory the allocator kept after the publish began (docs/catalog.md, Memory)."""
        self.state_count = 0
        self.read_count = self.segment_count = self.snippet_count = 0
        self.staged_new = ingest.staging / "documents-new.parquet"
        self.staged_segments = ingest.staging / "segments.parquet"
        self.staged_snippets = ingest.staging / "snippets.parquet"
        self.staged_parquet = ingest.staging / "documents.parquet"
        self.final_parquet = ingest.staging  # set by read()
        self.dimension: int | None = None
        self._profile: TableProfile | None = None
        self._clock = IngestClock(self.dataset, len(self.files))
        previous = ingest.records.get(self.dataset)
        self.previous_parquet = Path(previous.uri) if previous is not None and previous.kind == "documents" else None
        self.removed_ids = {
            path
            for path, row in ingest.previous.items()
            if row["dataset"] == self.dataset and path not in self.unchanged
        }
        """The documents of the last version that are gone or changed (a changed one is read again)."""

    @property
    def changed(self) -> bool:
        return self._has_files or bool(self.removed_ids) or self.previous_parquet is None

    @property
    def publishes(self) -> bool:
        """This ingest writes the documents dataset: something changed and some document is readable."""
        return self.changed and self.any_read

    @property
    def any_read(self) -> bool:
        return self.read_count > 0 or bool(self.unchanged)

    def read(self) -> None:
        writers: dict[str, StagedWriter] = {}
        self._clock = IngestClock(self.dataset, len(self.files))
        self.ingest.progress.update(self.progress())
        try:
            if self.files.num_rows:
                batches = run_documents(
                    self.files,
                    self.dataset,
                    self.ingest.embedding,
                    engine=self.ingest.engine,
                    actors=max(1, self.ingest.settings.num_cpus // 2),
                    sections=self.ingest.sections,
                    stream_bytes=self.ingest.settings.catalog_stream_bytes,
                )
                for batch in batches:
                    self._take(batch, writers)
                    self.ingest.progress.update(self.progress())
        finally:
            for writer in writers.values():
                writer.close()
        self._write_documents()

    def release_files(self) -> None:
        """Drop the per-file lists (the files read, their states) once the files table and the counts hold them.

        Called before the publish, whose vector index build is the ingest's memory peak; ``changed``,
        ``read_count`` and ``segment_count`` stay what they were.
        """
        self.files = self.files.schema.empty_table()  # a slice, even empty, would keep the columns' buffers
        self._states = []

    def progress(self, phase: str = "reading") -> IngestProgress:
        """Documents read of those to read, segments embedded, since ``read`` began."""
        return self._clock.progress(self.state_count, self.segment_count, phase)

    def states(self) -> pa.Table:
        """Every document's state (``STATES_SCHEMA``), read or skipped, in the order the pipeline gave them."""
        return pa.concat_tables(self._states) if self._states else STATES_SCHEMA.empty_table()

    def skipped(self) -> list[tuple[str, str]]:
        """(path, reason) of every document skipped."""
        states = self.states()
        skipped = states.filter(pc.equal(states.column("status"), "skipped"))
        reasons = [reason or "" for reason in skipped.column("reason").to_pylist()]
        return list(zip(skipped.column("path").to_pylist(), reasons, strict=True))

    def _take(self, batch: pa.Table, writers: dict[str, StagedWriter]) -> None:
        """Stage one pipeline batch: a document's state and row from its first part (the only one, unless it was
        read in parts: ``DocumentReader``), segments and snippets from every part."""
        # Filters run on the narrow columns: filtering the nested segments (with their vectors) cost tens of
        # milliseconds a batch, and a skipped document has no segments or snippets to filter out anyway.
        header = batch.select([*_STATE_COLUMNS, "format", "title", "chars", "text"])
        firsts = header.filter(pc.equal(batch.column("part"), 0))
        states = firsts.select(list(_STATE_COLUMNS)).rename_columns(STATES_SCHEMA.names).cast(STATES_SCHEMA)
        self._states.append(states)
        self.state_count += states.num_rows
        first_read = firsts.filter(pc.equal(firsts.column("status"), "read"))
        self.read_count += first_read.num_rows
        read_mask = pc.equal(batch.column("status"), "read")
        read = batch.select(["document_id", "segments", "snippets"])
        read_rows = pc.sum(read_mask).as_py() or 0
        if not read_rows:
            return
        if read_rows < batch.num_rows:
            read = read.filter(read_mask)
        if first_read.num_rows:
            documents = pa.table(
                {
                    "document_id": first_read.column("document_id"),
                    "format": first_read.column("format"),
                    "encoding": first_read.column("encoding"),
                    "title": first_read.column("title"),
                    "chars": first_read.column("chars"),
                    "text": first_read.column("text"),
                },
                schema=DOCUMENT_COLUMNS,
            )
            _write(writers, "documents", self.staged_new, documents)
        segments = _flatten_nested(read, "segments")
        if segments.num_rows:
            vector_type = segments.schema.field("vector").type
            self.dimension = vector_type.list_size
            schema = segments_schema(self.dimension)
            segments = segments.append_column("dataset", pa.array([self.dataset] * segments.num_rows, pa.string()))
            segments = segments.append_column("topic", pa.nulls(segments.num_rows, pa.string()))
            _write(writers, "segments", self.staged_segments, segments.select(schema.names).cast(schema))
            self.segment_count += segments.num_rows
        snippets = _flatten_nested(read, "snippets")
        if snippets.num_rows:
            snippets = snippets.append_column("dataset", pa.array([self.dataset] * snippets.num_rows, pa.string()))
            _write(
                writers, "snippets", self.staged_snippets, snippets.select(SNIPPETS_SCHEMA.names).cast(SNIPPETS_SCHEMA)
            )
            self.snippet_count += snippets.num_rows

    def _write_documents(self) -> None:
        """All documents of the dataset: the unchanged ones from the last version's parquet, then the new ones."""
        writer = pq.ParquetWriter(self.staged_parquet, DOCUMENT_COLUMNS)
        hashes: dict[str, str] = {}
        try:
            if self.previous_parquet is not None and self.previous_parquet.is_file() and self.unchanged:
                keep = pa.array(sorted(self.unchanged))
                for batch in staged_file(self.previous_parquet).iter_batches(batch_size=1024):
                    table = pa.Table.from_batches([batch])
                    kept = table.filter(pc.is_in(table.column("document_id"), value_set=keep))
                    if kept.num_rows:
                        writer.write_table(kept.cast(DOCUMENT_COLUMNS))
            if self.staged_new.is_file():
                for batch in staged_file(self.staged_new).iter_batches(batch_size=1024):
                    writer.write_table(pa.Table.from_batches([batch]).cast(DOCUMENT_COLUMNS))
        finally:
            writer.close()
        for path, row in self.ingest.previous.items():
            if path in self.unchanged:
                hashes[path] = row["content_hash"]
        states = self.states()
        read = states.filter(pc.equal(states.column("status"), "read"))
        hashes.update(zip(read.column("path").to_pylist(), read.column("content_hash").to_pylist(), strict=True))
        self.content_hash = combined_hash(hashes)
        self.final_parquet = (
            self.ingest.settings.catalog_path / "documents" / f"{self.dataset}-{self.content_hash[:16]}.parquet"
        )

    def profile(self) -> TableProfile:
        """The profile of the staged documents, computed once (the summary request and the dataset row use it)."""
        if self._profile is None:
            file = staged_file(self.staged_parquet)
            self._profile = profile_batches(DOCUMENT_COLUMNS, file.iter_batches(batch_size=1024))
        return self._profile

    def dataset_row(self, description: Description) -> dict[str, Any]:
        profile = self.profile()
        schema = [{"name": column, "type": kind} for column, kind in profile.schema]
        return self.ingest._dataset_row(
            self.dataset,
            "documents",
            str(self.final_parquet),
            {},
            schema,
            "declared",
            profile,
            description,
            self.content_hash,
        )

    def changes(self) -> list[TableChange]:
        from_dataset = f"dataset = {quote_literal(self.dataset)}"
        if self.ingest.records.get(self.dataset) is None:
            where = from_dataset  # first ingest: clear whatever a dropped namesake left
        else:
            replaced = self.removed_ids.union(self.files.column("relative").to_pylist())
            where = f"{from_dataset} AND {in_list('document_id', replaced)}"
        return [
            TableChange(
                SEGMENTS, delete_where=where, rows=_read_staged(self.staged_segments), after_write=_index_segments
            ),
            TableChange(SNIPPETS, delete_where=where, rows=_read_staged(self.staged_snippets)),
        ]


def _index_segments(table: Any) -> None:
    from semray.catalog.search import create_segment_indexes

    create_segment_indexes(table)


STAGED_BATCH_ROWS = 4_096
"""Rows per batch a publish streams from the staged segments and snippets into the catalog's tables: the
publish holds one batch (of vectors) at a time, whatever the collection's size."""


def _read_staged(path: Path) -> pa.RecordBatchReader | None:
    """The staged rows at ``path`` as a stream of ``STAGED_BATCH_ROWS``-row batches (None: nothing staged).

    The reader is read once, by ``Catalog.publish`` adding it to the table.
    """
    if not path.is_file():
        return None
    staged = staged_file(path)
    return pa.RecordBatchReader.from_batches(staged.schema_arrow, staged.iter_batches(batch_size=STAGED_BATCH_ROWS))


def staged_file(path: Path) -> pq.ParquetFile:
    """A parquet file to stream once, batch by batch, in bounded memory.

    Without ``pre_buffer=False`` pyarrow caches every range it has read for as long as the file is
    open, so iterating over a staged file held all of it by the end (400k segments with their vectors:
    +660 MiB of Arrow memory, measured); without the cache the reader holds one row group.
    """
    return pq.ParquetFile(path, pre_buffer=False)


STAGED_ROW_GROUP_ROWS = 16_384
"""Rows gathered before a staged file gets a row group: one per pipeline batch (16 documents) made
thousands of tiny row groups, whose metadata the writer keeps until it closes."""


class StagedWriter:
    """A parquet file written in row groups of about ``STAGED_ROW_GROUP_ROWS`` rows from smaller tables."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        # No dictionary pages: the vectors and texts are nearly all distinct, so the writer's dictionary attempt
        # is work for nothing (a 16k-segment row group: 0.18 -> 0.12 CPU-s to write, no bigger).
        self._writer = pq.ParquetWriter(path, schema, use_dictionary=False)
        self._pending: list[pa.Table] = []
        self._rows = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._rows += table.num_rows
        if self._rows >= STAGED_ROW_GROUP_ROWS:
            self._flush()

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=max(self._rows, 1))
        self._pending, self._rows = [], 0


def _write(writers: dict[str, StagedWriter], key: str, path: Path, table: pa.Table) -> None:
    if key not in writers:
        writers[key] = StagedWriter(path, table.schema)
    writers[key].write(table)


def _flatten_nested(batch: pa.Table, column: str) -> pa.Table:
    """The list-of-struct column of every row as one flat table, with each item's ``document_id``."""
    nested = batch.column(column).combine_chunks()
    flat = pc.list_flatten(nested)
    parents = pc.list_parent_indices(nested)
    names = [flat.type.field(index).name for index in range(flat.type.num_fields)]
    columns = {name: flat.field(index) for index, name in enumerate(names)}
    columns["document_id"] = pc.take(batch.column("document_id"), parents)
    return pa.table(columns)
