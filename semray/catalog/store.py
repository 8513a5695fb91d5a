"""The catalog store: LanceDB tables read at one catalog version, changed only by publishing.

Layout under ``Settings.catalog_path``:

    datasets.lance, columns.lance, files.lance, snippets.lance   LanceDB tables
    segments.lance, segments_1.lance ...   the segments, sharded (``shards.py``)
    _manifests/v00000007.json   catalog version 7: the Lance version of every table at that version
    documents/<dataset>-<hash>.parquet   the text of a documents dataset (what its Scan reads)
    catalog.lock                held (flock) while publishing
    _staging/<ingest>/          what an ingest wrote before publishing; removed after

LanceDB has no transaction over several tables, so the numbered manifest is the commit point:
``publish`` applies every table change under the catalog lock, then writes the next manifest
atomically (``write_bytes_atomically``). Readers open each table at the version the manifest
names, so a publish that fails or is killed half way changes nothing a reader sees; the next
publish first restores any table whose latest Lance version is not its manifest's (the orphan
writes of the failed one). Publishing is optimistic like run outputs: an ingest remembers the
catalog version it compared against and its publish fails with ``CatalogError`` when another one
published in between (first committer wins).

>>> catalog = Catalog.open(Settings(state_dir=Path("/tmp/s")))  # doctest: +SKIP
>>> [dataset.name for dataset in catalog.datasets()]  # doctest: +SKIP
['enron', 'medical_patients']
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.catalog.shards import RowStream, Shards, shard_name, shard_names, shard_number
from semray.catalog.tables import COLUMNS, DATASETS, FILES, ORGANIZATIONS, SEGMENTS, SNIPPETS
from semray.errors import CatalogError, suggest
from semray.log import get_logger
from semray.operators import SourceSpec
from semray.operators.relational import CatalogPin
from semray.settings import Settings
from semray.sql_quoting import quote_literal
from semray.transactions.durability import exclusive_lock, make_directory_durably, write_bytes_atomically

log = get_logger(__name__)

TABLES = (DATASETS, COLUMNS, FILES, SEGMENTS, SNIPPETS, ORGANIZATIONS)
"""The tables published through manifests (``organizations`` by ``organize.py``; ``memory`` is the memory
store's own)."""
SHARDED = (SEGMENTS,)
"""The tables stored as shards of at most ``Settings.catalog_shard_rows`` rows (``shards.py``)."""
MANIFESTS = "_manifests"
LOCK_WAIT_S = 120.0
_MANIFEST = re.compile(r"^v(\d{8})\.json$")


@dataclass(frozen=True, slots=True)
class Manifest:
    """One catalog version: the Lance version of every table that exists at it."""

    version: int
    tables: Mapping[str, int]
    published_at: str = ""
    action: str = ""


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    """A row of the ``datasets`` table, without its vector."""

    name: str
    server: str
    server_kind: str
    server_uri: str
    kind: str
    uri: str
    source_options: dict[str, Any]
    schema: tuple[dict[str, Any], ...]
    schema_status: str
    row_count: int | None
    stats_rows: int | None
    samples: tuple[dict[str, Any], ...]
    summary: str | None
    summary_status: str
    profile_text: str
    content_hash: str
    ingested_at: datetime.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DatasetRecord:
        return cls(
            name=row["name"],
            server=row["server"],
            server_kind=row["server_kind"],
            server_uri=row["server_uri"],
            kind=row["kind"],
            uri=row["uri"],
            source_options=json.loads(row["source_options"] or "{}"),
            schema=tuple(json.loads(row["schema_json"])),
            schema_status=row["schema_status"],
            row_count=row["row_count"],
            stats_rows=row["stats_rows"],
            samples=tuple(json.loads(row["sample_json"] or "[]")),
            summary=row["summary"],
            summary_status=row["summary_status"],
            profile_text=row["profile_text"],
            content_hash=row["content_hash"],
            ingested_at=row["ingested_at"],
        )


@dataclass(frozen=True, slots=True)
class TableChange:
    """Delete the rows matching ``delete_where`` (a Lance SQL filter), then add ``rows``."""

    table: str
    delete_where: str | None = None
    rows: pa.Table | pa.RecordBatchReader | None = None
    after_write: Callable[[Any], None] | None = None
    """Called with the table once written (e.g. to build its indexes), before the manifest."""


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What one ingest or drop publishes, computed against catalog version ``base_version``."""

    base_version: int
    action: str
    changes: tuple[TableChange, ...] = ()
    files_to_place: Mapping[Path, Path] = field(default_factory=dict)
    """Staged files (documents parquet) moved into the catalog folder before the manifest is written."""


class Catalog:
    """The catalog at one version; ``Catalog.open(settings)`` opens the latest."""

    def __init__(
        self, path: Path, manifest: Manifest, pinned: bool, publish_rows: int = 4_096, shard_rows: int = 100_000
    ) -> None:
        import lancedb

        self.path = path
        self.manifest = manifest
        self.pinned = pinned
        self.publish_rows = publish_rows
        """The most rows of one batch a publish hands LanceDB (``Settings.catalog_publish_rows``)."""
        self.shard_rows = shard_rows
        """The most rows a publish puts in one shard of a ``SHARDED`` table (``Settings.catalog_shard_rows``)."""
        self._db = lancedb.connect(str(path))
        self._tables: dict[str, Any] = {}

    @classmethod
    def open(cls, settings: Settings, version: int | None = None) -> Catalog:
        """The catalog of ``settings`` at its latest version, or at ``version`` (``semray catalog ls --version``)."""
        path = settings.catalog_path
        make_directory_durably(path / MANIFESTS)
        sizes = {"publish_rows": settings.catalog_publish_rows, "shard_rows": settings.catalog_shard_rows}
        if version is None:
            return cls(path, latest_manifest(path), pinned=False, **sizes)
        return cls(path, read_manifest(path, version), pinned=True, **sizes)

    # reading -----------------------------------------------------------------------------

    def version(self) -> int:
        """This catalog's version: 0 before anything was published."""
        return self.manifest.version

    def versions(self) -> list[Manifest]:
        return [read_manifest(self.path, number) for number in manifest_numbers(self.path)]

    def table(self, name: str) -> Any | None:
        """The LanceDB table at this catalog version (read-only), or None when it has no such table yet; the
        ``Shards`` of a ``SHARDED`` table."""
        if name in SHARDED:
            names = shard_names(self.manifest.tables, name)
            return Shards(name, tuple(self._table_at(shard) for shard in names)) if names else None
        return self._table_at(name) if name in self.manifest.tables else None

    def _table_at(self, name: str) -> Any:
        if name not in self._tables:
            table = self._db.open_table(name)
            table.checkout(self.manifest.tables[name])
            self._tables[name] = table
        return self._tables[name]

    def rows(self, name: str, where: str | None = None, columns: list[str] | None = None) -> pa.Table:
        """Rows of a table at this version (all, or those matching a Lance SQL filter)."""
        table = self.table(name)
        if table is None:
            return pa.table({})
        if isinstance(table, Shards):
            return table.query(where, columns)
        query = table.search().limit(None)
        if where is not None:
            query = query.where(where)
        if columns is not None:
            query = query.select(columns)
        result: pa.Table = query.to_arrow()
        return result

    def datasets(self) -> list[DatasetRecord]:
        rows = self.rows(DATASETS)
        if not rows.num_rows:
            return []
        records = [DatasetRecord.from_row(row) for row in rows.drop_columns(["vector"]).to_pylist()]
        return sorted(records, key=lambda record: record.name)

    def dataset(self, name: str) -> DatasetRecord:
        rows = self.rows(DATASETS, where=f"name = {quote_literal(name)}")
        if not rows.num_rows:
            raise self._unknown(name)
        return DatasetRecord.from_row(rows.drop_columns(["vector"]).to_pylist()[0])

    def columns(self, name: str) -> list[dict[str, Any]]:
        self.dataset(name)
        rows: list[dict[str, Any]] = self.rows(COLUMNS, where=f"dataset = {quote_literal(name)}").to_pylist()
        return rows

    def files(self, name: str) -> list[dict[str, Any]]:
        """The files of a dataset, or of every dataset of a server when ``name`` is a server's."""
        if name in self.servers():
            return self.server_files(name)
        self.dataset(name)
        rows: list[dict[str, Any]] = self.rows(FILES, where=f"dataset = {quote_literal(name)}").to_pylist()
        return rows

    def servers(self) -> dict[str, tuple[str, str]]:
        """Registered data servers: name -> (kind, uri)."""
        rows = self.rows(DATASETS, columns=["server", "server_kind", "server_uri"])
        servers = {row["server"]: (row["server_kind"], row["server_uri"]) for row in rows.to_pylist()}
        files = self.rows(FILES, columns=["server"])
        for server in set(files.column("server").to_pylist()) if files.num_rows else ():
            servers.setdefault(server, ("", ""))
        return servers

    def server_files(self, server: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.rows(FILES, where=f"server = {quote_literal(server)}").to_pylist()
        return rows

    def scan(self, name: str) -> SourceSpec:
        """The Scan source of a catalogued dataset, e.g. ``SourceSpec(kind="csv", path=".../q3.csv")``."""
        from semray.catalog.servers import open_server

        record = self.dataset(name)
        server = open_server(record.server_uri, record.server_kind) if record.server_kind else None
        if server is None:
            raise CatalogError(f"dataset {name!r} has no data server recorded; drop it and add it again")
        return server.scan(record.kind, record.uri, record.source_options)

    def pinned_scan(self, name: str) -> SourceSpec:
        """``scan(name)`` pinned to this catalog version (``SourceSpec.catalog``): what ``semray.read_catalog`` reads.

        A plan over it reads the same data when re-run after later ingests, and SemSearch over a documents
        dataset ranks by the segments of this version (``semray.pipeline.workers.search``).
        """
        record = self.dataset(name)
        pin = CatalogPin(
            dataset=record.name,
            version=self.version(),
            content_hash=record.content_hash,
            documents=record.kind == "documents",
        )
        return self.scan(name).model_copy(update={"catalog": pin})

    def _unknown(self, name: str) -> CatalogError:
        names = [record.name for record in self.datasets()]
        hint = suggest(name, names)
        advice = (
            f"did you mean {hint!r}?" if hint else f"datasets: {', '.join(names) or 'none (semray catalog add PATH)'}"
        )
        at = f" at catalog version {self.version()}" if self.pinned else ""
        return CatalogError(f"dataset {name!r} not found in the catalog{at}; {advice}")

    # writing -----------------------------------------------------------------------------

    def publish(self, change_set: ChangeSet) -> int:
        """Apply ``change_set`` and make it the next catalog version, atomically; returns that version."""
        if self.pinned:
            raise CatalogError(f"the catalog is pinned at version {self.version()}; open the latest to change it")
        with exclusive_lock(self.path / "catalog.lock", f"the catalog lock of {self.path}", wait_s=LOCK_WAIT_S):
            current = latest_manifest(self.path)
            if current.version != change_set.base_version:
                raise CatalogError(
                    f"the catalog changed while this ingest ran (version {change_set.base_version} -> "
                    f"{current.version}); run the command again"
                )
            tables = dict(current.tables)
            for change in change_set.changes:
                tables.update(self._apply(change, current))
            for staged, destination in change_set.files_to_place.items():
                make_directory_durably(destination.parent)
                staged.replace(destination)
            next_version = current.version + 1
            manifest = Manifest(
                version=next_version,
                tables=tables,
                published_at=datetime.datetime.now(datetime.UTC).isoformat(),
                action=change_set.action,
            )
            write_bytes_atomically(manifest_path(self.path, next_version), _manifest_bytes(manifest))
        log.info("catalog_published", version=next_version, action=change_set.action)
        self.manifest = manifest
        self._tables.clear()
        return next_version

    def _apply(self, change: TableChange, current: Manifest) -> dict[str, int]:
        """Write one change; the new Lance version of each table written (none when the table does not exist
        and stays so)."""
        if change.table in SHARDED:
            return self._apply_sharded(change, current)
        table = self._writable(change.table, current, change.rows)
        if table is None:
            return {}
        if change.delete_where is not None and change.table in current.tables:
            table.delete(change.delete_where)
        if change.rows is not None:
            add_streamed(table, change.rows, self.publish_rows)
        if change.after_write is not None:
            change.after_write(table)
        return {change.table: table.version}

    def _apply_sharded(self, change: TableChange, current: Manifest) -> dict[str, int]:
        """Delete from every shard, then fill the shards with room, in order, then new ones (``shards.py``);
        ``after_write`` runs on each shard rows were added to, once it is written."""
        names = shard_names(current.tables, change.table)
        opened = {name: self._writable(name, current, None) for name in names}
        written: dict[str, int] = {}
        if change.delete_where is not None:
            for name, table in opened.items():
                if table.count_rows(change.delete_where):  # a shard without such rows keeps its version
                    table.delete(change.delete_where)
                    written[name] = table.version
        if change.rows is None:
            return written
        stream = RowStream(change.rows)
        numbers = [shard_number(change.table, name) or 0 for name in names]
        new = (shard_name(change.table, number) for number in itertools.count(max(numbers, default=-1) + 1))
        for name in itertools.chain(names, new):
            if name in names and not stream.has_rows():
                break
            table = opened[name] if name in opened else self._writable(name, current, stream)
            room = self.shard_rows - int(table.count_rows())
            if room > 0:
                add_streamed(table, stream.take(room), self.publish_rows)
                if change.after_write is not None:
                    change.after_write(table)
            written[name] = table.version
            if not stream.has_rows():
                break
        return written

    def _writable(self, name: str, current: Manifest, rows: pa.Table | pa.RecordBatchReader | RowStream | None) -> Any:
        """The latest table ``name``, rolled back to ``current``'s version if a failed publish wrote past it; a
        new table of ``rows``' schema when ``current`` has none; None when it has none and ``rows`` is None."""
        existing = set(self._db.list_tables().tables)
        recorded = current.tables.get(name)
        if recorded is None:
            if name in existing:  # created by a publish that never reached its manifest
                self._db.drop_table(name)
            if rows is None:
                return None
            return self._db.create_table(name, schema=rows.schema)
        table = self._db.open_table(name)
        if table.version != recorded:
            log.warning("catalog_restoring_table", table=name, latest=table.version, manifest=recorded)
            table.checkout(recorded)
            table.restore()
        return table


def in_list(column: str, values: Iterable[str]) -> str:
    """``column IN ('a', 'b')``, or a filter matching nothing for no values."""
    items = sorted(set(values))
    return f"{column} IN ({', '.join(quote_literal(value) for value in items)})" if items else "false"


def manifest_path(path: Path, version: int) -> Path:
    return path / MANIFESTS / f"v{version:08d}.json"


def manifest_numbers(path: Path) -> list[int]:
    folder = path / MANIFESTS
    if not folder.is_dir():
        return []
    return sorted(int(match.group(1)) for entry in folder.iterdir() if (match := _MANIFEST.match(entry.name)))


def latest_manifest(path: Path) -> Manifest:
    numbers = manifest_numbers(path)
    return read_manifest(path, numbers[-1]) if numbers else Manifest(version=0, tables={})


def read_manifest(path: Path, version: int) -> Manifest:
    if version == 0:
        return Manifest(version=0, tables={})
    file = manifest_path(path, version)
    if not file.is_file():
        numbers = manifest_numbers(path)
        known = f"versions 1 to {numbers[-1]}" if numbers else "no versions yet"
        raise CatalogError(f"catalog version {version} does not exist ({known}); `semray catalog versions` lists them")
    document = json.loads(file.read_text(encoding="utf-8"))
    return Manifest(
        version=int(document["version"]),
        tables={str(name): int(number) for name, number in document["tables"].items()},
        published_at=str(document.get("published_at", "")),
        action=str(document.get("action", "")),
    )


def _manifest_bytes(manifest: Manifest) -> bytes:
    document = {
        "version": manifest.version,
        "tables": dict(manifest.tables),
        "published_at": manifest.published_at,
        "action": manifest.action,
    }
    return json.dumps(document, indent=2, sort_keys=True).encode()


def add_streamed(table: Any, rows: pa.Table | pa.RecordBatchReader, size: int) -> None:
    """Add ``rows`` to a LanceDB ``table`` as one stream of batches of at most ``size`` rows (``parts_of``).

    One ``add``: LanceDB writes the stream batch by batch and commits one Lance version at its end (none
    if the stream fails; the error raised is the stream's own, not LanceDB's wrapping of it), so a
    publish holds about one batch of vectors whatever the collection's size. Measured on 384-d vectors
    streamed from a staged parquet (peak RSS growth of the add): one streamed add +209 / +231 / +243 MiB
    at 60k / 120k / 240k rows; the former ``add`` per 32k-row part +346 / +389 MiB at 60k / 120k (each
    part was materialised whole).
    """
    failures: list[Exception] = []

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for part in parts_of(rows, size):
                yield from part.to_batches()
        except Exception as error:
            failures.append(error)
            raise

    try:
        table.add(pa.RecordBatchReader.from_batches(rows.schema, batches()))
    except Exception as error:
        if failures:
            raise failures[0] from error
        raise


def parts_of(rows: pa.Table | pa.RecordBatchReader, size: int) -> Iterable[pa.Table]:
    """``rows`` as tables of at most ``size`` rows, in order, reading a stream one part at a time.

    >>> [part.num_rows for part in parts_of(pa.table({"a": list(range(5))}), 2)]
    [2, 2, 1]
    """
    if isinstance(rows, pa.Table):
        for start in range(0, max(rows.num_rows, 1), size):
            yield rows.slice(start, size)
        return
    pending: list[pa.RecordBatch] = []
    count, parts = 0, 0
    for batch in rows:
        while batch.num_rows:
            taken = batch.slice(0, size - count)
            pending.append(taken)
            count += taken.num_rows
            batch = batch.slice(taken.num_rows)
            if count == size:
                yield pa.Table.from_batches(pending, schema=rows.schema)
                pending, count, parts = [], 0, parts + 1
    if pending or not parts:  # an empty stream is one empty part, as an empty table is
        yield pa.Table.from_batches(pending, schema=rows.schema)
