"""The catalog's segments are stored in shards of at most ``Settings.catalog_shard_rows`` rows (``shards.py``).

A publish fills the shards with room, then new ones, and rebuilds the indexes of only the shards it
added rows to; searches and reads see every shard; a re-ingest or a drop removes old rows from every
shard; an older catalog version still reads its own shards; a publish that fails half way registers
nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from semray.catalog import document_ingest, search, store
from semray.catalog.document_pipeline import local_embedder
from semray.catalog.ingest import add_server, drop, refresh
from semray.catalog.search import search_segments
from semray.catalog.shards import RowStream, Shards
from semray.catalog.store import Catalog
from semray.catalog.tables import SEGMENTS
from semray.serving.profiles import resolve_serving
from semray.settings import Settings

SHARD_ROWS = 12
PLACES = ("harbour", "lighthouse", "orchard", "quarry", "vineyard", "glacier", "meadow", "canyon", "marsh", "dune")


def _notes(folder: Path, words: tuple[str, ...], prefix: str = "note") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for number, word in enumerate(words):
        (folder / f"{prefix}-{number:02d}.md").write_text(f"# {word.title()}\n\nThe {word} opens at {number + 6} am.\n")
    return folder


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", catalog_shard_rows=SHARD_ROWS)


def _shard_rows(catalog: Catalog) -> dict[str, int]:
    shards = catalog.table(SEGMENTS)
    assert isinstance(shards, Shards)
    return {table.name: int(table.count_rows()) for table in shards.tables}


def _vector(settings: Settings, text: str) -> Any:
    return local_embedder(resolve_serving(settings.models).embedding).embed([text])[0]


def test_a_publish_fills_shards_of_at_most_the_set_rows_and_searches_see_every_shard(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    report = add_server(settings, str(_notes(tmp_path / "notes", PLACES)), name="notes", engine="local")
    catalog = Catalog.open(settings)
    rows = _shard_rows(catalog)
    assert len(rows) >= 3 and list(rows)[:2] == ["segments", "segments_1"]
    assert max(rows.values()) <= SHARD_ROWS and sum(rows.values()) == report.segments
    assert all(count == SHARD_ROWS for count in list(rows.values())[:-1])  # filled in order
    assert catalog.rows(SEGMENTS).num_rows == report.segments

    shards = catalog.table(SEGMENTS)
    last = shards.tables[-1].search().select(["text"]).limit(None).to_arrow().column("text").to_pylist()
    word = next(place for place in PLACES if any(place in text for text in last))  # a word only the last shard holds
    for mode in ("fts", "vector", "hybrid"):
        hits = search_segments(shards, word, _vector(settings, f"The {word} opens"), k=3, mode=mode)  # type: ignore[arg-type]
        assert word in hits[0].text.lower(), (mode, hits[0])
    everything = search_segments(shards, "opens", None, k=1000, mode="fts")
    assert len(everything) == catalog.rows(SEGMENTS, where="text LIKE '%opens%'").num_rows  # merged, none lost


def test_a_second_dataset_rebuilds_only_the_shards_it_adds_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path)
    add_server(settings, str(_notes(tmp_path / "notes", PLACES)), name="notes", engine="local")
    before = Catalog.open(settings)
    indexed: list[str] = []
    build = search.create_segment_indexes

    def counted(table: Any, **options: Any) -> None:
        indexed.append(table.name)
        build(table, **options)

    monkeypatch.setattr(search, "create_segment_indexes", counted)
    add_server(settings, str(_notes(tmp_path / "more", ("tundra", "savanna"), "more")), name="more", engine="local")
    after = Catalog.open(settings)
    full = [name for name, rows in _shard_rows(before).items() if rows == SHARD_ROWS]
    assert full and not set(full) & set(indexed)  # full shards: neither rewritten nor re-indexed
    assert all(after.manifest.tables[name] == before.manifest.tables[name] for name in full)
    assert indexed and set(indexed) <= set(_shard_rows(after))
    assert after.rows(SEGMENTS, where="dataset = 'more'").num_rows > 0


def test_a_reingest_and_a_drop_remove_old_rows_from_every_shard_and_old_versions_keep_theirs(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    folder = _notes(tmp_path / "notes", PLACES)
    add_server(settings, str(folder), name="notes", engine="local")
    first = Catalog.open(settings).version()
    (folder / "note-01.md").write_text("# Tower\n\nThe tower opens at noon.\n")  # lighthouse -> tower
    refresh(settings, "notes", engine="local")
    catalog = Catalog.open(settings)
    shards = catalog.table(SEGMENTS)
    assert not search_segments(shards, "lighthouse", None, k=5, mode="fts")
    assert "tower" in search_segments(shards, "tower", None, k=1, mode="fts")[0].text.lower()
    old = Catalog.open(settings, version=first)
    assert "lighthouse" in search_segments(old.table(SEGMENTS), "lighthouse", None, k=1, mode="fts")[0].text.lower()

    drop(settings, "notes")
    dropped = Catalog.open(settings)
    assert dropped.rows(SEGMENTS).num_rows == 0
    assert not search_segments(dropped.table(SEGMENTS), "harbour", None, k=5, mode="fts")
    add_server(settings, str(folder), name="notes", engine="local")  # the emptied shards are filled again
    refilled = _shard_rows(Catalog.open(settings))
    assert list(refilled)[: len(_shard_rows(dropped))] == list(_shard_rows(dropped))
    assert max(refilled.values()) <= SHARD_ROWS


def test_a_publish_failing_in_a_later_shard_registers_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path)
    folder = _notes(tmp_path / "notes", PLACES)
    real = store.add_streamed
    calls: list[str] = []

    def failing(table: Any, rows: Any, size: int) -> None:
        calls.append(table.name)
        if table.name == "segments_1":
            raise OSError("injected: the disk filled while writing the second shard")
        real(table, rows, size)

    monkeypatch.setattr(store, "add_streamed", failing)
    with pytest.raises(OSError, match="injected"):
        add_server(settings, str(folder), name="notes", engine="local")
    assert "segments" in calls and Catalog.open(settings).table(SEGMENTS) is None
    monkeypatch.undo()
    report = add_server(settings, str(folder), name="notes", engine="local")
    assert Catalog.open(settings).rows(SEGMENTS).num_rows == report.segments


def test_a_row_stream_hands_out_runs_of_at_most_the_asked_rows_in_order() -> None:
    table = pa.table({"a": list(range(10))})
    stream = RowStream(pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3)))
    runs = []
    while stream.has_rows():
        runs.append(stream.take(4).read_all().column("a").to_pylist())
    assert runs == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert not RowStream(table.slice(0, 0)).has_rows()


def test_shards_read_and_count_across_their_tables(tmp_path: Path) -> None:
    import lancedb

    database = lancedb.connect(str(tmp_path))
    parts = [
        database.create_table(f"t_{number}", pa.table({"a": list(range(number * 5, number * 5 + 5))}))
        for number in range(3)
    ]
    shards = Shards("t", tuple(parts))
    assert shards.count_rows() == 15 and shards.count_rows("a >= 7") == 8
    assert shards.query("a >= 7", ["a"]).column("a").to_pylist() == list(range(7, 15))
    assert shards.query(limit=7).num_rows == 7 and shards.schema.names == ["a"]
    assert np.array_equal(np.sort(shards.query().column("a").to_numpy()), np.arange(15))


def test_staged_batches_do_not_decide_the_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(document_ingest, "STAGED_BATCH_ROWS", 5)
    settings = _settings(tmp_path)
    report = add_server(settings, str(_notes(tmp_path / "notes", PLACES)), name="notes", engine="local")
    rows = _shard_rows(Catalog.open(settings))
    assert all(count == SHARD_ROWS for count in list(rows.values())[:-1]) and sum(rows.values()) == report.segments
