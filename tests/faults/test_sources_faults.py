"""Fault corpus for the file readers (issue 26): no row, column or byte is lost or mangled silently.

Families: CSV headers with repeated or empty names, a column / JSON key / value type first seen
after the inference sample, quotes never closed, text that is not in the expected encoding,
paths that are not regular files (pipes, devices, sockets, link loops, dead links, one file
reached twice), and the edges every reader must define (empty, header only, BOM, CRLF, NUL
bytes, very long lines, folders without matching files, ragged rows, corrupt files).

Every case builds its files under ``tmp_path`` and asserts either a ``SourceError`` whose message
names the cause (file, line / row / byte offset, column, and the option that fixes it), or the
documented correct result compared value by value with what the file holds. Readers are called
as in ``tests/sources``: open, then run every read task after a pickle round trip. No Ray.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.errors import SourceError
from semray.sources import Source, open_source
from semray.sources.base import OptionValue

pytestmark = pytest.mark.timeout(30)

Build = Callable[[Path], Path]


def read_all(source: Source, columns: Sequence[str] | None = None, batch_rows: int = 1000) -> pa.Table:
    """Every task's tables after a pickle round trip (as Ray runs them), batch contract checked."""
    tables = []
    for task in source.read_tasks(columns, batch_rows):
        for table in pickle.loads(pickle.dumps(task))():
            assert table.column_names[0] == "_rowid"
            assert 0 < table.num_rows <= batch_rows
            tables.append(table)
    return pa.concat_tables(tables)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def folder(root: Path, files: dict[str, bytes]) -> Path:
    """A folder ``root / "d"`` holding ``files`` (relative name -> bytes)."""
    for name, data in files.items():
        write(root / "d" / name, data)
    return root / "d"


def lines(*rows: str) -> bytes:
    return "".join(row + "\n" for row in rows).encode()


def numbers(count: int, start: int = 0) -> list[str]:
    return [str(index) for index in range(start, start + count)]


@dataclass(frozen=True)
class Fault:
    """A file that must fail with a SourceError whose message matches every one of ``names``."""

    kind: str
    build: Build
    names: tuple[str, ...]
    """Regular expressions the message must contain: the cause, where it is, and the fix."""
    options: dict[str, OptionValue] = field(default_factory=dict)
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Edge:
    """A file with a documented correct result: exactly these columns holding exactly these values."""

    kind: str
    build: Build
    expected: dict[str, list[object]]
    options: dict[str, OptionValue] = field(default_factory=dict)
    batch_rows: int = 1000


FAULTS: dict[str, Fault] = {}
EDGES: dict[str, Edge] = {}


# -- 1. CSV headers that name a column twice -------------------------------------------------

for label, header, repeated in [
    ("first-two", "id,id,text", "id"),
    ("last-two", "a,b,text,text", "text"),
    ("apart", "name,x,y,name", "name"),
    ("three-times", "v,v,v", "v"),
]:
    width = len(header.split(","))
    body = lines(header, ",".join(["1"] * width), ",".join(["2"] * width))
    FAULTS[f"csv-duplicate-header-{label}"] = Fault(
        "csv",
        lambda tmp, body=body: write(tmp / "dup.csv", body),
        (rf"names column '{repeated}' twice", r"dup\.csv", "header=false"),
    )
FAULTS["tsv-duplicate-header"] = Fault(
    "csv", lambda tmp: write(tmp / "dup.tsv", b"k\tk\n1\t2\n"), (r"names column 'k' twice", r"dup\.tsv")
)
FAULTS["csv-gz-duplicate-header"] = Fault(
    "csv", lambda tmp: write(tmp / "dup.csv.gz", gzip.compress(b"a,a\n1,2\n")), (r"column 'a' twice", r"dup\.csv\.gz")
)


def _folder_with_late_duplicate(tmp: Path) -> Path:
    return folder(tmp, {f"p{index}.csv": b"a,b\n1,2\n" if index < 2 else b"a,a\n1,2\n" for index in range(3)})


