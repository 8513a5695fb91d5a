"""segment_document: sections from headings (Markdown, HTML, PDF layout), paragraphs, chunks, invariants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segment_checks import check_segmentation

from semray.catalog.segments import Segment, containing_segment, segment_document
from semray.errors import SegmentError, SourceError
from semray.sources.documents import DocumentText, read_document

ENRON = Path(__file__).resolve().parents[3] / "shared" / "data" / "enron" / "emails"


def tree(segment: Segment) -> tuple[object, ...]:
    """(level, last path element, text) with the children's trees: the shape a test compares."""
    return (segment.level, segment.path[-1], segment.text, *[tree(child) for child in segment.children])


def segment(text: str, format: str = "markdown", max_chunk_chars: int = 1000) -> Segment:
    document = DocumentText(text, format, "utf-8")  # type: ignore[arg-type]
    root = segment_document(document, title="doc", max_chunk_chars=max_chunk_chars)
    check_segmentation(document, root, "doc")
    return root


def test_markdown_headings_nest_by_level() -> None:
    text = "Intro line.\n\n# One\nbody one\n\n## One.A\n\na\n\n### deep\nd\n\n## One.B ##\nb\n\n# Two\n\ntwo"
    root = segment(text)
    assert [child.level for child in root.children] == ["paragraph", "section", "section"]
    one = root.children[1]
    assert tree(one) == (
        "section", "One", text[text.index("# One") : text.index("\n\n# Two")],
        ("paragraph", "One", "# One"),
        ("paragraph", "One", "body one"),
        ("section", "One.A", "## One.A\n\na\n\n### deep\nd",
         ("paragraph", "One.A", "## One.A"), ("paragraph", "One.A", "a"),
         ("section", "deep", "### deep\nd", ("paragraph", "deep", "### deep"), ("paragraph", "deep", "d"))),
        ("section", "One.B", "## One.B ##\nb", ("paragraph", "One.B", "## One.B ##"), ("paragraph", "One.B", "b")),
    )  # fmt: skip
    assert one.children[2].children[2].path == ("doc", "One", "One.A", "deep")


def test_a_deeper_heading_first_still_nests_under_the_next_shallower_one() -> None:
    root = segment("### small\nx\n\n# big\ny")
    assert [(child.level, child.path) for child in root.children] == [
        ("section", ("doc", "small")),
        ("section", ("doc", "big")),
    ]


def test_setext_headings_rules_and_code_fences() -> None:
    text = "Title\n=====\n\ntext\n\n---\n\nSub\n---\n\n```sh\n# comment\n\nls\n```\n\n#hashtag is not a heading"
    root = segment(text)
    assert [s.path[-1] for s in root.walk() if s.level == "section"] == ["Title", "Sub"]
    sub = root.children[0].children[-1]
    assert [child.text for child in sub.children] == [
        "Sub\n---",
        "```sh\n# comment\n\nls\n```",
        "#hashtag is not a heading",
    ]


def test_plain_text_rules_are_not_setext_headings() -> None:
    text = (
        "Nov 14 works for me. Please put it on my calendar and I will call you when I am back.\n"
        "--------------------------\nSent from my phone\n\n----------\n----------\n\nShort title\n------"
    )
    assert [s.path[-1] for s in segment(text, format="text").walk() if s.level == "section"] == ["Short title"]
    assert [s.path[-1] for s in segment("Long title here\n---", format="markdown").walk()][-1] == "Long title here"
    assert all(s.level != "section" for s in segment("Long title here\n---", format="text").walk())


def test_a_document_without_structure_has_paragraphs_under_the_document() -> None:
    root = segment("first para\nstill first\n\n\n  second  \n\nthird", format="text")
    assert [(child.level, child.text) for child in root.children] == [
        ("paragraph", "first para\nstill first"),
        ("paragraph", "second"),
        ("paragraph", "third"),
    ]


def test_empty_and_blank_documents() -> None:
    for text in ("", "  \n\n \t"):
        root = segment(text)
        assert (root.text, root.children) == ("", ())


def test_long_paragraphs_chunk_at_sentences_never_mid_word() -> None:
    text = "Alpha beta gamma. Delta epsilon zeta eta. Theta iota! Kappa lambda mu nu xi omicron pi rho sigma tau."
    root = segment(text, max_chunk_chars=40)
    chunks = [chunk.text for chunk in root.children[0].children]
    assert chunks == [
        "Alpha beta gamma.",
        "Delta epsilon zeta eta. Theta iota!",
        "Kappa lambda mu nu xi omicron pi rho",
        "sigma tau.",
    ]
    words = set(text.split())
    assert all(set(chunk.split()) <= words for chunk in chunks)


def test_abbreviations_do_not_end_sentences_and_long_words_stay_whole() -> None:
    root = segment("See e.g. the plan. " + "x" * 30 + " end.", max_chunk_chars=20)
    assert [chunk.text for chunk in root.children[0].children] == ["See e.g. the plan.", "x" * 30, "end."]


