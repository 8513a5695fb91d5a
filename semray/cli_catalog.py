"""``semray catalog add|ls|show|search|drop|refresh|organize|versions``: the catalog of data servers.

Registered on the ``semray`` parser by ``add_catalog_commands(commands)``. Every command reads the
catalog at its latest version unless ``--version N`` pins one (read-only commands).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from semray.settings import Settings


def add_catalog_commands(subparsers: Any) -> None:
    """Add ``catalog`` and its actions to the ``semray`` command's subparsers."""
    catalog = subparsers.add_parser("catalog", help="data servers and their datasets: add, list, search, refresh")
    actions = catalog.add_subparsers(title="actions", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="register a folder, file, SQLite/DuckDB file or postgres URI and ingest it")
    add.add_argument("target", metavar="PATH|URI")
    add.add_argument("--name", help="the data server's name (default: the folder's or file's name)")
    _add_engine(add)
    _add_sections(add)
    add.set_defaults(command=add_command)

    listing = actions.add_parser("ls", help="datasets: name, kind, rows, server, summary status")
    _add_version(listing)
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.set_defaults(command=list_command)

    show = actions.add_parser("show", help="one dataset (or data server): profile, columns, skipped files")
    show.add_argument("name", metavar="NAME")
    _add_version(show)
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.set_defaults(command=show_command)

    search = actions.add_parser("search", help="datasets and document segments matching a query")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("-k", type=int, default=10, help="hits of each kind (default 10)")
    search.add_argument("--mode", choices=("hybrid", "vector", "fts"), default="hybrid")
    search.add_argument(
        "--level",
        help="segments of this level only: document, section, paragraph or chunk (default: every level, each hit "
        "at the level that fits it best)",
    )
    search.add_argument("--dataset", action="append", help="search these datasets only (repeatable)")
    search.add_argument("--where", help="a filter on segment columns, e.g. \"topic = 'Cardiology'\"")
    _add_version(search)
    search.set_defaults(command=search_command)

    drop = actions.add_parser("drop", help="remove a dataset, or every dataset of a data server")
    drop.add_argument("name", metavar="NAME")
    drop.set_defaults(command=drop_command)

    refresh = actions.add_parser("refresh", help="re-ingest the files that changed (one server, or all)")
    refresh.add_argument("name", metavar="NAME", nargs="?")
    _add_engine(refresh)
    _add_sections(refresh)
    refresh.set_defaults(command=refresh_command)

    organize = actions.add_parser(
        "organize", help="topics of a documents dataset: the model proposes and labels a sample, a classifier the rest"
    )
    organize.add_argument("name", metavar="NAME")
    organize.add_argument("--sample", type=int, default=200, help="documents the model labels (default 200)")
    organize.add_argument(
        "--replay", type=Path, metavar="FILE", help="recorded replies (JSON: request id -> reply) instead of the tier"
    )
    organize.set_defaults(command=organize_command)

    versions = actions.add_parser("versions", help="catalog versions: number, time, what published it")
    versions.set_defaults(command=versions_command)


def _add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", type=int, help="read the catalog at this version (`catalog versions`)")


def _add_sections(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--propose-sections",
        action="store_true",
        help="ask the LLM tier for the sections of documents without headings (one call each; needs a real tier)",
    )
    parser.add_argument(
        "--sections-replay",
        type=Path,
        metavar="FILE",
        help="propose sections from recorded replies (JSON: 'sections:<document>' -> reply) instead of the tier",
    )


def _add_engine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="read, segment and embed in this process instead of on Ray Data (for a handful of files)",
    )


def add_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.ingest import add_server
    from semray.cli_progress import ingest_reporter_for

    engine: Literal["local", "ray"] = "local" if args.in_process else "ray"
    report = add_server(
        settings,
        args.target,
        name=args.name,
        engine=engine,
        sections=_sections(args, settings),
        progress=ingest_reporter_for(settings),
    )
    _print_report(report)
    return 0


def refresh_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.ingest import refresh
    from semray.cli_progress import ingest_reporter_for

    engine: Literal["local", "ray"] = "local" if args.in_process else "ray"
    reports = refresh(
        settings, args.name, engine=engine, sections=_sections(args, settings), progress=ingest_reporter_for(settings)
    )
    for report in reports:
        _print_report(report)
    return 0