# The third file is outside the inference sample (infer_files=2): its header is checked when read.
FAULTS["csv-duplicate-header-in-a-file-read-later"] = Fault(
    "csv", _folder_with_late_duplicate, (r"names column 'a' twice", r"p2\.csv"), {"infer_files": 2}
)
EDGES["csv-repeated-values-without-header-are-two-columns"] = Edge(
    "csv", lambda tmp: write(tmp / "nohead.csv", b"1,1\n2,2\n"), {"f0": [1, 2], "f1": [1, 2]}, {"header": False}
)

# -- 2. CSV headers with an empty name --------------------------------------------------------

for label, header, position in [("middle", "a,,c", 2), ("first", ",b,c", 1), ("last", "a,b,", 3)]:
    FAULTS[f"csv-empty-header-name-{label}"] = Fault(
        "csv",
        lambda tmp, header=header: write(tmp / "blank.csv", lines(header, "1,2,3")),
        (rf"column {position} of 3 without a name", r"blank\.csv", "header=false"),
    )
FAULTS["tsv-empty-header-name"] = Fault(
    "csv", lambda tmp: write(tmp / "blank.tsv", b"a\t\n1\t2\n"), (r"column 2 of 2 without a name", r"blank\.tsv")
)

# -- 3. a column, JSON key or type first seen after the inference sample ----------------------


def _jsonl(name: str, records: Sequence[Mapping[str, object]]) -> Build:
    return lambda tmp: write(tmp / name, "".join(json.dumps(r) + "\n" for r in records).encode())


def _json_array(name: str, records: Sequence[Mapping[str, object]]) -> Build:
    return lambda tmp: write(tmp / name, json.dumps(list(records)).encode())


for rows in (1000, 1500, 4321):
    FAULTS[f"jsonl-late-key-after-{rows}-rows"] = Fault(
        "json",
        _jsonl("late.jsonl", [{"a": i} for i in range(rows)] + [{"a": 0, "late": "x"}]),
        (r"line \d+ of JSON .*late\.jsonl", r"the key 'late'", rf"infer_rows option to at least {rows + 1}"),
    )
FAULTS["ndjson-late-key"] = Fault(
    "json",
    _jsonl("late.ndjson", [{"a": i} for i in range(30)] + [{"a": 1, "b": 2}]),
    (r"line 31 of JSON", r"the key 'b'", r"infer_rows option to at least 31"),
    {"infer_rows": 10},
)
FAULTS["json-array-late-key"] = Fault(
    "json",
    _json_array("late.json", [{"a": i} for i in range(20)] + [{"a": 1, "b": 2}]),
    (r"item 20 of JSON .*late\.json", r"the key 'b'", r"infer_rows"),
    {"infer_rows": 5},
)
FAULTS["jsonl-late-nested-key"] = Fault(
    "json",
    _jsonl("nest.jsonl", [{"m": {"x": i}} for i in range(50)] + [{"m": {"x": 1, "y": 2}}]),
    (r"line 51", r"the key 'm\.y'", r"infer_rows"),
    {"infer_rows": 10},
)
FAULTS["jsonl-late-key-in-a-file-outside-the-sample"] = Fault(
    "json",
    lambda tmp: folder(tmp, {f"p{i}.jsonl": b'{"a": 1}\n' if i < 3 else b'{"a": 1, "z": 1}\n' for i in range(4)}),
    (r"p3\.jsonl", r"the key 'z'", r"infer_files option to at least 4"),
    {"infer_files": 3},
)
FAULTS["csv-late-column-in-a-file-outside-the-sample"] = Fault(
    "csv",
    lambda tmp: folder(tmp, {f"p{i}.csv": b"a\n1\n" if i < 2 else b"a,z\n1,5\n" for i in range(3)}),
    (r"p2\.csv", r"column\(s\) 'z'", r"infer_files option to at least 3"),
    {"infer_files": 2},
)
EDGES["jsonl-late-key-with-wider-inference"] = Edge(
    "json",
    _jsonl("late.jsonl", [{"a": i} for i in range(30)] + [{"a": 30, "late": "x"}]),
    {"a": list(range(31)), "late": [None] * 30 + ["x"]},
    {"infer_rows": 100},
)

