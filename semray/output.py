"""Result rendering for the CLI: a terminal table, CSV, JSON lines or Parquet."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from semray.errors import SemrayError
from semray.operators.schema import ROW_ID

MAX_TABLE_ROWS = 50


def without_row_ids(table: pa.Table) -> pa.Table:
    """The query's own columns: ``table`` without the engine's ``_rowid``.

    >>> without_row_ids(pa.table({"_rowid": ["a"], "x": [1]})).column_names
    ['x']
    """
    return table.drop_columns([ROW_ID]) if ROW_ID in table.column_names else table


def render(table: pa.Table, fmt: str, path: Path | None = None) -> None:
    """Write ``table`` as ``fmt`` to ``path`` (atomically) or to standard output."""
    if fmt == "parquet":
        if path is None:
            raise SemrayError("--format parquet needs --output FILE")
        _atomic_write(path, lambda handle: pq.write_table(table, handle))
        return
    text = {"table": _as_table, "csv": _as_csv, "json": _as_json}[fmt](table)
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def _as_table(table: pa.Table) -> str:
    view = Table(show_lines=False)
    for name in table.column_names:
        view.add_column(name, overflow="fold")
    for row in table.slice(0, MAX_TABLE_ROWS).to_pylist():
        view.add_row(*("∅" if value is None else str(value) for value in row.values()))
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=False)
    console.print(view)
    more = table.num_rows - MAX_TABLE_ROWS
    suffix = f"... {more} more rows (use --format csv or json for all)\n" if more > 0 else ""
    return buffer.getvalue() + suffix + f"({table.num_rows} rows)\n"


def _as_csv(table: pa.Table) -> str:
    # The csv module quotes only where needed, as spreadsheets and shells expect.
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.column_names)
    for batch in table.to_batches():
        writer.writerows(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    return buffer.getvalue()


def _as_json(table: pa.Table) -> str:
    return "".join(json.dumps(row, default=str, ensure_ascii=False) + "\n" for row in table.to_pylist())


def check_output_path(path: Path) -> Path:
    """The absolute, link-resolved path a result will be written to, or a ``SemrayError`` naming why
    it cannot be (a symbolic link loop, a folder, a parent that is a file). Cheap: the CLI calls it
    on ``--output`` before a run pays for its calls.

    >>> check_output_path(Path("/"))
    Traceback (most recent call last):
    ...
    semray.errors.SemrayError: output path '/' is a folder; give a file name, e.g. /result.csv
    """
    expanded = path.expanduser()
    try:
        resolved = expanded.resolve()
    except (RuntimeError, OSError) as error:  # RuntimeError("Symlink loop from ...") up to Python 3.12
        raise SemrayError(
            f"output path {str(path)!r} is a symbolic link loop (a link that leads back to itself), so nothing "
            "can be written there; remove the link or give another path"
        ) from error
    if resolved.is_dir():
        raise SemrayError(f"output path {str(path)!r} is a folder; give a file name, e.g. {resolved / 'result.csv'}")
    parent = next((folder for folder in resolved.parents if folder.exists()), None)
    if parent is not None and not parent.is_dir():
        raise SemrayError(f"output path {str(path)!r}: {str(parent)!r} is a file, not a folder; give another path")
    return resolved


def _atomic_write(path: Path, write: object) -> None:
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(temporary, "wb") as handle:
            write(handle)  # type: ignore[operator]
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
