"""The agents' plans over catalogued datasets are pinned to the catalog version the agents described."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agent_fixtures import catalog_of, gold_document

from semray.operators import walk
from semray.operators.relational import CatalogPin, Scan
from semray.planner.agents import check_plan_document
from semray.planner.agents.source_view import SourceCatalog

DATASETS = ("reviews", "products")


def _pinned(folder: Path, version: int) -> SourceCatalog:
    """The fixture's datasets as if read from the catalog at ``version``."""
    files = catalog_of(folder)
    profiles = [
        dataclasses.replace(
            files.describe(name), catalog=CatalogPin(dataset=name, version=version, content_hash=f"hash-{name}")
        )
        for name in DATASETS
    ]
    return SourceCatalog(profiles)


def _scans(report: object) -> list[Scan]:
    plan = report.plan  # type: ignore[attr-defined]
    assert plan is not None, report
    return [node for node in walk(plan) if isinstance(node, Scan)]


def test_a_profile_from_the_catalog_gives_a_pinned_source_and_says_its_version(tmp_path: Path) -> None:
    profile = _pinned(tmp_path, 4).describe("reviews")
    assert profile.source().catalog == CatalogPin(dataset="reviews", version=4, content_hash="hash-reviews")
    assert "(catalog version 4)" in profile.describe().splitlines()[0]
    unpinned = catalog_of(tmp_path).describe("reviews")
    assert unpinned.source().catalog is None and "catalog version" not in unpinned.describe()


def test_the_validator_pins_every_scan_of_a_catalogued_dataset(tmp_path: Path) -> None:
    catalog = _pinned(tmp_path, 7)
    report = check_plan_document(gold_document(catalog), catalog, DATASETS)
    assert report.ok and report.repairs == ()  # pinning is not a repair of the draft
    pins = {scan.source.catalog.dataset: scan.source.catalog for scan in _scans(report) if scan.source.catalog}
    assert pins == {name: catalog.describe(name).catalog for name in DATASETS}
    described = [scan.source.describe() for scan in _scans(report)]
    assert sorted(text.split(" ")[0] for text in described) == ["catalog:products@v7", "catalog:reviews@v7"]


def test_a_drafted_pin_of_another_version_is_replaced_by_the_described_one(tmp_path: Path) -> None:
    catalog = _pinned(tmp_path, 7)
    document = gold_document(catalog)
    document["plan"]["input"]["left"]["source"]["catalog"] = {
        "dataset": "reviews",
        "version": 2,
        "content_hash": "stale",
    }
    report = check_plan_document(document, catalog, DATASETS)
    assert report.ok
    assert report.repairs == ("scan of reviews pinned to catalog version 7 (the version described)",)
    assert {scan.source.catalog.version for scan in _scans(report)} == {7}  # type: ignore[union-attr]


def test_a_pin_on_a_file_profiled_on_the_fly_is_dropped(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path)
    document = gold_document(catalog)
    document["plan"]["input"]["right"]["source"]["catalog"] = {"dataset": "products", "version": 1, "content_hash": "x"}
    report = check_plan_document(document, catalog, DATASETS)
    assert report.ok
    assert report.repairs == ("dropped the catalog pin of the scan of products (not a catalogued dataset)",)
    assert all(scan.source.catalog is None for scan in _scans(report))
