"""A small mixed folder for catalog tests: tables, documents and every kind of bad file."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def mixed_folder(root: Path) -> Path:
    """Readable: cities.csv, sales.parquet, records.jsonl (varying keys), a.txt, sub/notes.md, sub/deep/page.html.
    Skipped: bad.txt (undecodable), broken.parquet (corrupt), empty.csv, link.csv (a symlink), image.png."""
    folder = root / "shop"
    (folder / "sub" / "deep").mkdir(parents=True)
    (folder / "cities.csv").write_text("city,population\nOslo,700000\nRome,2800000\nOslo,700001\n")
    pq.write_table(pa.table({"item": ["pen", "ink", "pen"], "price": [1.5, 3.0, 1.25]}), folder / "sales.parquet")
    (folder / "records.jsonl").write_text('{"id": 1, "name": "a"}\n{"id": 2, "tag": "x"}\n')
    (folder / "a.txt").write_text("Invoices are due within thirty days of delivery.\n")
    (folder / "sub" / "notes.md").write_text(
        "# Suppliers\n\nOur pens come from Oslo.\n\n| item | supplier |\n|---|---|\n| pen | Nordic |\n"
    )
    (folder / "sub" / "deep" / "page.html").write_text(
        "<html><title>Ink</title><body><p>Ink is blue.</p></body></html>"
    )
    (folder / "bad.txt").write_bytes(b"\xff\xfe\x00\x01\x02garbage\x00\x00\x9c")
    (folder / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    (folder / "empty.csv").write_bytes(b"")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n")
    os.symlink(folder / "cities.csv", folder / "link.csv")
    return folder
