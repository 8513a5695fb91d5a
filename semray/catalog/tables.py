"""The catalog's LanceDB tables: their names and Arrow schemas, shared by ingest, search and memory.

The catalog lives in one LanceDB folder (``Settings.catalog_path``, default
``<state_dir>/catalog``). An ingest stages its rows and publishes them into every table under
the catalog lock, then records the Lance version of each table in a numbered manifest
(``semray.catalog.store``); readers open the tables at a manifest's versions, so a query can pin
the catalog version it planned against and never sees a half-published ingest.

- ``datasets``: one row per registered dataset (a file, a table of a database, or the
  documents of a folder), with its profile and a vector of it for dataset search.
- ``columns``: per-column statistics of every dataset.
- ``files``: every file an ingest looked at, with its content hash and whether it was read;
  a re-ingest reads only files whose hash changed.
- ``segments``: the hierarchy of every catalogued document (document -> section ->
  paragraph -> chunk), each with its path, source span, vector and text (FTS-indexed).
- ``snippets``: tabular snippets found inside documents, linked to their segment.
- ``organizations``: the topic hierarchy of a documents dataset, how its documents were
  labelled and the classifier's agreement with the model (``organize.py``).
- ``memory``: the planner's long-term memory.

>>> segments_schema(384).field("vector").type
FixedSizeListType(fixed_size_list<item: float>[384])
>>> datasets_schema(384).field("vector").type.list_size
384
"""

from __future__ import annotations

import pyarrow as pa

from semray.operators.catalogued import SEGMENT_LEVELS as SEGMENT_LEVELS  # the hierarchy's one home, re-exported

DATASETS = "datasets"
COLUMNS = "columns"
FILES = "files"
SEGMENTS = "segments"
SNIPPETS = "snippets"
ORGANIZATIONS = "organizations"
MEMORY = "memory"


def datasets_schema(dimension: int) -> pa.Schema:
    """Datasets with a profile vector of ``dimension`` floats (the embedding tier's), for dataset search."""
    return pa.schema(
        [
            pa.field("name", pa.string(), nullable=False),
            pa.field("server", pa.string(), nullable=False),  # the registered data server it came from
            pa.field("server_kind", pa.string(), nullable=False),  # folder | sqlite | duckdb | postgres
            pa.field("server_uri", pa.string(), nullable=False),  # what `catalog add` was given, resolved
            pa.field("kind", pa.string(), nullable=False),  # a source kind (csv, parquet, sqlite, ...) or "documents"
            pa.field("uri", pa.string(), nullable=False),
            pa.field("source_options", pa.string()),  # JSON object: the reader options that open it (table=...)
            pa.field("schema_json", pa.string(), nullable=False),  # JSON list of {"name", "type"}
            pa.field("schema_status", pa.string(), nullable=False),  # "declared" | "inferred: ..." (how, checked how)
            pa.field("row_count", pa.int64()),
            pa.field("stats_rows", pa.int64()),  # rows the column statistics were computed over (a sample when less)
            pa.field("sample_json", pa.string()),  # JSON list of up to 5 rows
            pa.field("summary", pa.string()),
            pa.field("summary_status", pa.string(), nullable=False),  # "summarised by <tier>" | "not summarised: ..."
            pa.field("profile_text", pa.string(), nullable=False),  # name, summary, columns: what dataset search reads
            pa.field("content_hash", pa.string(), nullable=False),
            pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dimension), nullable=False),  # of profile_text, unit length
        ]
    )


COLUMNS_SCHEMA = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("column", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),  # DuckDB type name, as in plan schemas
        pa.field("nulls", pa.int64(), nullable=False),
        pa.field("distinct_estimate", pa.int64()),
        pa.field("min", pa.string()),  # rendered as text, whatever the type
        pa.field("max", pa.string()),
        pa.field("top_values_json", pa.string()),  # JSON list of [value, count], most frequent first
        pa.field("length_p50", pa.float64()),  # text columns: character lengths
        pa.field("length_p95", pa.float64()),
        pa.field("length_max", pa.int64()),
    ]
)

