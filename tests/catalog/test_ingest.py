"""Ingest in process (the same read/segment/embed functions as the Ray path): bad files, re-ingest,
failed publishes, name clashes, version pins."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from corpus import mixed_folder

from semray.catalog import store
from semray.catalog.ingest import add_server, drop, refresh
from semray.catalog.store import Catalog
from semray.catalog.summaries import NOT_SUMMARISED
from semray.errors import CatalogError
from semray.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state")


def _snapshot(catalog: Catalog) -> dict[str, list[dict[str, object]]]:
    tables = {}
    for name in store.TABLES:
        rows = catalog.rows(name)
        columns = [column for column in rows.column_names if column not in ("vector", "ingested_at")]
        tables[name] = sorted(json.dumps(row, sort_keys=True, default=str) for row in rows.select(columns).to_pylist())
    return tables


def test_a_mixed_folder_is_catalogued_and_bad_files_are_skipped_with_reasons(
    tmp_path: Path, settings: Settings
) -> None:
    folder = mixed_folder(tmp_path)
    report = add_server(settings, str(folder), engine="local")
    assert report.datasets == ("shop_cities", "shop_records", "shop_sales", "shop")
    skipped = dict(report.skipped)
    assert set(skipped) == {"bad.txt", "broken.parquet", "empty.csv", "image.png", "link.csv"}
    assert "symbolic link" in skipped["link.csv"] and "unsupported" in skipped["image.png"]
    assert "parquet" in skipped["broken.parquet"] and "empty" in skipped["empty.csv"]
    assert report.files.new == 11 and report.documents_read == 3 and report.snippets == 1

    catalog = Catalog.open(settings)
    documents = catalog.dataset("shop")
    assert (documents.kind, documents.row_count, documents.summary_status) == ("documents", 3, NOT_SUMMARISED)
    scanned = pq.read_table(catalog.scan("shop").path)
    assert sorted(scanned.column("document_id").to_pylist()) == ["a.txt", "sub/deep/page.html", "sub/notes.md"]
    assert catalog.dataset("shop_records").schema_status.startswith("inferred: keys vary")
    assert catalog.scan("shop_cities").kind == "csv"
    cities = {row["column"]: row for row in catalog.columns("shop_cities")}
    assert cities["population"]["max"] == "2800000" and json.loads(cities["city"]["top_values_json"]) == [["Oslo", 2]]
    segments = catalog.rows("segments")
    assert set(segments.column("level").to_pylist()) >= {"document", "paragraph"}
    ids = set(segments.column("segment_id").to_pylist())
    assert all(parent in ids for parent in segments.column("parent_id").to_pylist() if parent is not None)
    (snippet,) = catalog.rows("snippets").to_pylist()
    assert snippet["segment_id"] in ids and json.loads(snippet["rows_json"]) == [["pen", "Nordic"]]
    file_reasons = {row["path"]: row["status"] for row in catalog.files("shop")}
    assert file_reasons["bad.txt"] == "skipped"

    with pytest.raises(CatalogError, match="did you mean 'shop_sales'"):
        catalog.dataset("shop_sale")


def test_reingest_reads_only_the_touched_file(tmp_path: Path, settings: Settings) -> None:
    folder = mixed_folder(tmp_path)
    add_server(settings, str(folder), engine="local")
    before = Catalog.open(settings)
    old_segments = {row["segment_id"] for row in before.rows("segments").to_pylist() if row["document_id"] == "a.txt"}
    (folder / "sub" / "notes.md").write_text("# Suppliers\n\nPens now come from Rome.\n")
    (folder / "cities.csv").unlink()
    (report,) = refresh(settings, "shop", engine="local")
    assert report.documents_read == 1  # only the touched document was read again
    assert report.datasets == ("shop",) and report.removed_datasets == ("shop_cities",)
    assert (report.files.changed, report.files.removed, report.files.new) == (1, 1, 0)
    assert report.files.unchanged == 9
    after = Catalog.open(settings)
    texts = [row["text"] for row in after.rows("segments").to_pylist() if row["document_id"] == "sub/notes.md"]
    assert any("Rome" in text for text in texts) and not any("Oslo" in text for text in texts)
    kept = {row["segment_id"] for row in after.rows("segments").to_pylist() if row["document_id"] == "a.txt"}
    assert kept == old_segments
    assert after.rows("snippets").num_rows == 0  # the table left with the old notes.md
    assert "shop_cities" not in {record.name for record in after.datasets()}
    assert pq.read_table(after.scan("shop").path).num_rows == 3


def test_a_publish_that_fails_half_way_leaves_the_catalog_as_it_was(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = mixed_folder(tmp_path)
    add_server(settings, str(folder), engine="local")
    before = _snapshot(Catalog.open(settings))
    (folder / "a.txt").write_text("Payment terms changed to sixty days.\n")
    (folder / "sales.parquet").unlink()
    applied = []
    original = Catalog._apply

    def failing(self: Catalog, change: store.TableChange, current: store.Manifest) -> int | None:
        if len(applied) == 3:  # datasets, columns and files written; segments not
            raise OSError("disk full (injected)")
        applied.append(change.table)
        return original(self, change, current)

    monkeypatch.setattr(Catalog, "_apply", failing)
    with pytest.raises(OSError, match="injected"):
        refresh(settings, "shop", engine="local")
    monkeypatch.undo()
    catalog = Catalog.open(settings)
    assert catalog.version() == 1 and _snapshot(catalog) == before
    assert not list((settings.catalog_path / "_staging").iterdir())
    # the next ingest rolls the orphan writes back before applying its own
    (report,) = refresh(settings, "shop", engine="local")
    assert report.removed_datasets == ("shop_sales",) and report.version == 2
    names = [record.name for record in Catalog.open(settings).datasets()]
    assert names == ["shop", "shop_cities", "shop_records"]


def test_name_clashes_are_refused_with_a_free_name(tmp_path: Path, settings: Settings) -> None:
    folder = mixed_folder(tmp_path)
    add_server(settings, str(folder / "cities.csv"), name="shop", engine="local")
    with pytest.raises(CatalogError, match="--name shop_2"):
        add_server(settings, str(folder), engine="local")
    with pytest.raises(CatalogError, match="already catalogued as 'shop'"):
        add_server(settings, str(folder / "cities.csv"), name="other", engine="local")
    report = add_server(settings, str(folder), name="shop_2", engine="local")
    assert "shop_2_cities" in report.datasets


def test_a_version_can_be_pinned(tmp_path: Path, settings: Settings) -> None:
    folder = mixed_folder(tmp_path)
    add_server(settings, str(folder / "cities.csv"), name="cities", engine="local")
    add_server(settings, str(folder / "sales.parquet"), name="sales", engine="local")
    version, names = drop(settings, "cities")
    assert (version, names) == (3, ("cities",))
    assert [record.name for record in Catalog.open(settings).datasets()] == ["sales"]
    pinned = Catalog.open(settings, version=1)
    assert [record.name for record in pinned.datasets()] == ["cities"]
    assert pinned.dataset("cities").row_count == 3
    with pytest.raises(CatalogError, match="pinned"):
        pinned.publish(store.ChangeSet(1, "x"))
    with pytest.raises(CatalogError, match="version 9 does not exist"):
        Catalog.open(settings, version=9)
    with pytest.raises(CatalogError, match="at catalog version 1"):
        pinned.dataset("sales")


def test_a_folder_with_nothing_readable_is_an_error_naming_what_was_found(tmp_path: Path, settings: Settings) -> None:
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"\x89PNG")
    (folder / "b.txt").write_bytes(b"\xff\xfe\x00\x01\x02garbage\x00\x00\x9c")
    with pytest.raises(CatalogError, match=r"nothing readable in .*found 1 \.png, 1 \.txt.*b\.txt"):
        add_server(settings, str(folder), engine="local")
    assert Catalog.open(settings).version() == 0


def test_a_document_over_the_stream_threshold_is_read_in_parts_and_the_rest_is_catalogued(
    tmp_path: Path, settings: Settings
) -> None:
    """A text document past ``Settings.catalog_stream_bytes`` (lowered here) is read in parts, not skipped
    (tests/catalog/test_streamed_documents.py checks the parts)."""
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "ok.txt").write_text("A small note about pens.\n")
    (folder / "huge.txt").write_text("Paragraph about ink and paper.\n\n" * 200)
    report = add_server(settings.model_copy(update={"catalog_stream_bytes": 1024}), str(folder), engine="local")
    assert report.skipped == () and report.documents_read == 2
    assert Catalog.open(settings).dataset("big").row_count == 2