for rows in (100, 2500):
    FAULTS[f"csv-int-then-text-after-{rows}-rows"] = Fault(
        "csv",
        lambda tmp, rows=rows: write(tmp / "drift.csv", lines("n", *numbers(rows), "abc")),
        (
            r"column 'n' was inferred as int64",
            rf"data row {rows + 1} \(row id '{rows}'\) holds 'abc'",
            r"drift\.csv",
            r"infer_bytes option to at least \d+",
        ),
        {"infer_bytes": 256},
    )
FAULTS["csv-int-then-text-after-the-default-window"] = Fault(
    "csv",
    lambda tmp: write(tmp / "big.csv", lines("id,n", *(f"{i},{i}" for i in range(150_000)), "150000,abc")),
    (r"column 'n' was inferred as int64", r"row id '150000'", r"'abc'", r"infer_bytes"),
    columns=("n",),
)
FAULTS["csv-float-then-text"] = Fault(
    "csv",
    lambda tmp: write(tmp / "f.csv", lines("x,y", *(f"{i}.5,a" for i in range(300)), "n/a,b")),
    (r"column 'x' was inferred as double", r"row id '300'", r"'n/a'"),
    {"infer_bytes": 256},
)
FAULTS["csv-type-change-in-a-file-outside-the-sample"] = Fault(
    "csv",
    lambda tmp: folder(tmp, {f"p{i}.csv": b"n\n1\n" if i < 2 else b"n\nabc\n" for i in range(3)}),
    (r"p2\.csv", r"column 'n' was inferred as int64", r"row id 'p2\.csv:0'", r"infer_files option to at least 3"),
    {"infer_files": 2},
)
FAULTS["jsonl-int-then-string"] = Fault(
    "json",
    _jsonl("drift.jsonl", [{"n": i} for i in range(1200)] + [{"n": "abc"}]),
    (r"line 1201 of JSON .*drift\.jsonl", r"column 'n' was inferred as int64", r'holds "abc"', r"infer_rows"),
)
FAULTS["jsonl-int-then-float"] = Fault(
    "json",
    _jsonl("f.jsonl", [{"n": i} for i in range(20)] + [{"n": 2.5}]),
    (r"line 21", r"column 'n' was inferred as int64", r"holds 2\.5"),
    {"infer_rows": 10},
)
FAULTS["jsonl-number-then-object"] = Fault(
    "json",
    _jsonl("o.jsonl", [{"n": i} for i in range(20)] + [{"n": {"deep": 1}}]),
    (r"line 21", r"column 'n'", r"a JSON object"),
    {"infer_rows": 10},
)
EDGES["csv-type-change-inside-the-sample-widens-to-text"] = Edge(
    "csv", lambda tmp: write(tmp / "mix.csv", lines("n", "1", "2", "abc")), {"n": ["1", "2", "abc"]}
)
EDGES["csv-int-then-text-with-wider-inference"] = Edge(
    "csv",
    lambda tmp: write(tmp / "drift.csv", lines("n", *numbers(500), "abc")),
    {"n": [*numbers(500), "abc"]},
    {"infer_bytes": 1 << 16},
)

# -- 4. quotes that are never closed -----------------------------------------------------------

for label, before, after in [("first-row", 0, 3), ("middle", 40, 5), ("last-row", 60, 0)]:
    body = lines("a,b", *(f"{i},x{i}" for i in range(before)), f'{before},"open', *(f"{i},y" for i in range(after)))
    FAULTS[f"csv-unterminated-quote-{label}"] = Fault(
        "csv",
        lambda tmp, body=body: write(tmp / "q.csv", body),
        (rf"starts on line {before + 2} is never closed", r"q\.csv", r"quote_char"),
    )