FILES_SCHEMA = pa.schema(
    [
        pa.field("server", pa.string(), nullable=False),  # the data server the file belongs to
        pa.field("dataset", pa.string(), nullable=False),  # its dataset (the server's name for files of none)
        pa.field("path", pa.string(), nullable=False),  # relative to the server's folder
        pa.field("content_hash", pa.string(), nullable=False),  # sha256 of the bytes
        pa.field("size", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # "read" | "skipped"
        pa.field("reason", pa.string()),  # why it was skipped (unreadable, undecodable, unsupported, ...)
        pa.field("encoding", pa.string()),  # the encoding it was decoded with
    ]
)


def segments_schema(dimension: int) -> pa.Schema:
    """Segments with vectors of ``dimension`` floats (the embedding tier's)."""
    return pa.schema(
        [
            pa.field("segment_id", pa.string(), nullable=False),  # stable: hash of dataset, document, path
            pa.field("dataset", pa.string(), nullable=False),
            pa.field("document_id", pa.string(), nullable=False),  # the file's path within the dataset
            pa.field("parent_id", pa.string()),  # None for a document
            pa.field("level", pa.string(), nullable=False),  # one of SEGMENT_LEVELS
            pa.field("path", pa.list_(pa.string()), nullable=False),  # headings from the document down
            pa.field("ordinal", pa.int32(), nullable=False),  # position among its siblings
            pa.field("text", pa.string(), nullable=False),
            pa.field("start", pa.int64(), nullable=False),  # character span in the document's text
            pa.field("end", pa.int64(), nullable=False),
            pa.field("topic", pa.string()),  # a label of the semantic organization, when assigned
            pa.field("vector", pa.list_(pa.float32(), dimension), nullable=False),  # unit length
        ]
    )


SNIPPETS_SCHEMA = pa.schema(
    [
        pa.field("snippet_id", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("document_id", pa.string(), nullable=False),
        pa.field("segment_id", pa.string(), nullable=False),  # the segment the snippet sits in
        pa.field("kind", pa.string(), nullable=False),  # "markdown_table" | "html_table" | "enumeration"
        pa.field("columns_json", pa.string(), nullable=False),  # JSON list of column names
        pa.field("rows_json", pa.string(), nullable=False),  # JSON list of lists of cell texts
    ]
)


ORGANIZATIONS_SCHEMA = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("hierarchy_json", pa.string(), nullable=False),  # JSON list of {"name", "description", "subtopics"}
        pa.field("topic_counts_json", pa.string(), nullable=False),  # JSON object: topic path -> documents
        pa.field("labelled_by", pa.string(), nullable=False),  # "the small tier (model)" or "recorded replies"
        pa.field("prompt_version", pa.string(), nullable=False),
        pa.field("sample_documents", pa.int64(), nullable=False),  # documents the model was asked to label
        pa.field("labelled_documents", pa.int64(), nullable=False),  # of those, labels that parsed
        pa.field("held_out_documents", pa.int64(), nullable=False),  # labelled documents kept from training
        pa.field("agreement", pa.float64()),  # classifier vs model on the held-out documents
        pa.field("classifier", pa.string(), nullable=False),
        pa.field("documents", pa.int64(), nullable=False),  # documents assigned a topic
        pa.field("content_hash", pa.string(), nullable=False),  # the dataset's at organization time
        pa.field("organized_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def memory_schema(dimension: int) -> pa.Schema:
    """The planner's memory: what it learnt about a task, retrievable by similarity."""
    return pa.schema(
        [
            pa.field("memory_id", pa.string(), nullable=False),
            pa.field("task", pa.string(), nullable=False),
            pa.field("task_vector", pa.list_(pa.float32(), dimension), nullable=False),
            pa.field("memory", pa.string(), nullable=False),
            pa.field("category", pa.string(), nullable=False),  # e.g. "dataset", "plan", "failure", "domain"
            pa.field("created", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("expires", pa.timestamp("us", tz="UTC")),
            pa.field("hits", pa.int64(), nullable=False),
            pa.field("source_run", pa.string()),
        ]
    )
