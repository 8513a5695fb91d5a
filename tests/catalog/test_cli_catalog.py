"""``semray catalog ...`` end to end through ``semray.cli.main`` in a temporary state folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corpus import mixed_folder

from semray.cli import main
from semray.settings import Settings

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def test_catalog_commands_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = mixed_folder(tmp_path)
    state = ["--state-dir", str(tmp_path / "state")]
    assert main([*state, "catalog", "add", str(folder), "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "files: 0 unchanged, 0 changed, 11 new, 0 removed" in out and "skipped: 5 file(s)" in out
    assert main([*state, "catalog", "add", str(folder), "--name", "shop", "--in-process"]) == 2
    assert "already catalogued" in capsys.readouterr().err

    assert main([*state, "catalog", "ls", "--format", "json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["name"], row["rows"]) for row in listed] == [
        ("shop", 3),
        ("shop_cities", 3),
        ("shop_records", 2),
        ("shop_sales", 3),
    ]

    assert main([*state, "catalog", "show", "shop"]) == 0
    shown = capsys.readouterr().out
    assert "not summarised: no LLM tier configured" in shown and "bad.txt" in shown and "link.csv" in shown
    assert main([*state, "catalog", "show", "shop_citys"]) == 2
    assert "did you mean 'shop_cities'" in capsys.readouterr().err

    assert main([*state, "catalog", "search", "who supplies pens", "-k", "3"]) == 0
    found = capsys.readouterr().out
    assert "sub/notes.md" in found

    (folder / "a.txt").write_text("Changed text.\n")
    assert main([*state, "catalog", "refresh", "--in-process"]) == 0
    assert "files: 10 unchanged, 1 changed, 0 new, 0 removed" in capsys.readouterr().out

    assert main([*state, "catalog", "drop", "shop_sales"]) == 0
    assert "catalog version 3" in capsys.readouterr().out
    assert main([*state, "catalog", "ls", "--version", "1", "--format", "json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert main([*state, "catalog", "versions"]) == 0
    assert "drop shop_sales" in capsys.readouterr().out


def test_a_catalogued_dataset_is_queried_by_name(tmp_path: Path) -> None:
    from semray.api import read_catalog
    from semray.catalog.ingest import add_server

    settings = Settings(state_dir=tmp_path / "state")
    add_server(settings, str(mixed_folder(tmp_path) / "cities.csv"), name="cities", engine="local")
    query = read_catalog("cities", settings)
    assert query.plan.source.kind == "csv"  # type: ignore[attr-defined]
    assert query.plan.source_schema.names == ("city", "population")  # type: ignore[attr-defined]


@pytest.mark.slow  # 15-50 s on 2 cores: `make test` stays under 13 minutes; CI's test-slow runs it
@pytest.mark.ray
def test_catalog_add_runs_on_ray_data_by_default(
    tmp_path: Path, ray_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = mixed_folder(tmp_path)
    state = ["--state-dir", str(ray_settings.state_dir)]
    os.environ["SEMRAY_CATALOG_DIR"] = str(tmp_path / "catalog")
    try:
        assert main([*state, "catalog", "add", str(folder)]) == 0
        out = capsys.readouterr().out
        assert "documents read: 3" in out and "skipped: 5 file(s)" in out
        (folder / "sub" / "notes.md").write_text("# Suppliers\n\nInk from Rome.\n")
        assert main([*state, "catalog", "refresh", "shop"]) == 0
        assert "10 unchanged, 1 changed" in capsys.readouterr().out
    finally:
        del os.environ["SEMRAY_CATALOG_DIR"]
    from semray.catalog.store import Catalog

    catalog = Catalog.open(Settings(state_dir=ray_settings.state_dir, catalog_dir=tmp_path / "catalog"))
    texts = [row["text"] for row in catalog.rows("segments").to_pylist() if row["document_id"] == "sub/notes.md"]
    assert any("Rome" in text for text in texts)
    assert catalog.rows("segments").schema.field("vector").type.list_size == 384


@pytest.mark.ray
@pytest.mark.slow
def test_the_shared_enron_and_medical_data_ingest(tmp_path: Path, ray_settings: Settings) -> None:
    emails, medical = SHARED_DATA / "enron" / "emails", SHARED_DATA / "medical"
    if not emails.is_dir() or not medical.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (see ../shared/data/README.md)")
    from semray.catalog.ingest import add_server
    from semray.catalog.store import Catalog

    settings = Settings(state_dir=ray_settings.state_dir, catalog_dir=tmp_path / "catalog")
    report = add_server(settings, str(emails), name="enron")
    assert report.documents_read == 250 and report.segments > 250
    medical_report = add_server(settings, str(medical), name="medical")
    assert "medical_text_symptoms_data" in medical_report.datasets
    catalog = Catalog.open(settings)
    assert catalog.dataset("medical_text_symptoms_data").row_count == 1200
