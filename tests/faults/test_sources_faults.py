"""Fault corpus for the file readers, content (issue 26): no row or column is lost silently.

Families: CSV headers with repeated or empty names, a column / JSON key / value type first seen
after the inference sample, and quotes never closed. Encodings, paths that are not regular
files and the edges every reader defines are ``test_source_file_faults.py``; the case types
and checks are ``source_cases.py``. Every case asserts a ``SourceError`` whose message names the
cause (file, line / row, column, and the option that fixes it), or the documented correct
result compared value by value with what the file holds.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from source_cases import Build, Edge, Fault, check_edge, check_fault, folder, lines, numbers, write

import semray
from semray.errors import SourceError

pytestmark = pytest.mark.timeout(30)

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


# -- 5. column names that SQL cannot tell apart ------------------------------------------------
# DuckDB folds identifier case: with columns 'a' and 'A', the expression "A" reads 'a'.


def _parquet(name: str, table: pa.Table) -> Build:
    def build(tmp: Path) -> Path:
        pq.write_table(table, tmp / name)
        return tmp / name

    return build


for label, header, first, second in [("a-A", "a,A", "a", "A"), ("Id-ID", "x,Id,ID", "Id", "ID")]:
    FAULTS[f"csv-header-names-differ-only-in-case-{label}"] = Fault(
        "csv",
        lambda tmp, header=header: write(tmp / "case.csv", lines(header, ",".join(["1"] * len(header.split(","))))),
        (rf"columns '{first}' and '{second}', which differ only in case", r"case\.csv", "rename one"),
    )
FAULTS["csv-header-rowid-in-capitals"] = Fault(
    "csv", lambda tmp: write(tmp / "rid.csv", lines("_ROWID,a", "1,2")), (r"'_ROWID', which semray reserves",)
)
FAULTS["jsonl-keys-differ-only-in-case"] = Fault(
    "json", _jsonl("case.jsonl", [{"k": 1, "K": 2}]), (r"'k' and 'K', which differ only in case", r"case\.jsonl")
)
FAULTS["jsonl-key-in-another-case-on-a-later-line"] = Fault(
    "json", _jsonl("case.jsonl", [{"k": 1}, {"K": 2}]), (r"'k' and 'K', which differ only in case",)
)
FAULTS["parquet-columns-differ-only-in-case"] = Fault(
    "parquet", _parquet("case.parquet", pa.table({"x": [1], "X": [2]})), (r"'x' and 'X', which differ only in case",)
)
FAULTS["parquet-rowid-in-another-case"] = Fault(
    "parquet", _parquet("rid.parquet", pa.table({"_RowId": [1], "v": [2]})), (r"'_RowId', which semray reserves",)
)
EDGES["csv-names-that-differ-beyond-case-are-two-columns"] = Edge(
    "csv", lambda tmp: write(tmp / "two.csv", lines("a,a_", "1,2")), {"a": [1], "a_": [2]}
)


@pytest.mark.parametrize(
    "columns", [{"t": [1], "T": [2]}, {"_ROWID": [1]}, {"Name": ["x"], "other": [0], "nAME": ["y"]}]
)
def test_an_in_memory_table_with_names_sql_cannot_tell_apart_is_refused(columns: dict[str, list[object]]) -> None:
    with pytest.raises(SourceError, match=r"differ only in case|reserves for row ids"):
        semray.from_arrow(pa.table(columns))


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_a_typed_error_naming_its_cause(tmp_path: Path, name: str) -> None:
    check_fault(FAULTS[name], tmp_path)


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_reads_exactly_what_the_file_holds(tmp_path: Path, name: str) -> None:
    check_edge(EDGES[name], tmp_path)


def test_corpus_is_large_enough() -> None:
    from test_source_file_faults import EDGES as FILE_EDGES
    from test_source_file_faults import FAULTS as FILE_FAULTS

    assert len(FAULTS) + len(EDGES) + len(FILE_FAULTS) + len(FILE_EDGES) >= 60