FAULTS["csv-unterminated-quote-after-many-blocks"] = Fault(
    "csv",
    lambda tmp: write(tmp / "q.csv", lines("a,b", *(f"{i},x" for i in range(50_000)), '7,"open', "8,y")),
    (r"starts on line 50002 is never closed",),
    columns=("a",),
)
FAULTS["tsv-unterminated-quote"] = Fault(
    "csv", lambda tmp: write(tmp / "q.tsv", b'a\tb\n1\t"x\n2\ty\n'), (r"starts on line 2 is never closed", r"q\.tsv")
)
FAULTS["csv-unterminated-custom-quote"] = Fault(
    "csv",
    lambda tmp: write(tmp / "q.csv", b"a,b\n1,'ok'\n2,'open\n3,z\n"),
    (r"starts on line 3 is never closed", r"""close the quote \("'"\)"""),
    {"quote_char": "'"},
)
FAULTS["csv-gz-unterminated-quote"] = Fault(
    "csv", lambda tmp: write(tmp / "q.csv.gz", gzip.compress(b'a\n"x\n1\n')), (r"line 2 is never closed",)
)
EDGES["csv-quoted-values-across-lines-and-blocks"] = Edge(
    "csv",
    lambda tmp: write(tmp / "ml.csv", lines("a,b", *(f'{i},"line\nmore {i}"' for i in range(5000)))),
    {"a": list(range(5000)), "b": [f"line\nmore {i}" for i in range(5000)]},
    batch_rows=333,
)
EDGES["csv-doubled-quotes-are-literal"] = Edge(
    "csv",
    lambda tmp: write(tmp / "dq.csv", b'a,b\n1,"say ""hi"""\n2,""""\n'),
    {"a": [1, 2], "b": ['say "hi"', '"']},
)
EDGES["csv-quote-inside-an-unquoted-value-is-literal"] = Edge(
    "csv", lambda tmp: write(tmp / "mq.csv", b'a,b\n1,5"10\n2,"6"\n'), {"a": [1, 2], "b": ['5"10', "6"]}
)

# -- 5. text that is not in the expected encoding ----------------------------------------------