def _sections(args: argparse.Namespace, settings: Settings) -> Any:
    """The model pass of ``--propose-sections`` (recorded replies with ``--sections-replay``), or None."""
    if args.sections_replay is not None:
        from semray.catalog.section_writer import SectionWriter

        return SectionWriter.replaying(json.loads(args.sections_replay.read_text(encoding="utf-8")))
    if not args.propose_sections:
        return None
    from semray.catalog.section_writer import SectionWriter
    from semray.serving.profiles import resolve_serving

    return SectionWriter.from_tier(resolve_serving(settings.models))


def drop_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.ingest import drop

    version, names = drop(settings, args.name)
    sys.stdout.write(f"dropped {', '.join(names) or 'nothing'}; catalog version {version}\n")
    return 0


def list_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.store import Catalog

    catalog = Catalog.open(settings, version=args.version)
    records = catalog.datasets()
    if args.format == "json":
        for record in records:
            document = {"name": record.name, "kind": record.kind, "rows": record.row_count, "server": record.server}
            sys.stdout.write(json.dumps({**document, "summary_status": record.summary_status}) + "\n")
        return 0
    rows = [
        (
            record.name,
            record.kind,
            str(record.row_count),
            record.server,
            _short(record.summary or record.summary_status),
        )
        for record in records
    ]
    _table(f"catalog version {catalog.version()}", ("name", "kind", "rows", "server", "summary"), rows)
    return 0


def show_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.organize import organization
    from semray.catalog.store import Catalog

    catalog = Catalog.open(settings, version=args.version)
    if args.name in catalog.servers() and args.name not in {record.name for record in catalog.datasets()}:
        files = catalog.files(args.name)
        _print_files(args.name, files)
        return 0
    record = catalog.dataset(args.name)
    columns = catalog.columns(args.name)
    # a folder's documents dataset also owns the files of no dataset (unsupported types, links): it is the server's
    files = catalog.files(args.name)
    organized = organization(catalog, args.name)
    if args.format == "json":
        document = {
            "name": record.name,
            "kind": record.kind,
            "uri": record.uri,
            "server": record.server,
            "rows": record.row_count,
            "stats_rows": record.stats_rows,
            "schema": list(record.schema),
            "schema_status": record.schema_status,
            "summary": record.summary,
            "summary_status": record.summary_status,
            "samples": list(record.samples),
            "columns": columns,
            "files": files,
            "organization": None if organized is None else _organization_json(organized, record.content_hash),
        }
        sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
        return 0
    out = sys.stdout
    out.write(f"{record.name}  ({record.kind}, {record.row_count} rows, server {record.server})\n")
    out.write(f"uri: {record.uri}\nschema: {record.schema_status}\n")
    out.write(f"summary: {record.summary or record.summary_status}\n")
    if record.stats_rows is not None and record.row_count is not None and record.stats_rows < record.row_count:
        out.write(f"statistics: distinct, top values and percentiles from a sample of {record.stats_rows} rows\n")
    _table(
        "columns",
        ("column", "type", "nulls", "distinct", "min", "max", "top values", "length p50/p95/max"),
        [
            (
                row["column"],
                row["type"],
                str(row["nulls"]),
                str(row["distinct_estimate"]),
                _short(row["min"] or "", 20),
                _short(row["max"] or "", 20),
                _short(", ".join(str(value) for value, _ in json.loads(row["top_values_json"] or "[]")), 40),
                "-"
                if row["length_max"] is None
                else f"{row['length_p50']:g}/{row['length_p95']:g}/{row['length_max']}",
            )
            for row in columns
        ],
    )
    _table(
        "sample rows",
        tuple(column["name"] for column in record.schema),
        [tuple(_short(str(sample.get(column["name"])), 30) for column in record.schema) for sample in record.samples],
    )
    _print_files(record.server, [row for row in files if row["status"] == "skipped"], skipped_only=True)
    if organized is not None:
        _print_organization(organized, stale=organized.content_hash != record.content_hash)
    return 0


