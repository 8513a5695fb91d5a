"""find_snippets: pipe tables, HTML tables through the extraction, enumerations; spans exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semray.catalog.snippets import Snippet, find_snippets, split_cells
from semray.errors import SegmentError, SourceError
from semray.sources.documents import DocumentText, read_document

ENRON = Path(__file__).resolve().parents[3] / "shared" / "data" / "enron" / "emails"


def snippets(text: str, format: str = "markdown") -> list[Snippet]:
    found = find_snippets(DocumentText(text, format, "utf-8"))  # type: ignore[arg-type]
    check_spans(text, found)
    return found


def check_spans(text: str, found: list[Snippet]) -> None:
    previous = 0
    for snippet in found:
        assert previous <= snippet.start < snippet.end <= len(text)
        span = text[snippet.start : snippet.end]
        assert span == span.strip()
        assert all(len(row) == len(snippet.columns) for row in snippet.rows)
        previous = snippet.end


def test_markdown_table_with_alignment_escapes_and_ragged_rows() -> None:
    text = (
        "Costs:\n\n  | region | amount | note |\n  |:--|--:|:-:|\n"
        "| north | 10 | a \\| b |\n| south |\n| x | 1 | 2 | extra |\nafter"
    )
    (table,) = snippets(text)
    assert table.kind == "markdown_table"
    assert table.columns == ("region", "amount", "note")
    assert table.rows == (("north", "10", "a | b"), ("south", "", ""), ("x", "1", "2"))
    assert text[table.start : table.end] == text[text.index("| region") : text.index("\nafter")]


def test_not_tables() -> None:
    assert snippets("a | b\nnot a delimiter\n") == []
    assert snippets("| a | b |\n|---|\n| 1 | 2 |") == []  # delimiter width differs from the header's
    assert snippets("```\n| a | b |\n|---|---|\n```") == []


def test_table_without_body_and_empty_header_names() -> None:
    (table,) = snippets("| | b |\n| --- | --- |")
    assert (table.columns, table.rows) == (("column_1", "b"), ())


def test_html_tables_become_html_table_snippets(tmp_path: Path) -> None:
    path = tmp_path / "t.html"
    path.write_text(
        "<p>Intro</p><table><tr><th>name</th><th>age</th></tr><tr><td>Ann</td><td>31</td></tr>"
        "<tr><td>Bob</td><td>4</td></tr></table><dl><dt>Owner</dt><dd>Ann</dd><dt>Due</dt><dd>May</dd></dl>"
    )
    document = read_document(path)
    found = find_snippets(document)
    check_spans(document.text, found)
    assert [(s.kind, s.columns, s.rows) for s in found] == [
        ("html_table", ("name", "age"), (("Ann", "31"), ("Bob", "4"))),
    ]


def test_key_value_runs_need_three_lines() -> None:
    text = (
        "From: ann@x.org\r\nTo: bob@x.org,\r\n\tcarl@x.org\r\nX-cc: \r\nSubject: Q3: plan\r\n\r\nNote: two\nlines: only"
    )
    (run,) = snippets(text, "text")
    assert run.kind == "enumeration" and run.columns == ("key", "value")
    assert run.rows == (("From", "ann@x.org"), ("To", "bob@x.org, carl@x.org"), ("X-cc", ""), ("Subject", "Q3: plan"))
    assert text[run.start : run.end] == text[: text.index("\r\n\r\n")]


def test_mostly_empty_values_and_urls_are_not_runs() -> None:
    assert snippets("A:\nB:\nC: x\n") == []
    assert snippets("http://a.org\nhttps://b.org\nftp://c.org\n") == []
    # Keys of five words or more read as prose, not as keys.
    assert snippets("This is a whole sentence: with a colon.\nHere is another long one: colon.\nAnd more: x") == []


def test_bulleted_pairs() -> None:
    text = (
        "Team:\n\n- Ann \u2014 lead\n* Bob: backend\n+ Carl - data\n1. Dee \u2013 ops\n\n- just an item\n- another item"
    )
    (run,) = snippets(text)
    assert run.rows == (("Ann", "lead"), ("Bob", "backend"), ("Carl", "data"), ("Dee", "ops"))
    assert text[run.start : run.end] == "- Ann \u2014 lead\n* Bob: backend\n+ Carl - data\n1. Dee \u2013 ops"
    assert snippets("- only: one\n\n- alone: too") == []


def test_tables_and_enumerations_in_order_without_overlap() -> None:
    text = "| k: v | x |\n|---|---|\n| a: b | y |\n\nA: 1\nB: 2\nC: 3"
    assert [s.kind for s in snippets(text)] == ["markdown_table", "enumeration"]


def test_split_cells() -> None:
    assert split_cells("a | b") == ["a", "b"]
    assert split_cells("| a | |") == ["a", ""]
    assert split_cells("| ends with \\|") == ["ends with |"]


def test_snippet_rows_must_fit_the_columns() -> None:
    with pytest.raises(SegmentError, match="row 0 has 1 cells for 2 columns"):
        Snippet("enumeration", ("key", "value"), (("a",),), 0, 1)


_LINES = st.sampled_from(
    ["| a | b |", "|---|---|", "| 1 |", "|:-:|", "Key: value", "Other key: v", "x:", "- k: v", "- k \u2014 v",
     "", "text", "```", "  cont inued", "a | b", "\\|", "|"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINES, max_size=30), format=st.sampled_from(["markdown", "html", "text"]))
def test_spans_are_exact_for_any_text(lines: list[str], format: str) -> None:
    snippets("\n".join(lines), format)


@pytest.mark.skipif(not ENRON.is_dir(), reason="the shared Enron e-mails are not on this machine")
def test_every_enron_email_has_its_headers_as_an_enumeration() -> None:
    for path in sorted(ENRON.glob("*.txt")):
        try:
            document = read_document(path)
        except SourceError as error:
            pytest.fail(f"{path.name}: {error}")
        found = find_snippets(document)
        check_spans(document.text, found)
        headers = found[0]
        assert headers.kind == "enumeration" and headers.start == 0, path.name
        assert {"Message-ID", "Subject"} <= {key for key, _ in headers.rows}, path.name
