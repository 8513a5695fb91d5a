"""Fault corpus for the file readers, files (issue 26): no byte is mangled silently and no read
blocks. Families: text that is not in the expected encoding, paths that are not regular files
(pipes, devices, sockets, link loops, dead links, one file reached twice), and the edges every
reader must define (empty, header only, BOM, CRLF, NUL bytes, very long lines, folders without
matching files, ragged rows, corrupt files). Case types and checks: ``source_cases.py``.
"""

from __future__ import annotations

import gzip
import os
import re
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from source_cases import Build, Edge, Fault, check_edge, check_fault, folder, lines, read_all, write

from semray.errors import SourceError
from semray.sources import open_source

pytestmark = pytest.mark.timeout(30)

FAULTS: dict[str, Fault] = {}
EDGES: dict[str, Edge] = {}


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


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_a_typed_error_naming_its_cause(tmp_path: Path, name: str) -> None:
    check_fault(FAULTS[name], tmp_path)


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_reads_exactly_what_the_file_holds(tmp_path: Path, name: str) -> None:
    check_edge(EDGES[name], tmp_path)


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


# -- links and paths resolved outside semray/sources (semray/readers.py, semray/output.py) ----


@pytest.mark.parametrize("reader", ["read_csv", "read_json", "read_parquet"])
def test_the_python_readers_name_a_link_loop(tmp_path: Path, reader: str) -> None:
    import semray

    os.symlink("loop.csv", tmp_path / "loop.csv")
    with pytest.raises(SourceError, match="symbolic link loop"):
        getattr(semray, reader)(tmp_path / "loop.csv")


def test_an_output_path_that_is_a_link_loop_is_a_typed_error(tmp_path: Path) -> None:
    import pyarrow as pa

    from semray.errors import SemrayError
    from semray.output import render

    os.symlink("out.csv", tmp_path / "out.csv")
    with pytest.raises(SemrayError, match="is a symbolic link loop"):
        render(pa.table({"a": [1]}), "csv", tmp_path / "out.csv")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.csv"]  # no partial file left


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_an_output_path_nothing_can_be_written_to_is_named_before_writing(tmp_path: Path, where: str) -> None:
    from semray.errors import SemrayError
    from semray.output import check_output_path

    (tmp_path / "plain").write_text("x", encoding="utf-8")
    path = tmp_path if where == "folder" else tmp_path / "plain" / "out.csv"
    expected = "is a folder; give a file name" if where == "folder" else "plain' is a file, not a folder"
    with pytest.raises(SemrayError, match=expected):
        check_output_path(path)
    assert check_output_path(tmp_path / "new" / "out.csv") == tmp_path.resolve() / "new" / "out.csv"


def test_sql_over_a_table_that_is_a_link_loop_names_it(tmp_path: Path) -> None:
    import semray

    os.symlink("loop.csv", tmp_path / "loop.csv")
    with pytest.raises(SourceError, match="symbolic link loop"):
        semray.sql("SELECT * FROM t", {"t": tmp_path / "loop.csv"})
