"""A catalog publish streams the staged segments and snippets in batches, and publishes them whole.

The publish of a collection larger than one batch (``STAGED_BATCH_ROWS`` set to 7) writes exactly the
rows of a publish in one batch; the stream never hands the table more than one batch at a time.
Peak memory is measured by ``benchmarks/ingest.py``, not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from semray.catalog import document_ingest
from semray.catalog.ingest import add_server
from semray.catalog.store import Catalog
from semray.catalog.tables import SEGMENTS, SNIPPETS
from semray.settings import Settings

BATCH = 7


def _collection(root: Path, documents: int = 12) -> Path:
    folder = root / "notes"
    folder.mkdir()
    for number in range(documents):
        sections = "\n\n".join(
            f"## Part {part}\n\nNote {number} part {part} says the harbour opens at {part + 6} am.\n\n"
            f"| boat | hour |\n|---|---|\n| b{number}-{part} | {part + 6} |\n| c{number}-{part} | {part + 7} |"
            for part in range(3)
        )
        (folder / f"note-{number:02d}.md").write_text(f"# Note {number}\n\n{sections}\n")
    return folder


def _published(settings: Settings, table: str) -> pa.Table:
    return Catalog.open(settings).rows(table).sort_by("segment_id")


def test_a_publish_larger_than_one_batch_is_complete_and_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _collection(tmp_path)
    whole = Settings(state_dir=tmp_path / "whole")
    add_server(whole, str(folder), engine="local")  # 4,096 rows a batch: one batch

    batches: list[int] = []
    read_staged = document_ingest._read_staged

    def counted(path: Path) -> pa.RecordBatchReader | None:
        reader = read_staged(path)
        if reader is None:
            return None

        def batches_of(stream: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
            for batch in stream:
                batches.append(batch.num_rows)
                yield batch

        return pa.RecordBatchReader.from_batches(reader.schema, batches_of(reader))

    monkeypatch.setattr(document_ingest, "STAGED_BATCH_ROWS", BATCH)
    monkeypatch.setattr(document_ingest, "_read_staged", counted)
    streamed = Settings(state_dir=tmp_path / "streamed")
    add_server(streamed, str(folder), engine="local")

    segments, expected = _published(streamed, SEGMENTS), _published(whole, SEGMENTS)
    snippets = Catalog.open(streamed).rows(SNIPPETS)
    assert segments.num_rows == expected.num_rows > 4 * BATCH  # the collection spans several batches
    assert snippets.num_rows == Catalog.open(whole).rows(SNIPPETS).num_rows > 0
    assert sum(batches) == segments.num_rows + snippets.num_rows  # every staged row went through the stream
    assert max(batches) <= BATCH and len(batches) > 2
    plain = [name for name in segments.column_names if name != "vector"]
    assert segments.select(plain).equals(expected.select(plain))
    assert np.allclose(np.array(segments["vector"].to_pylist()), np.array(expected["vector"].to_pylist()), atol=1e-6)