LATIN = "id,text\n1,café\n2,naïve\n".encode("latin-1")
FAULTS["csv-latin1-without-the-option"] = Fault(
    "csv",
    lambda tmp: write(tmp / "l1.csv", LATIN),
    (r"l1\.csv' is not valid utf-8", r"byte 0xe9 at byte offset 13 \(line 2\)", r"encoding option", "latin-1"),
)
FAULTS["jsonl-latin1-without-the-option"] = Fault(
    "json",
    lambda tmp: write(tmp / "l1.jsonl", '{"t": "ok"}\n{"t": "café"}\n'.encode("latin-1")),
    (r"byte 0xe9 at byte offset 22 \(line 2\)", r"encoding option"),
)
FAULTS["json-array-latin1-without-the-option"] = Fault(
    "json",
    lambda tmp: write(tmp / "l1.json", '[{"t": "café"}]'.encode("latin-1")),
    (r"l1\.json' is not valid utf-8", r"byte 0xe9 at byte offset 11", r"encoding option"),
)
FAULTS["text-latin1-without-the-option"] = Fault(
    "text",
    lambda tmp: write(tmp / "docs" / "a.txt", "first line\ncafé".encode("latin-1")).parent,
    (r"a\.txt' is not valid utf-8", r"byte 0xe9 at byte offset 14 \(line 2\)", r"encoding option"),
)
FAULTS["csv-bad-byte-in-the-header"] = Fault(
    "csv", lambda tmp: write(tmp / "h.csv", b"id,t\xe9xt\n1,a\n"), (r"byte 0xe9 at byte offset 4 \(line 1\)",)
)
FAULTS["csv-bad-byte-after-the-sample"] = Fault(
    "csv",
    lambda tmp: write(tmp / "late.csv", lines("id,t", *(f"{i},w" for i in range(3000))) + b"3000,caf\xe9\n"),
    (r"byte 0xe9 at byte offset \d+ \(line 3002\)",),
    {"infer_bytes": 1024},
)
FAULTS["csv-truncated-character-at-the-end"] = Fault(
    "csv", lambda tmp: write(tmp / "t.csv", b"a\n1\nx\xc3"), (r"t\.csv' is not valid utf-8", r"line 3")
)
FAULTS["csv-gz-latin1"] = Fault(
    "csv", lambda tmp: write(tmp / "l1.csv.gz", gzip.compress(LATIN)), (r"byte 0xe9 at byte offset 13 \(line 2\)",)
)
FAULTS["csv-utf16-without-the-option"] = Fault(
    "csv", lambda tmp: write(tmp / "u.csv", "a\n1\n".encode("utf-16")), (r"not valid utf-8", r"byte offset 0")
)
FAULTS["csv-cp1252-undefined-byte"] = Fault(
    "csv",
    lambda tmp: write(tmp / "cp.csv", b"a,t\n1,x\x81y\n"),
    (r"not valid cp1252", r"byte 0x81 at byte offset 7 \(line 2\)"),
    {"encoding": "cp1252"},
)
FAULTS["csv-unknown-encoding-name"] = Fault(
    "csv", lambda tmp: write(tmp / "a.csv", b"a\n1\n"), (r"unknown encoding 'latin-9x'",), {"encoding": "latin-9x"}
)
FAULTS["csv-bad-encoding-errors-value"] = Fault(
    "csv", lambda tmp: write(tmp / "a.csv", b"a\n1\n"), (r"'strict' or 'replace'",), {"encoding_errors": "ignore"}
)
EDGES["csv-latin1-with-the-option"] = Edge(
    "csv", lambda tmp: write(tmp / "l1.csv", LATIN), {"id": [1, 2], "text": ["café", "naïve"]}, {"encoding": "latin-1"}
)
EDGES["jsonl-latin1-with-the-option"] = Edge(
    "json",
    lambda tmp: write(tmp / "l1.jsonl", '{"t": "café"}\n'.encode("latin-1")),
    {"t": ["café"]},
    {"encoding": "latin-1"},
)
EDGES["text-latin1-with-the-option"] = Edge(
    "text",
    lambda tmp: write(tmp / "docs" / "a.txt", "café".encode("latin-1")).parent,
    {"path": ["a.txt"], "text": ["café"]},
    {"encoding": "latin-1"},
)
EDGES["csv-utf16-with-the-option"] = Edge(
    "csv",
    lambda tmp: write(tmp / "u.csv", "a,t\n1,日本\n2,x\n".encode("utf-16")),
    {"a": [1, 2], "t": ["日本", "x"]},
    {"encoding": "utf-16"},
)
EDGES["csv-bad-utf8-replaced-when-asked"] = Edge(
    "csv",
    lambda tmp: write(tmp / "bad.csv", b"a,t\n1,caf\xe9\n"),
    {"a": [1], "t": ["caf\ufffd"]},
    {"encoding_errors": "replace"},
)

# -- 6. paths that are not regular files -------------------------------------------------------


def _fifo(name: str) -> Build:
    def build(tmp: Path) -> Path:
        os.mkfifo(tmp / name)
        return tmp / name

    return build


for kind, name in [("csv", "x.csv"), ("json", "x.jsonl"), ("parquet", "x.parquet"), ("text", "x.txt")]:
    FAULTS[f"{kind}-fifo"] = Fault(kind, _fifo(name), (rf"{re.escape(name)}' is a named pipe \(FIFO\)", "regular file"))


def _folder_with_fifo(tmp: Path) -> Path:
    write(tmp / "d" / "a.csv", b"a\n1\n")
    os.mkfifo(tmp / "d" / "b.csv")
    return tmp / "d"


def _socket_file(tmp: Path) -> Path:
    path = tmp / "s.csv"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


FAULTS["csv-fifo-inside-a-folder"] = Fault("csv", _folder_with_fifo, (r"b\.csv' is a named pipe",))
FAULTS["csv-fifo-matched-by-a-glob"] = Fault(
    "csv", lambda tmp: Path(str(_folder_with_fifo(tmp) / "*.csv")), (r"b\.csv' is a named pipe",)
)
FAULTS["csv-character-device"] = Fault("csv", lambda tmp: Path("/dev/null"), (r"'/dev/null' is a character device",))
FAULTS["csv-socket"] = Fault("csv", _socket_file, (r"s\.csv' is a socket",))


