"""Profiles of generated CSV, parquet, SQLite and DuckDB data (no Ray, no model)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semray.catalog.profiling import profile_batches, profile_source
from semray.catalog.schema_inference import detect_encoding, open_and_profile
from semray.catalog.servers import open_server
from semray.catalog.summaries import NOT_SUMMARISED, SummaryRequest, check_proposed_schema, describe_datasets
from semray.errors import SourceError
from semray.serving.config import ServingConfig
from semray.sources import open_source


def test_csv_profile_counts_nulls_distinct_and_lengths(tmp_path: Path) -> None:
    lines = ["name,score"] + [f"{'n' * (1 + i % 7)},{'' if i % 10 == 0 else i % 3}" for i in range(1000)]
    path = tmp_path / "scores.csv"
    path.write_text("\n".join(lines) + "\n")
    profile = profile_source(open_source("csv", str(path), {}))
    name, score = profile.columns
    assert profile.row_count == 1000 and profile.stats_rows == 1000
    assert (name.type, score.type) == ("VARCHAR", "BIGINT")
    assert score.nulls == 100 and score.distinct_estimate == 3
    assert (score.min, score.max) == ("0", "2")
    assert name.distinct_estimate == 7 and name.length_max == 7
    assert name.length_p50 == 4.0
    assert len(profile.samples) == 5 and profile.samples[0] == {"name": "n", "score": None}


def test_a_large_input_is_sampled_but_counts_stay_exact() -> None:
    table = pa.table({"key": pa.array(range(200_000)), "group": pa.array([f"g{i % 50}" for i in range(200_000)])})
    profile = profile_batches(table.schema, table.to_batches(10_000), stats_rows=5_000)
    key, group = profile.columns
    assert profile.row_count == 200_000
    assert 5_000 <= profile.stats_rows <= 10_000
    assert (key.min, key.max) == ("0", "199999")  # exact, from every batch
    assert key.distinct_estimate == 200_000  # every sampled value unique: a key
    assert group.distinct_estimate == 50  # a periodic column is not aliased by the sample
    assert key.top_values == ()


def test_parquet_profile(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.5, None, 3.0], "when": pa.array([1, 2, 3], pa.timestamp("s"))}), path)
    profile = profile_source(open_source("parquet", str(path), {}))
    x, when = profile.columns
    assert (x.type, x.nulls, x.min, x.max) == ("DOUBLE", 1, "1.5", "3.0")
    assert when.type.startswith("TIMESTAMP") and when.min == "1970-01-01T00:00:01"


def test_sqlite_and_duckdb_servers_profile_every_table(tmp_path: Path) -> None:
    sqlite_path = tmp_path / "shop.db"
    with sqlite3.connect(sqlite_path) as connection:
        connection.execute("CREATE TABLE orders (id INTEGER, item TEXT)")
        connection.executemany("INSERT INTO orders VALUES (?, ?)", [(1, "pen"), (2, "ink"), (3, "pen")])
        connection.execute("CREATE TABLE users (name TEXT)")
        connection.execute("INSERT INTO users VALUES ('ann')")
    connection.close()
    duck_path = tmp_path / "wh.duckdb"
    with duckdb.connect(str(duck_path)) as duck:
        duck.execute("CREATE TABLE facts AS SELECT range AS n FROM range(10)")
        duck.execute("CREATE SCHEMA s; CREATE TABLE s.dims AS SELECT 'a' AS d")
    sqlite_server = open_server(str(sqlite_path))
    profile = sqlite_server.profile({})
    assert sqlite_server.kind == "sqlite"
    assert [(t.suffix, t.profile.row_count) for t in profile.tables] == [("orders", 3), ("users", 1)]
    assert profile.tables[0].profile.columns[1].top_values == (("pen", 2),)
    assert sqlite_server.profile({"shop.db": profile.files[0].content_hash}).unchanged_tables == ("orders", "users")
    duck_server = open_server(str(duck_path))
    tables = duck_server.profile({}).tables
    assert [(t.suffix, t.options["table"], t.profile.row_count) for t in tables] == [
        ("facts", "facts", 10),
        ("s_dims", "s.dims", 1),
    ]
    assert duck_server.scan("duckdb", str(duck_path), {"table": "s.dims"}).options == {"table": "s.dims"}


def test_headerless_csv_and_varying_json_keys_get_an_inferred_schema(tmp_path: Path) -> None:
    (tmp_path / "nh.csv").write_text("1,2.5,x\n4,5.5,y\n")
    opened, profile = open_and_profile("csv", tmp_path / "nh.csv", {})
    assert opened.options == {"header": False} and profile.row_count == 2
    assert opened.schema_status.startswith("inferred: no header row")
    late = tmp_path / "late.jsonl"
    late.write_text("".join(f'{{"a": {i}}}\n' for i in range(1500)) + '{"a": 1, "late": "k"}\n')
    opened, profile = open_and_profile("json", late, {})
    assert [name for name, _ in profile.schema] == ["a", "late"] and profile.row_count == 1501
    assert "keys vary" in opened.schema_status and int(opened.options["infer_rows"]) >= 1501


def test_encoding_is_detected_and_binary_refused(tmp_path: Path) -> None:
    (tmp_path / "latin.csv").write_bytes("city,note\nZürich,très bien\n".encode("latin-1") * 50)
    assert detect_encoding(tmp_path / "latin.csv") != "utf-8"
    _opened, profile = open_and_profile("csv", tmp_path / "latin.csv", {})
    assert "Zürich" in {value for value, _ in profile.columns[0].top_values}
    (tmp_path / "bin.csv").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SourceError, match="not text in any encoding"):
        detect_encoding(tmp_path / "bin.csv")


def test_the_simulator_never_writes_summaries() -> None:
    table = pa.table({"a": [1]})
    request = SummaryRequest("t", "csv", profile_batches(table.schema, [table]))
    (description,) = describe_datasets(ServingConfig(), [request])
    assert description.summary is None and description.summary_status == NOT_SUMMARISED


def test_a_proposed_schema_is_checked_against_the_data() -> None:
    sample = pa.table({"f0": ["1", "2", "3"], "f1": ["a", "b", "c"]})
    assert check_proposed_schema(sample, [("id", "INTEGER"), ("code", "VARCHAR")]) == []
    assert check_proposed_schema(sample, [("id", "INTEGER")]) == ["1 columns proposed, the data has 2"]
    problems = check_proposed_schema(sample, [("id", "INTEGER"), ("code", "DATE")])
    assert problems == ["column 2 'code': only 0% of the sampled values cast to DATE"]
    assert check_proposed_schema(sample, [("Bad Name", "INTEGER"), ("id", "NOPE_TYPE")])[0].startswith("column 1")


def test_a_postgres_uri_is_a_server_that_names_its_missing_extra_and_never_shows_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a Postgres server here (``test_postgres_server.py`` runs one): the URI is recognised, kept
    without its password, a table's scan is a postgres source, and the missing ``psycopg`` is named
    with the extra that installs it (nothing is registered)."""
    import sys

    from semray.catalog.ingest import add_server
    from semray.catalog.servers import open_server
    from semray.catalog.servers.postgres import PostgresServer
    from semray.errors import CatalogError, SourceError
    from semray.settings import Settings
    from semray.sources import open_source

    server = open_server("postgresql://ann:s3cret@127.0.0.1:5432/shop")
    assert isinstance(server, PostgresServer) and server.kind == "postgres"
    assert server.uri == "postgresql://ann@127.0.0.1:5432/shop" and "s3cret" not in repr(server)
    assert open_server("postgres://127.0.0.1/shop").uri == "postgres://127.0.0.1/shop"  # not taken for a path
    spec = server.scan("postgres", "postgresql://ann:s3cret@127.0.0.1:5432/shop", {"table": "orders"})
    assert (spec.kind, spec.path) == ("postgres", "postgresql://ann@127.0.0.1:5432/shop")
    assert spec.options == {"schema": "public", "table": "orders"}
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed: importing it fails
    settings = Settings(state_dir=tmp_path / "state")
    with pytest.raises(CatalogError, match=r"pip install 'semray\[postgres\]'") as missing:
        add_server(settings, "postgresql://ann:s3cret@127.0.0.1:5432/shop", engine="local")
    with pytest.raises(SourceError, match=r"pip install 'semray\[postgres\]'"):
        open_source("postgres", "postgresql://ann:s3cret@127.0.0.1:5432/shop", {"table": "orders"})
    assert "s3cret" not in str(missing.value)
    from semray.catalog.store import Catalog

    assert Catalog.open(settings).datasets() == []