def search_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.catalog_search import search_catalog
    from semray.catalog.store import Catalog
    from semray.serving.profiles import resolve_serving

    catalog = Catalog.open(settings, version=args.version)
    hits = search_catalog(
        catalog,
        args.query,
        resolve_serving(settings.models).embedding,
        k=args.k,
        mode=args.mode,
        level=args.level,
        datasets=args.dataset,
        where=args.where,
    )
    _table(
        "datasets",
        ("dataset", "kind", "score", "summary"),
        [(hit.name, hit.kind, f"{hit.score:.3f}", _short(hit.summary or "", 60)) for hit in hits.datasets],
    )
    _table(
        "segments",
        ("dataset", "document", "level", "path", "span", "score", "text"),
        [
            (
                hit.dataset,
                hit.document_id,
                hit.level,
                _short(" > ".join(hit.path[1:]), 30),  # the first is the document's title
                f"{hit.start}-{hit.end}",
                f"{hit.score:.3f}",
                _short(hit.text.replace("\n", " "), 60),
            )
            for hit in hits.segments
        ],
    )
    return 0


def organize_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.organize import organize_dataset, recorded_replies

    replies = recorded_replies(args.replay) if args.replay is not None else None
    organization = organize_dataset(settings, args.name, sample=args.sample, replies=replies)
    sys.stdout.write(
        f"{organization.dataset}: catalog version {organization.version}; {len(organization.topic_counts)} topics over "
        f"{organization.documents} documents\n"
    )
    _print_organization(organization, stale=False)
    return 0


def versions_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.catalog.store import Catalog

    versions = Catalog.open(settings).versions()
    _table(
        "catalog versions",
        ("version", "published", "action"),
        [(str(manifest.version), manifest.published_at, manifest.action) for manifest in versions],
    )
    return 0


def _print_report(report: Any) -> None:
    files = report.files
    out = sys.stdout
    out.write(
        f"{report.server}: catalog version {report.version}; files: {files.unchanged} unchanged, {files.changed} "
        f"changed, {files.new} new, {files.removed} removed\n"
    )
    out.write(f"datasets ingested: {', '.join(report.datasets) or 'none'}\n")
    if report.removed_datasets:
        out.write(f"datasets removed: {', '.join(report.removed_datasets)}\n")
    if report.documents_read or report.segments:
        out.write(
            f"documents read: {report.documents_read}, segments: {report.segments}, snippets: {report.snippets}\n"
        )
    out.write(f"skipped: {len(report.skipped)} file(s)\n")
    for path, reason in report.skipped:
        out.write(f"  {path}: {reason}\n")
    statuses = set(report.summary_statuses.values())
    if len(statuses) == 1:
        out.write(f"summaries: {statuses.pop()}\n")


def _organization_json(organized: Any, content_hash: str) -> dict[str, Any]:
    return {
        "topics": organized.hierarchy.to_json(),
        "documents_per_topic": dict(organized.topic_counts),
        "labelled_by": organized.labelled_by,
        "sample_documents": organized.sample_documents,
        "labelled_documents": organized.labelled_documents,
        "held_out_documents": organized.held_out_documents,
        "agreement": organized.agreement,
        "organized_at": organized.organized_at.isoformat(),
        "stale": organized.content_hash != content_hash,
    }


def _print_organization(organized: Any, *, stale: bool) -> None:
    out = sys.stdout
    agreement = "n/a" if organized.agreement is None else f"{organized.agreement:.1%}"
    out.write(
        f"topics: labelled by {organized.labelled_by} on {organized.labelled_documents} of "
        f"{organized.sample_documents} sampled documents; classifier agreement with the model on "
        f"{organized.held_out_documents} held-out documents: {agreement}\n"
    )
    if stale:
        out.write("topics are stale: the dataset was re-ingested since (run `semray catalog organize` again)\n")
    _table("topics", ("topic", "documents"), [(topic, str(count)) for topic, count in organized.topic_counts.items()])


def _print_files(server: str, files: list[dict[str, Any]], skipped_only: bool = False) -> None:
    title = f"files of {server} skipped" if skipped_only else f"files of {server}"
    _table(title, ("path", "status", "reason"), [(row["path"], row["status"], row["reason"] or "") for row in files])


def _short(text: str, width: int = 50) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=160, force_terminal=False).print(table)
    sys.stdout.write(buffer.getvalue())