def _link(tmp: Path, name: str, target: str) -> Path:
    os.symlink(target, tmp / name)
    return tmp / name


def _folder_linking_to_itself(tmp: Path) -> Path:
    write(tmp / "d" / "a.csv", b"a\n1\n")
    os.symlink("..", tmp / "d" / "up")
    return tmp / "d"


def _folder_with_a_second_path(tmp: Path) -> Path:
    write(tmp / "d" / "a.csv", b"a\n1\n")
    os.symlink("a.csv", tmp / "d" / "latest.csv")
    return tmp / "d"


FAULTS["csv-symlink-loop"] = Fault(
    "csv", lambda tmp: _link(tmp, "loop.csv", "loop.csv"), (r"loop\.csv' is a symbolic link loop", "link")
)
FAULTS["json-symlink-loop-pair"] = Fault(
    "json",
    lambda tmp: (_link(tmp, "a.jsonl", "b.jsonl"), _link(tmp, "b.jsonl", "a.jsonl"))[0],
    (r"a\.jsonl' is a symbolic link loop",),
)
FAULTS["csv-symlink-loop-inside-a-folder"] = Fault(
    "csv",
    lambda tmp: (write(tmp / "d" / "a.csv", b"a\n1\n"), _link(tmp / "d", "self.csv", "self.csv"))[0].parent,
    (r"self\.csv' is a symbolic link loop",),
)
FAULTS["text-folder-symlink-loop"] = Fault(
    "text", lambda tmp: _link(tmp, "docs", "docs"), (r"docs' is a symbolic link loop",)
)
FAULTS["csv-dead-link"] = Fault(
    "csv", lambda tmp: _link(tmp, "dead.csv", "gone.csv"), (r"dead\.csv' is a symbolic link to 'gone\.csv'",)
)
FAULTS["csv-glob-through-a-folder-loop"] = Fault(
    "csv",
    lambda tmp: Path(str(_folder_linking_to_itself(tmp) / "**" / "*.csv")),
    (r"are the same file", r"read twice"),
)
FAULTS["csv-two-paths-to-one-file"] = Fault(
    "csv", _folder_with_a_second_path, (r"a\.csv' and .*latest\.csv' are the same file",)
)
EDGES["csv-folder-with-a-link-to-its-parent-reads-each-file-once"] = Edge("csv", _folder_linking_to_itself, {"a": [1]})

# -- 7. the edges every reader defines -----------------------------------------------------------

