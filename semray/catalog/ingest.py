"""Ingest a data server into the catalog: hash, profile, read + segment + embed documents, publish.

One ingest (``add_server`` or ``refresh``) compares every file's sha256 with the ``files`` table,
profiles only the tables whose files changed, reads, segments and embeds only the documents that
changed (``document_pipeline.run_documents``: Ray Data actor pools by default, ``engine="local"``
runs the same functions in process), writes the new rows to a staging folder and publishes them as
one catalog version (``Catalog.publish``). A file that cannot be read is skipped with its reason
(``files`` table, the report's ``skipped``); a server with nothing readable is an error naming
what was found. Nothing is visible until the publish, and a failed ingest leaves the catalog as it
was.

>>> report = add_server(Settings(state_dir=Path("/tmp/s")), "data/shop")  # doctest: +SKIP
>>> (report.files.new, report.datasets)  # doctest: +SKIP
(4, ('shop', 'shop_orders'))
"""

from __future__ import annotations

import datetime
import json
import shutil
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.catalog.document_ingest import DocumentsIngest
from semray.catalog.document_pipeline import Engine, embed_texts
from semray.catalog.ingest_progress import IngestLogReporter, IngestProgress, IngestReporter
from semray.catalog.native_memory import large_blocks_returned
from semray.catalog.profiling import TableProfile
from semray.catalog.section_writer import SectionWriter
from semray.catalog.servers import DataServer, ServerProfile, dataset_name, normalise_name, open_server
from semray.catalog.servers.base import FileState, ProfiledTable
from semray.catalog.servers.postgres import PostgresServer
from semray.catalog.store import Catalog, ChangeSet, TableChange, in_list
from semray.catalog.summaries import Description, SummaryRequest, check_proposed_schema, describe_datasets
from semray.catalog.tables import (
    COLUMNS,
    COLUMNS_SCHEMA,
    DATASETS,
    FILES,
    FILES_SCHEMA,
    ORGANIZATIONS,
    SEGMENTS,
    SNIPPETS,
    datasets_schema,
)
from semray.errors import CatalogError
from semray.log import get_logger
from semray.serving.config import TierConfig
from semray.serving.profiles import resolve_serving
from semray.settings import Settings
from semray.sql_quoting import quote_literal

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class FileCounts:
    """Files of the server compared with the last ingest."""

    unchanged: int = 0
    changed: int = 0
    new: int = 0
    removed: int = 0


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one ingest did; ``version`` is the catalog version it published."""

    server: str
    version: int
    datasets: tuple[str, ...]
    """Datasets (re)profiled by this ingest."""
    unchanged_datasets: tuple[str, ...]
    removed_datasets: tuple[str, ...]
    files: FileCounts
    skipped: tuple[tuple[str, str], ...]
    """(path, reason) of every file skipped this time."""
    documents_read: int = 0
    segments: int = 0
    snippets: int = 0
    summary_statuses: Mapping[str, str] = field(default_factory=dict)


def add_server(
    settings: Settings,
    target: str,
    *,
    name: str | None = None,
    engine: Engine = "ray",
    sections: SectionWriter | None = None,
    progress: IngestReporter | None = None,
) -> IngestReport:
    """Register a data server (a folder, a file, a SQLite/DuckDB file, a postgres URI) and ingest it.

    ``sections``: the model pass for documents without headings (``section_writer.py``); None: their
    structure only. ``progress``: what shows the ingest's progress (``ingest_progress.py``); None:
    ``catalog_ingest_progress`` log lines every ``Settings.progress_interval_s``.
    """
    server = open_server(target)
    catalog = Catalog.open(settings)
    servers = catalog.servers()
    server_name = normalise_name(name) if name else _default_name(server)
    for existing, (_kind, uri) in servers.items():
        if uri == server.uri:
            raise CatalogError(
                f"{target!r} is already catalogued as {existing!r}; `semray catalog refresh {existing}` re-reads "
                "what changed"
            )
    if server_name in servers:
        raise CatalogError(
            f"a data server named {server_name!r} is already catalogued (from {servers[server_name][1]}); choose "
            f"another name with --name, e.g. --name {_free_name(server_name, servers)}"
        )
    return ingest(settings, catalog, server, server_name, engine=engine, sections=sections, progress=progress)


def refresh(
    settings: Settings,
    name: str | None = None,
    *,
    engine: Engine = "ray",
    sections: SectionWriter | None = None,
    progress: IngestReporter | None = None,
) -> list[IngestReport]:
    """Re-ingest what changed in one data server (by its name or one of its datasets'), or in all of them.

    ``sections`` applies to the documents read again (changed or new), not to unchanged ones; ``progress``:
    see ``add_server``."""
    catalog = Catalog.open(settings)
    servers = catalog.servers()
    if name is None:
        chosen = sorted(servers)
    elif name in servers:
        chosen = [name]
    else:
        chosen = [catalog.dataset(name).server]
    reports = []
    for server_name in chosen:
        kind, uri = servers[server_name]
        if not kind:
            raise CatalogError(f"data server {server_name!r} has no datasets left; drop it and add it again")
        server = open_server(uri, kind)
        reports.append(
            ingest(
                settings,
                Catalog.open(settings),
                server,
                server_name,
                engine=engine,
                sections=sections,
                progress=progress,
            )
        )
    return reports


def drop(settings: Settings, name: str) -> tuple[int, tuple[str, ...]]:
    """Remove a dataset, or every dataset of a data server; returns the new catalog version and what went."""
    catalog = Catalog.open(settings)
    servers = catalog.servers()
    if name in servers:
        names = tuple(record.name for record in catalog.datasets() if record.server == name)
        where_files = f"server = {quote_literal(name)}"
    else:
        names = (catalog.dataset(name).name,)
        where_files = f"dataset = {quote_literal(name)}"
    changes = [
        TableChange(DATASETS, delete_where=in_list("name", names)),
        TableChange(COLUMNS, delete_where=in_list("dataset", names)),
        TableChange(FILES, delete_where=where_files),
        TableChange(SEGMENTS, delete_where=in_list("dataset", names)),
        TableChange(SNIPPETS, delete_where=in_list("dataset", names)),
        TableChange(ORGANIZATIONS, delete_where=in_list("dataset", names)),
    ]
    version = catalog.publish(ChangeSet(catalog.version(), f"drop {name}", tuple(changes)))
    return version, names


def ingest(
    settings: Settings,
    catalog: Catalog,
    server: DataServer,
    server_name: str,
    *,
    engine: Engine,
    sections: SectionWriter | None = None,
    progress: IngestReporter | None = None,
) -> IngestReport:
    """Profile and read what changed in ``server`` since the catalog's files say, and publish it."""
    staging = settings.catalog_path / "_staging" / uuid.uuid4().hex
    staging.mkdir(parents=True)
    reporter = progress if progress is not None else IngestLogReporter(settings.progress_interval_s)
    try:
        return _Ingest(settings, catalog, server, server_name, engine, staging, sections, reporter).run()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _Ingest:
    """One ingest's state, from the server's profile to the change set."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        server: DataServer,
        name: str,
        engine: Engine,
        staging: Path,
        sections: SectionWriter | None = None,
        progress: IngestReporter | None = None,
    ) -> None:
        self.settings = settings
        self.sections = sections
        self.progress: IngestReporter = progress if progress is not None else IngestLogReporter(0.0)
        self._last_progress = IngestProgress(name)
        self.catalog = catalog
        self.server = server
        self.name = name
        self.engine = engine
        self.staging = staging
        self.serving = resolve_serving(settings.models)
        self.embedding = _embedding_tier(self.serving.embedding)
        self.previous = {row["path"]: row for row in catalog.server_files(name)}
        self.records = {record.name: record for record in catalog.datasets() if record.server == name}

    def run(self) -> IngestReport:
        try:
            return self._run()
        finally:
            self.progress.close(self._last_progress)

    def _run(self) -> IngestReport:
        previous_read = {path: row["content_hash"] for path, row in self.previous.items() if row["status"] == "read"}
        profile = self.server.profile(previous_read)
        self._check_names(profile)
        if self.engine == "ray":
            from semray.cluster.connect import connect

            connect(self.settings)
        documents = DocumentsIngest(self, profile) if profile.has_documents else None
        profile = replace(profile, documents=())  # the DocumentsIngest holds them as Arrow columns
        if documents is not None:
            documents.read()
            self._last_progress = documents.progress("publishing")
            self.progress.update(self._last_progress)
        readable = bool(profile.tables or profile.unchanged_tables or (documents and documents.any_read))
        if not readable:
            raise CatalogError(_nothing_readable(self.server.uri, profile, documents))
        tables = {dataset_name(self.name, table.suffix): table for table in profile.tables}
        to_describe = [
            SummaryRequest(name, table.kind, table.profile, table.schema_status, table.sample_lines)
            for name, table in tables.items()
        ]
        publishes_documents = documents is not None and documents.publishes
        if documents is not None and documents.publishes:
            to_describe.append(SummaryRequest(self.name, "documents", documents.profile()))
        descriptions = dict(
            zip([request.name for request in to_describe], describe_datasets(self.serving, to_describe), strict=True)
        )
        rows = [self._table_row(name, table, descriptions[name]) for name, table in tables.items()]
        if documents is not None and documents.publishes:
            rows.append(documents.dataset_row(descriptions[self.name]))
        present = set(tables) | {dataset_name(self.name, suffix) for suffix in profile.unchanged_tables}
        if documents is not None and documents.any_read:
            present.add(self.name)
        removed = tuple(sorted(set(self.records) - present))
        changed = tuple(sorted(tables) + ([self.name] if publishes_documents else []))
        files = self._files_table(profile, documents)
        change_set = self._change_set(rows, tables, documents, changed, removed, files)
        skipped_rows = files.filter(pc.equal(files.column("status"), "skipped"))
        reasons = (reason or "" for reason in skipped_rows.column("reason").to_pylist())
        skipped = tuple(zip(skipped_rows.column("path").to_pylist(), reasons, strict=True))
        counts = self._counts(files)
        # The publish builds the vector index, the ingest's memory peak: the documents' states are in the change
        # set's files table by now, so they go first rather than add to that peak in proportion to the files
        # (docs/catalog.md, Memory; the DocumentFiles went before the reading).
        del files, profile
        if documents is not None:
            documents.release_files()
        with large_blocks_returned(self.settings.catalog_mmap_threshold):
            version = self.catalog.publish(change_set)
        report = IngestReport(
            server=self.name,
            version=version,
            datasets=changed,
            unchanged_datasets=tuple(sorted(present - set(changed))),
            removed_datasets=removed,
            files=counts,
            skipped=skipped,
            documents_read=documents.read_count if documents else 0,
            segments=documents.segment_count if documents else 0,
            snippets=documents.snippet_count if documents else 0,
            summary_statuses={row["name"]: row["summary_status"] for row in rows},
        )
        log.info("catalog_ingested", server=self.name, version=version, datasets=len(changed), skipped=len(skipped))
        return report

    def _check_names(self, profile: ServerProfile) -> None:
        wanted = {dataset_name(self.name, table.suffix) for table in profile.tables}
        wanted |= {dataset_name(self.name, suffix) for suffix in profile.unchanged_tables}
        if profile.has_documents:
            wanted.add(self.name)
        taken = {record.name: record.server for record in self.catalog.datasets() if record.server != self.name}
        for name in sorted(wanted & set(taken)):
            free = _free_name(self.name, {*taken, *self.catalog.servers()})
            raise CatalogError(
                f"dataset name {name!r} is taken by data server {taken[name]!r}; add this one under another name "
                f"with --name, e.g. --name {free}"
            )

    def _table_row(self, name: str, table: ProfiledTable, description: Description) -> dict[str, Any]:
        schema = [{"name": column, "type": kind} for column, kind in table.profile.schema]
        status = table.schema_status
        if description.proposed_schema is not None and table.sample_lines:
            status, schema = self._checked_proposal(table, description, schema)
        return self._dataset_row(
            name, table.kind, table.uri, table.options, schema, status, table.profile, description, table.content_hash
        )

    def _checked_proposal(
        self, table: ProfiledTable, description: Description, schema: list[dict[str, Any]]
    ) -> tuple[str, list[dict[str, Any]]]:
        from semray.catalog.profiling import source_batches
        from semray.sources import open_source

        sample = next(iter(source_batches(open_source(table.kind, table.uri, table.options), 1000)), None)
        proposal = description.proposed_schema or ()
        problems = check_proposed_schema(sample, proposal) if sample is not None else ["no rows to check against"]
        if problems:
            return f"{table.schema_status}; a proposed schema was refused: {'; '.join(problems)}", schema
        checked = [
            {**column, "proposed_name": name, "proposed_type": kind}
            for column, (name, kind) in zip(schema, proposal, strict=True)
        ]
        rows = sample.num_rows if sample is not None else 0
        return f"{table.schema_status}; names and types proposed by the model, checked on {rows} rows", checked

    def _dataset_row(
        self,
        name: str,
        kind: str,
        uri: str,
        options: Mapping[str, Any],
        schema: list[dict[str, Any]],
        schema_status: str,
        profile: TableProfile,
        description: Description,
        content_hash: str,
    ) -> dict[str, Any]:
        return {
            "name": name,
            "server": self.name,
            "server_kind": self.server.kind,
            "server_uri": self.server.uri,
            "kind": kind,
            "uri": uri,
            "source_options": json.dumps(dict(options)),
            "schema_json": json.dumps(schema),
            "schema_status": schema_status,
            "row_count": profile.row_count,
            "stats_rows": profile.stats_rows,
            "sample_json": profile.sample_json(),
            "summary": description.summary,
            "summary_status": description.summary_status,
            "profile_text": profile_text(name, kind, profile, description.summary),
            "content_hash": content_hash,
            "ingested_at": datetime.datetime.now(datetime.UTC),
            "_profile": profile,
        }

    def _files_table(self, profile: ServerProfile, documents: DocumentsIngest | None) -> pa.Table:
        """The server's rows of the ``files`` table (``FILES_SCHEMA``), sorted by path: the unchanged files' rows
        of the last version, then the files profiled and the documents read, the later winning for one path.

        The documents' states stay Arrow columns (``DocumentsIngest.states``): no Python object per document.
        """
        rows: dict[str, dict[str, Any]] = {}
        unchanged_tables = {dataset_name(self.name, suffix) for suffix in profile.unchanged_tables}
        for path, row in self.previous.items():
            if row["dataset"] in unchanged_tables or (
                documents is not None and path in documents.unchanged and row["dataset"] == self.name
            ):
                rows[path] = dict(row)
        for state in profile.files:
            rows[state.relative] = self._file_row(state)
        listed = pa.Table.from_pylist(list(rows.values()), schema=FILES_SCHEMA)
        if documents is not None and documents.state_count:
            states = documents.states()
            listed = listed.filter(pc.invert(pc.is_in(listed.column("path"), value_set=states.column("path"))))
            count = states.num_rows
            states = states.append_column("server", pa.array([self.name] * count, pa.string()))
            states = states.append_column("dataset", pa.array([self.name] * count, pa.string()))
            listed = pa.concat_tables([listed, states.select(FILES_SCHEMA.names).cast(FILES_SCHEMA)])
        return listed.sort_by("path")

    def _file_row(self, state: FileState) -> dict[str, Any]:
        suffix = state.dataset_suffix
        return {
            "server": self.name,
            "dataset": dataset_name(self.name, suffix) if suffix else self.name,
            "path": state.relative,
            "content_hash": state.content_hash,
            "size": state.size,
            "status": state.status,
            "reason": state.reason,
            "encoding": state.encoding,
        }

    def _counts(self, files: pa.Table) -> FileCounts:
        now = dict(zip(files.column("path").to_pylist(), files.column("content_hash").to_pylist(), strict=True))
        before = {path: row["content_hash"] for path, row in self.previous.items()}
        counts = Counter(
            "unchanged" if before.get(path) == digest else "changed" if path in before else "new"
            for path, digest in now.items()
        )
        return FileCounts(counts["unchanged"], counts["changed"], counts["new"], len(set(before) - set(now)))

    def _change_set(
        self,
        rows: list[dict[str, Any]],
        tables: Mapping[str, ProfiledTable],
        documents: DocumentsIngest | None,
        changed: Sequence[str],
        removed: Sequence[str],
        files: pa.Table,
    ) -> ChangeSet:
        replaced = [*changed, *removed]
        vectors = (
            embed_texts([row["profile_text"] for row in rows], self.embedding, engine=self.engine) if rows else None
        )
        changes = [
            TableChange(
                DATASETS,
                delete_where=in_list("name", replaced),
                rows=_datasets_table(rows, vectors) if rows else None,
                after_write=_index_datasets,
            ),
            TableChange(
                COLUMNS, delete_where=in_list("dataset", replaced), rows=_columns_table(rows) if rows else None
            ),
            TableChange(
                FILES,
                delete_where=f"server = {quote_literal(self.name)}",
                rows=files if files.num_rows else None,
            ),
        ]
        files_to_place: dict[Path, Path] = {}
        gone_documents = [name for name in removed if name == self.name]
        if documents is not None and documents.publishes:
            changes += documents.changes()
            files_to_place[documents.staged_parquet] = documents.final_parquet
        elif gone_documents:
            changes += [
                TableChange(SEGMENTS, delete_where=f"dataset = {quote_literal(self.name)}"),
                TableChange(SNIPPETS, delete_where=f"dataset = {quote_literal(self.name)}"),
            ]
        return ChangeSet(
            base_version=self.catalog.version(),
            action=f"ingest {self.name}",
            changes=tuple(changes),
            files_to_place=files_to_place,
        )


def profile_text(name: str, kind: str, profile: TableProfile, summary: str | None) -> str:
    """What dataset search matches: name, summary, columns with their top values."""
    parts = [f"{name} ({kind}, {profile.row_count} rows)."]
    if summary:
        parts.append(summary)
    for column in profile.columns:
        values = ", ".join(value[:40] for value, _ in column.top_values[:3])
        parts.append(f"{column.column} {column.type}" + (f": {values}" if values else ""))
    return "\n".join(parts)


def _index_datasets(table: Any) -> None:
    from semray.catalog.catalog_search import index_datasets

    if table.count_rows():
        index_datasets(table)


def _datasets_table(rows: list[dict[str, Any]], vectors: np.ndarray | None) -> pa.Table:
    assert vectors is not None
    schema = datasets_schema(int(vectors.shape[1]))
    values = [{key: value for key, value in row.items() if not key.startswith("_")} for row in rows]
    table = pa.Table.from_pylist(values, schema=datasets_schema(int(vectors.shape[1])).remove(len(schema) - 1))
    flat = pa.array(vectors.astype(np.float32).reshape(-1), pa.float32())
    return table.append_column(schema.field("vector"), pa.FixedSizeListArray.from_arrays(flat, int(vectors.shape[1])))


def _columns_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    records = []
    for row in rows:
        profile: TableProfile = row["_profile"]
        for column in profile.columns:
            records.append(
                {
                    "dataset": row["name"],
                    "column": column.column,
                    "type": column.type,
                    "nulls": column.nulls,
                    "distinct_estimate": column.distinct_estimate,
                    "min": column.min,
                    "max": column.max,
                    "top_values_json": json.dumps([list(pair) for pair in column.top_values], ensure_ascii=False),
                    "length_p50": column.length_p50,
                    "length_p95": column.length_p95,
                    "length_max": column.length_max,
                }
            )
    return pa.Table.from_pylist(records, schema=COLUMNS_SCHEMA)


def _embedding_tier(config: TierConfig) -> TierConfig:
    if config.backend != "sentence_transformers":
        raise CatalogError(
            f"the catalog embeds with a sentence_transformers embedding tier; the profile's is {config.backend!r}. "
            'Set [embedding] backend = "sentence_transformers" in the model profile'
        )
    return config


def _default_name(server: DataServer) -> str:
    if isinstance(server, PostgresServer):
        return normalise_name(server.database)
    return normalise_name(Path(server.uri).stem if Path(server.uri).is_file() else Path(server.uri).name)


def _free_name(name: str, taken: Iterable[str]) -> str:
    used = set(taken)
    number = 2
    while f"{name}_{number}" in used:
        number += 1
    return f"{name}_{number}"


def _nothing_readable(uri: str, profile: ServerProfile, documents: DocumentsIngest | None) -> str:
    found = ", ".join(f"{count} {kind}" for kind, count in sorted(profile.found.items())) or "no files"
    skipped = [(state.relative, state.reason) for state in profile.files if state.status == "skipped"]
    reasons = [f"{path}: {reason}" for path, reason in [*skipped, *(documents.skipped() if documents else ())]]
    shown = "; ".join(reasons[:5]) + (f"; and {len(reasons) - 5} more" if len(reasons) > 5 else "")
    return (
        f"nothing readable in {uri!r} (found {found}){': ' + shown if shown else ''}. The catalog reads csv, tsv, "
        "json, jsonl, parquet, txt, md, html and pdf files, and SQLite/DuckDB databases"
    )