def test_a_short_paragraph_has_no_chunks() -> None:
    assert segment("short.", max_chunk_chars=6).children[0].children == ()
    with pytest.raises(SegmentError, match="max_chunk_chars must be at least 1"):
        segment("x", max_chunk_chars=0)


def test_html_headings_come_from_the_extraction(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text("<h1>Report</h1><p>intro</p><h2>Costs</h2><p>high</p><table><tr><th>a</th></tr></table>")
    document = read_document(path)
    root = segment_document(document, title="page.html")
    check_segmentation(document, root, "page.html")
    assert [s.path for s in root.walk() if s.level == "section"] == [
        ("page.html", "Report"),
        ("page.html", "Report", "Costs"),
    ]


def test_pdf_layout_headings() -> None:
    text = (
        "ANNUAL REPORT\nprepared by the board\n\n1 Introduction\nWe grew.\n1.1 Scope\nAll regions.\n"
        "Items:\n1. first item\n2. second item\n2 Results\nProfit rose.\nACME CORP\n\nACME CORP\n\nACME CORP\n"
        "THIS LINE ENDS WITH A PERIOD.\n3. Outlook\nBright."
    )
    root = segment(text, format="pdf")
    sections = [(len(s.path) - 1, s.path[-1]) for s in root.walk() if s.level == "section"]
    assert sections == [
        (1, "ANNUAL REPORT"),
        (1, "1 Introduction"),
        (2, "1.1 Scope"),
        (1, "2 Results"),
        (1, "3. Outlook"),
    ]


def test_markdown_rules_do_not_apply_pdf_heuristics() -> None:
    assert all(child.level == "paragraph" for child in segment("INTRODUCTION\n\n1 Scope\ntext").children)


def test_containing_segment_finds_the_deepest() -> None:
    text = "# A\n\none two. three four.\n\n# B\n\nfive"
    root = segment(text, max_chunk_chars=12)
    position = text.index("three")
    found = containing_segment(root, position, position + 5)
    assert (found.level, found.text) == ("chunk", "three four.")
    assert containing_segment(root, 0, len(text)) is root


def test_segments_refuse_broken_invariants() -> None:
    child = Segment("paragraph", ("d",), 1, "ab", 0, 2)
    with pytest.raises(SegmentError, match="has ordinal 1"):
        Segment("document", ("d",), 0, "ab", 0, 2, (child,))
    with pytest.raises(SegmentError, match="does not fit its text"):
        Segment("chunk", ("d",), 0, "abc", 0, 2)
    with pytest.raises(SegmentError, match="lies outside it"):
        Segment("document", ("d",), 0, "a", 0, 1, (Segment("paragraph", ("d",), 0, "ab", 0, 2),))
    with pytest.raises(SegmentError, match="cannot hold a section"):
        Segment("paragraph", ("d",), 0, "ab", 0, 2, (Segment("section", ("d",), 0, "ab", 0, 2),))
    with pytest.raises(SegmentError, match="not one of"):
        Segment("page", ("d",), 0, "", 0, 0)


_PIECES = st.sampled_from(
    [
        "# Head", "## Sub head", "###### six", "#no", "Title", "=====", "-----", "---", "```", "~~~",
        "", "", "  ", "\t", "word", "Two words.", "A sentence. Another one! Third?", "x" * 45, "e.g. abbrev",
        "| a | b |", "|---|---|", "- item: value", "Key: value", "1 Intro", "1.2 Deep", "ALL CAPS LINE",
        "3. listed", "  indented", "\r", "caf\u00e9 \u2014 na\u00efve", "\u00a0", "end.",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_PIECES, max_size=40),
    format=st.sampled_from(["text", "markdown", "html", "pdf"]),
    max_chunk_chars=st.integers(min_value=1, max_value=120),
)
def test_invariants_hold_for_any_text(lines: list[str], format: str, max_chunk_chars: int) -> None:
    segment("\n".join(lines), format=format, max_chunk_chars=max_chunk_chars)


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=300), max_chunk_chars=st.integers(1, 50))
def test_invariants_hold_for_arbitrary_characters(text: str, max_chunk_chars: int) -> None:
    segment(text, max_chunk_chars=max_chunk_chars)


@pytest.mark.skipif(not ENRON.is_dir(), reason="the shared Enron e-mails are not on this machine")
def test_every_enron_email_segments() -> None:
    emails = sorted(ENRON.glob("*.txt"))
    assert emails
    chunked = 0
    for path in emails:
        try:
            document = read_document(path)
        except SourceError as error:
            pytest.fail(f"{path.name}: {error}")
        root = segment_document(document, title=path.name, max_chunk_chars=400)
        check_segmentation(document, root, path.name)
        chunked += any(s.level == "chunk" for s in root.walk())
        assert all(
            len(chunk.text) <= 400 or not re.search(r"\s", chunk.text)
            for chunk in root.walk()
            if chunk.level == "chunk"
        )
    assert chunked > 0