FAULTS["csv-empty-file"] = Fault("csv", lambda tmp: write(tmp / "e.csv", b""), (r"e\.csv' is empty",))
FAULTS["csv-header-only"] = Fault(
    "csv", lambda tmp: write(tmp / "h.csv", b"a,b\n"), (r"h\.csv' is empty \(no data rows, at most a header\)",)
)
FAULTS["csv-bom-only"] = Fault("csv", lambda tmp: write(tmp / "b.csv", b"\xef\xbb\xbf"), (r"b\.csv' is empty",))
FAULTS["jsonl-empty-file"] = Fault("json", lambda tmp: write(tmp / "e.jsonl", b""), (r"e\.jsonl' is empty",))
FAULTS["jsonl-blank-lines-only"] = Fault(
    "json", lambda tmp: write(tmp / "e.jsonl", b"\n  \n\r\n"), (r"e\.jsonl' is empty",)
)
FAULTS["json-empty-array"] = Fault("json", lambda tmp: write(tmp / "e.json", b"[]"), (r"e\.json' is empty",))
FAULTS["parquet-not-parquet"] = Fault(
    "parquet", lambda tmp: write(tmp / "x.parquet", b"not parquet"), (r"x\.parquet' is not a readable parquet file",)
)
FAULTS["parquet-repeated-column"] = Fault(
    "parquet",
    lambda tmp: (
        pq.write_table(pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"]), tmp / "d.parquet"),
        tmp / "d.parquet",
    )[1],
    (r"d\.parquet' has more than one column named 'id'",),
)
for kind, extension in [("csv", "csv"), ("json", "jsonl"), ("parquet", "parquet")]:
    FAULTS[f"{kind}-folder-without-matching-files"] = Fault(
        kind,
        lambda tmp: write(tmp / "d" / "notes.bin", b"x").parent,
        (rf"folder '.*d' has no .*\*\.{extension}", rf"point the {kind} source"),
    )
FAULTS["text-empty-folder"] = Fault("text", lambda tmp: (tmp / "d").mkdir() or tmp / "d", (r"folder '.*d' has no",))
FAULTS["csv-ragged-row"] = Fault(
    "csv",
    lambda tmp: write(tmp / "r.csv", lines("a,b", "1,2", "3", "4,5")),
    (r"r\.csv': data row 2 has 1 fields but the file has 2 columns", "delimiter"),
)
FAULTS["csv-ragged-row-after-the-sample"] = Fault(
    "csv",
    lambda tmp: write(tmp / "r.csv", lines("a,b", *(f"{i},{i}" for i in range(2000)), "1,2,3")),
    (r"data row 2001 has 3 fields",),
    {"infer_bytes": 256},
)
FAULTS["jsonl-raw-nul-byte"] = Fault(
    "json", lambda tmp: write(tmp / "n.jsonl", b'{"a": "x"}\n{"a": "x\x00y"}\n'), (r"line 2 of JSON", "not valid JSON")
)
FAULTS["jsonl-invalid-line"] = Fault(
    "json",
    lambda tmp: write(tmp / "b.jsonl", b'{"a": 1}\n\n{"a": \n'),
    (r"line 3 of JSON .*b\.jsonl", "not valid JSON"),
)
FAULTS["jsonl-repeated-key"] = Fault(
    "json", lambda tmp: write(tmp / "k.jsonl", b'{"a": 1}\n{"a": 1, "a": 2}\n'), (r"line 2", r"the key 'a' twice")
)
FAULTS["json-array-repeated-key"] = Fault(
    "json", lambda tmp: write(tmp / "k.json", b'[{"a": 1, "a": 2}]'), (r"k\.json' has the key 'a' twice",)
)
FAULTS["jsonl-not-an-object"] = Fault(
    "json", lambda tmp: write(tmp / "o.jsonl", b'{"a": 1}\n[1, 2]\n'), (r"line 2", r"a JSON array, not an object")
)

LONG = "x" * (3 << 20)
EDGES["csv-bom"] = Edge("csv", lambda tmp: write(tmp / "b.csv", b"\xef\xbb\xbfa,b\n1,2\n"), {"a": [1], "b": [2]})
EDGES["csv-bom-without-header"] = Edge(
    "csv", lambda tmp: write(tmp / "b.csv", b"\xef\xbb\xbf1,2\n"), {"f0": [1], "f1": [2]}, {"header": False}
)
EDGES["jsonl-bom"] = Edge(
    "json", lambda tmp: write(tmp / "b.jsonl", b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n'), {"a": [1, 2]}
)
EDGES["json-array-bom"] = Edge("json", lambda tmp: write(tmp / "b.json", b'\xef\xbb\xbf[{"a": 1}]'), {"a": [1]})
EDGES["text-bom-is-dropped"] = Edge(
    "text",
    lambda tmp: write(tmp / "docs" / "a.txt", b"\xef\xbb\xbfhello").parent,
    {"path": ["a.txt"], "text": ["hello"]},
)
EDGES["csv-crlf"] = Edge(
    "csv", lambda tmp: write(tmp / "c.csv", b'a,b\r\n1,"x\r\ny"\r\n2,z\r\n'), {"a": [1, 2], "b": ["x\r\ny", "z"]}
)
EDGES["jsonl-crlf-and-blank-lines"] = Edge(
    "json", lambda tmp: write(tmp / "c.jsonl", b'{"a": 1}\r\n\r\n{"a": 2}\r\n'), {"a": [1, 2]}
)
EDGES["text-crlf-and-nul-kept"] = Edge(
    "text",
    lambda tmp: write(tmp / "docs" / "a.txt", b"a\x00b\r\nc").parent,
    {"path": ["a.txt"], "text": ["a\x00b\r\nc"]},
)
EDGES["text-empty-file-is-an-empty-row"] = Edge(
    "text", lambda tmp: write(tmp / "docs" / "e.txt", b"").parent, {"path": ["e.txt"], "text": [""]}
)
EDGES["csv-nul-byte-in-a-value"] = Edge(
    "csv", lambda tmp: write(tmp / "n.csv", b"a,b\n1,x\x00y\n"), {"a": [1], "b": ["x\x00y"]}
)
EDGES["jsonl-escaped-nul"] = Edge(
    "json", lambda tmp: write(tmp / "n.jsonl", b'{"a": "x\\u0000y"}\n'), {"a": ["x\x00y"]}
)
EDGES["csv-row-longer-than-the-sample"] = Edge(
    "csv", lambda tmp: write(tmp / "l.csv", lines("a,b", f"1,{LONG}", "2,y")), {"a": [1, 2], "b": [LONG, "y"]}
)
EDGES["csv-row-longer-than-a-read-block"] = Edge(
    "csv",
    lambda tmp: write(tmp / "l.csv", lines("a,b", *(f"{i},x" for i in range(200)), f"200,{LONG}", "201,z")),
    {"a": list(range(202)), "b": ["x"] * 200 + [LONG, "z"]},
    {"infer_bytes": 1024},
)
EDGES["jsonl-very-long-line"] = Edge(
    "json",
    lambda tmp: write(tmp / "l.jsonl", ('{"a": "' + LONG + '"}\n{"a": "y"}\n').encode()),
    {"a": [LONG, "y"]},
)
EDGES["csv-header-only-file-in-a-folder-adds-no-rows"] = Edge(
    "csv",
    lambda tmp: folder(tmp, {"a.csv": b"a\n1\n", "b.csv": b"a\n"}),
    {"a": [1]},
)


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_a_typed_error_naming_its_cause(tmp_path: Path, name: str) -> None:
    fault = FAULTS[name]
    path = fault.build(tmp_path)
    with pytest.raises(SourceError) as caught:
        source = open_source(fault.kind, str(path), fault.options)
        read_all(source, fault.columns)
    message = str(caught.value)
    for pattern in fault.names:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_reads_exactly_what_the_file_holds(tmp_path: Path, name: str) -> None:
    edge = EDGES[name]
    source = open_source(edge.kind, str(edge.build(tmp_path)), edge.options)
    table = read_all(source, None, edge.batch_rows)
    assert table.column_names[1:] == list(edge.expected)
    for column, values in edge.expected.items():
        assert table.column(column).to_pylist() == values, column
    ids = table.column("_rowid").to_pylist()
    if edge.kind == "text":
        assert ids == table.column("path").to_pylist()
    elif ":" in ids[0]:
        assert len(set(ids)) == len(ids)
    else:
        assert ids == [str(index) for index in range(table.num_rows)]


def test_corpus_is_large_enough() -> None:
    assert len(FAULTS) + len(EDGES) >= 60


def test_lenient_reads_still_count_and_log(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    path = write(tmp_path / "bad.jsonl", b'{"t": "caf\xe9"}\n{"t": "ok"}\n')
    source = open_source("json", str(path), {"encoding_errors": "replace"})
    with capture_logs() as logs:
        table = read_all(source)
    assert table.column("t").to_pylist() == ["caf\ufffd", "ok"]
    assert source.invalid_utf8_count() == 1
    assert [entry["count"] for entry in logs if entry["event"] == "source_invalid_utf8"] == [1]


@pytest.mark.parametrize(
    "options", [{"delimiter": ";;"}, {"delimiter": ""}, {"delimiter": "\n"}, {"quote_char": "ab"}, {"delimiter": '"'}]
)
def test_csv_format_options_are_one_character(tmp_path: Path, options: dict[str, str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"delimiter|quote_char"):
        open_source("csv", str(path), options)
