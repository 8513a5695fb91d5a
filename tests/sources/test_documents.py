"""read_document: formats by suffix, encodings detected strictly, HTML structure, PDF text, bad files."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter
from structlog.testing import capture_logs

from semray.errors import SourceError
from semray.sources.documents import DOCUMENT_SUFFIXES, DocumentText, read_document
from semray.sources.html_text import html_to_text


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal PDF (Helvetica text, one line per string) with a correct cross-reference table."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * index} 0 R" for index in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for index, lines in enumerate(pages):
        shown = " T* ".join(
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj" for line in lines
        )
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {5 + 2 * index} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = None
    if title is not None:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    out.write(f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def test_suffixes_are_the_documented_ones() -> None:
    assert frozenset({".txt", ".md", ".markdown", ".html", ".htm", ".pdf"}) == DOCUMENT_SUFFIXES


def test_markdown_and_text_read_as_utf8(tmp_path: Path) -> None:
    doc = read_document(write(tmp_path, "notes.MD", "# Über\n\nnaïve café"))
    assert doc == DocumentText("# Über\n\nnaïve café", "markdown", "utf-8")
    assert read_document(write(tmp_path, "a.txt", "plain")).format == "text"


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("\ufeffcafé\n".encode(), "utf-8"),
        ("café\n".encode("utf-16"), "utf-16-le"),
        ("café\n".encode("utf-16-be"), "utf-16-be"),
        ("café et thé\n".encode("utf-16-le"), "utf-16-le"),
        ("café\n".encode("utf-32"), "utf-32-le"),
    ],
)
def test_byte_order_marks_and_utf16_are_detected(tmp_path: Path, data: bytes, encoding: str) -> None:
    doc = read_document(write(tmp_path, "a.txt", data))
    assert (doc.text.split()[0], doc.encoding) == ("café", encoding)


def test_single_byte_fallback_is_logged(tmp_path: Path) -> None:
    with capture_logs() as logs:
        latin = read_document(write(tmp_path, "a.txt", "café au lait, s'il vous plaît\n".encode("latin-1")))
        smart = read_document(write(tmp_path, "b.txt", "\u201cquoted\u201d text\n".encode("cp1252")))
    assert (latin.text, latin.encoding) == ("café au lait, s'il vous plaît\n", "iso8859-1")
    assert (smart.text, smart.encoding) == ("\u201cquoted\u201d text\n", "cp1252")
    assert [entry["event"] for entry in logs] == ["document_encoding_guessed"] * 2


def test_binary_is_refused_with_offset_and_the_fix(tmp_path: Path) -> None:
    path = write(tmp_path, "blob.txt", b"ok line\n\x00\x9f\xff\xfe\x81binary")
    with pytest.raises(SourceError, match=r"blob\.txt.*not valid utf-8.*byte offset 9 \(line 2\).*encoding="):
        read_document(path)


def test_explicit_encoding_decodes_strictly(tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "caf\u00e9".encode("cp1252"))
    assert read_document(path, encoding="cp1252").text == "café"
    with pytest.raises(SourceError, match="not valid utf-8"):
        read_document(path, encoding="utf-8")
    with pytest.raises(SourceError, match="unknown encoding"):
        read_document(path, encoding="klingon")


def test_html_keeps_structure(tmp_path: Path) -> None:
    page = """<!doctype html><html><head><title>Q3  report</title><style>p {color: red}</style>
    <script>var x = "<p>no</p>";</script></head><body>
    <h1>Results</h1><p>Sales &amp; costs   rose.<br>Next line.</p>
    <h3>Detail</h3><ul><li>north</li><li>south<ol><li>inner</li></ol></li></ul>
    <table><tr><th>region</th><th>a|b</th></tr><tr><td>north</td><td>10</td></tr><tr><td>south</td></table>
    <dl><dt>Owner</dt><dd>Ann</dd><dt>Due</dt><dd>May</dd></dl><pre>x = 1

    y = 2</pre></body></html>"""
    doc = read_document(write(tmp_path, "r.html", page))
    assert doc.title == "Q3 report"
    assert doc.text == (
        "# Results\n\nSales & costs rose.\nNext line.\n\n### Detail\n\n- north\n- south\n  1. inner\n\n"
        "| region | a\\|b |\n| --- | --- |\n| north | 10 |\n| south |  |\n\nOwner: Ann\nDue: May\n\n"
        "```\nx = 1\n\n    y = 2\n```"
    )


def test_html_meta_charset_is_honoured(tmp_path: Path) -> None:
    page = '<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252"></head>'
    doc = read_document(write(tmp_path, "a.htm", page.encode() + b"<p>\x93quoted\x94 \x80</p>"))
    assert (doc.text, doc.encoding) == ("\u201cquoted\u201d \u20ac", "cp1252")


def test_html_without_markup_and_broken_markup() -> None:
    assert html_to_text("just text &lt; more") == ("just text < more", None)
    text, _ = html_to_text("<p>open <b>bold <i>both</p><p>next</div></span>")
    assert text == "open bold both\n\nnext"


def test_pdf_pages_are_joined(tmp_path: Path) -> None:
    data = make_pdf([["1 Introduction", "Budgets rose (again)."], ["2 Results", "All good."]], title="Annual")
    doc = read_document(write(tmp_path, "r.pdf", data))
    assert doc.format == "pdf" and doc.encoding is None and doc.title == "Annual"
    assert doc.text == "1 Introduction\nBudgets rose (again).\n\n2 Results\nAll good."
    assert doc.page_starts == (0, doc.text.index("2 Results"))


def test_pdf_with_owner_password_only_opens(tmp_path: Path) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["Secret plans"]]))))
    writer.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    assert read_document(write(tmp_path, "o.pdf", out.getvalue())).text == "Secret plans"


def test_encrypted_pdf_is_refused(tmp_path: Path) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["Secret plans"]]))))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(SourceError, match=r"locked\.pdf' is an encrypted PDF that needs a password; decrypt it"):
        read_document(write(tmp_path, "locked.pdf", out.getvalue()))


@pytest.mark.parametrize(
    "data", [b"", b"not a pdf at all", make_pdf([["x"]])[:120], b"%PDF-1.4\n" + bytes(range(256)) * 2]
)
def test_corrupt_pdf_is_refused_naming_the_file(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(SourceError, match=r"broken\.pdf' is not a readable PDF"):
        read_document(write(tmp_path, "broken.pdf", data))


def test_size_limit_names_the_limit_and_the_keyword(tmp_path: Path) -> None:
    path = write(tmp_path, "big.md", "x" * 3000)
    with pytest.raises(SourceError, match=r"big\.md' is 0\.0 MiB, over the 0\.0 MiB limit.*max_bytes=3000"):
        read_document(path, max_bytes=2048)
    assert len(read_document(path, max_bytes=3000).text) == 3000


def test_only_regular_files(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.txt"
    os.mkfifo(pipe)
    with pytest.raises(SourceError, match="named pipe"):
        read_document(pipe)
    with pytest.raises(SourceError, match="is a folder"):
        (tmp_path / "dir.md").mkdir()
        read_document(tmp_path / "dir.md")
    with pytest.raises(SourceError, match="does not exist"):
        read_document(tmp_path / "missing.md")
    with pytest.raises(SourceError, match=r"not a document semray reads \(suffixes: \.htm"):
        read_document(write(tmp_path, "data.csv", "a,b"))


def test_glob_characters_in_a_name_are_literal(tmp_path: Path) -> None:
    write(tmp_path, "report [a].md", "right")
    write(tmp_path, "report a.md", "wrong")
    assert read_document(tmp_path / "report [a].md").text == "right"
