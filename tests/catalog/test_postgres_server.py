"""The Postgres data server against a real Postgres: one throwaway server for the module (pgserver: the
binaries come in its wheel, it listens on a unix socket only; as root it runs them as the system user
``pgserver``, which it creates). Skipped, with the reason, when pgserver or psycopg is not installed
(both are in the ``dev`` extra).

The database ``shop`` holds ``kinds`` (int, float, text, bool, timestamp, with NULLs), ``reviews``
(3,000 rows), ``sales."Order Items"`` (a schema other than public, a name that needs quoting, a numeric
column), the empty ``drafts``, the view ``five_star``, the view ``broken`` (reading it divides by zero)
and ``secrets``. The role ``ann`` logs in with a password (scram over the socket) and may read
everything but ``secrets``; ``postgres`` is trusted.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from semray.catalog.ingest import add_server, refresh
from semray.catalog.store import Catalog
from semray.catalog.tables import COLUMNS, DATASETS, FILES
from semray.errors import CatalogError, SourceError
from semray.settings import Settings

pgserver = pytest.importorskip("pgserver", reason="pgserver (the dev extra) starts the throwaway Postgres")
psycopg = pytest.importorskip("psycopg", reason="psycopg (the postgres extra) reads Postgres")

PASSWORD = "Zq/7%kx!pw"
"""ann's password: a '/' and a '%', so the URI carries it percent-encoded."""
ENCODED = urllib.parse.quote(PASSWORD, safe="")

SETUP = """
CREATE TABLE kinds (id integer PRIMARY KEY, price double precision, label text, active boolean, seen timestamp);
INSERT INTO kinds VALUES
    (1, 2.5, 'pen', true, '2024-03-01 09:30'), (2, NULL, 'ink', false, '2024-03-02 10:00'),
    (3, 7.25, NULL, NULL, NULL), (4, 1.0, 'pad', true, '2024-03-04 12:15');
CREATE TABLE reviews (id bigint PRIMARY KEY, review text NOT NULL, stars integer NOT NULL);
INSERT INTO reviews SELECT g, 'Review ' || g || ': ' || CASE WHEN g % 3 = 0 THEN 'the battery died within a week'
    ELSE 'the screen is bright and sharp' END, 1 + g % 5 FROM generate_series(1, 3000) AS g;
CREATE SCHEMA sales;
CREATE TABLE sales."Order Items" ("Qty" integer, "Unit Price" numeric(8, 2), note text);
INSERT INTO sales."Order Items" VALUES (1, 9.99, 'first'), (2, 0.50, NULL), (NULL, 3.00, 'third');
CREATE TABLE drafts (a integer);
CREATE VIEW five_star AS SELECT id, review FROM reviews WHERE stars = 5;
CREATE ROLE ann LOGIN PASSWORD '{password}';
GRANT USAGE ON SCHEMA sales TO ann;
GRANT SELECT ON ALL TABLES IN SCHEMA public, sales TO ann;
CREATE VIEW broken AS SELECT id, 1 / (id - id) AS ratio FROM kinds;
GRANT SELECT ON broken TO ann;
CREATE TABLE secrets (a integer);
INSERT INTO secrets VALUES (1);
"""


@dataclass(frozen=True)
class Shop:
    """The running server: ``uri`` as the trusted superuser, ``ann_uri`` with ann's password in it."""

    uri: str
    ann_uri: str
    socket_dir: str

    def execute(self, statement: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.uri, autocommit=True) as connection:
            cursor = connection.execute(statement)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    if os.geteuid() == 0 and shutil.which("useradd") is None and not _has_user("pgserver"):
        pytest.skip("as root, pgserver runs Postgres as the user 'pgserver', and there is no useradd to create it")
    # not under pytest's folders: as root the server runs as another user, who must reach its data
    # folder when it stops too (pgserver opens the folders above it to others; cleanup deletes it)
    folder = Path(tempfile.mkdtemp(prefix="semray-pg-", dir="/tmp"))
    server = pgserver.get_server(folder / "data", cleanup_mode="delete")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as connection:
            connection.execute("CREATE DATABASE shop")
        socket_dir = urllib.parse.parse_qs(urllib.parse.urlsplit(server.get_uri()).query)["host"][0]
        uri = f"postgresql://postgres@/shop?host={socket_dir}"
        with psycopg.connect(uri, autocommit=True) as connection:
            connection.execute(SETUP.format(password=PASSWORD))  # type: ignore[arg-type]
        # ann must give her password over the socket (everyone else stays trusted), then reload the rules
        hba = Path(server.pgdata) / "pg_hba.conf"
        hba.write_text("local all ann scram-sha-256\n" + hba.read_text())
        with psycopg.connect(uri, autocommit=True) as connection:
            connection.execute("SELECT pg_reload_conf()")
        yield Shop(uri, f"postgresql://ann:{ENCODED}@/shop?host={socket_dir}", socket_dir)
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _catalog_text(settings: Settings) -> str:
    catalog = Catalog.open(settings)
    return json.dumps(
        [catalog.rows(name).drop_columns(_vectors(catalog, name)).to_pylist() for name in (DATASETS, COLUMNS, FILES)],
        default=str,
    )


def _vectors(catalog: Catalog, name: str) -> list[str]:
    return [field.name for field in catalog.rows(name).schema if pa.types.is_fixed_size_list(field.type)]


def _no_password(text: str) -> None:
    assert PASSWORD not in text and ENCODED not in text and "Zq" not in text


def test_every_table_is_profiled_and_the_password_is_stored_nowhere(shop: Shop, tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    with capture_logs() as logs:
        report = add_server(settings, shop.ann_uri, engine="local")
    assert report.server == "shop"  # the database's name
    assert report.datasets == ("shop_five_star", "shop_kinds", "shop_reviews", "shop_sales_order_items")
    skipped = dict(report.skipped)
    assert sorted(skipped) == ["public.broken", "public.drafts", "public.secrets"]  # the rest is catalogued
    assert "division by zero" in skipped["public.broken"] and "empty" in skipped["public.drafts"]
    assert "permission denied for table secrets" in skipped["public.secrets"]
    catalog = Catalog.open(settings)
    assert {record.name: record.row_count for record in catalog.datasets()} == {
        "shop_five_star": 600,
        "shop_kinds": 4,
        "shop_reviews": 3000,
        "shop_sales_order_items": 3,
    }
    kinds = {row["column"]: row for row in catalog.columns("shop_kinds")}
    assert {name: row["type"] for name, row in kinds.items()} == {
        "id": "INTEGER",
        "price": "DOUBLE",
        "label": "VARCHAR",
        "active": "BOOLEAN",
        "seen": "TIMESTAMP",
    }
    assert [kinds[name]["nulls"] for name in ("id", "price", "label", "active", "seen")] == [0, 1, 1, 1, 1]
    assert (kinds["price"]["min"], kinds["price"]["max"]) == ("1.0", "7.25")
    assert kinds["seen"]["min"].startswith("2024-03-01T09:30")
    items = {row["column"]: row for row in catalog.columns("shop_sales_order_items")}
    assert items["Unit Price"]["type"] == "DOUBLE" and items["Qty"]["nulls"] == 1
    reviews = catalog.dataset("shop_reviews")
    assert reviews.samples and set(reviews.samples[0]) == {"id", "review", "stars"}
    assert all(str(row["review"]).startswith(f"Review {row['id']}: ") for row in reviews.samples)
    assert catalog.columns("shop_reviews")[2]["distinct_estimate"] == 5
    record = catalog.dataset("shop_sales_order_items")
    assert record.source_options == {"schema": "sales", "table": "Order Items"}
    assert record.server_uri == f"postgresql://ann@/shop?host={shop.socket_dir}"
    spec = catalog.scan("shop_kinds")
    assert (spec.kind, spec.path, spec.options) == (
        "postgres",
        record.server_uri,
        {"schema": "public", "table": "kinds"},
    )
    _no_password(_catalog_text(settings))
    _no_password(json.dumps(logs, default=str))
    _no_password(repr(report))


def test_catalog_add_ls_and_show_through_the_cli(
    shop: Shop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from semray.cli import main

    state = ["--state-dir", str(tmp_path / "state")]
    assert main([*state, "catalog", "add", shop.ann_uri, "--name", "pg", "--in-process"]) == 0
    added = capsys.readouterr()
    assert "skipped: 3 file(s)" in added.out
    assert main([*state, "catalog", "ls", "--format", "json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["name"], row["rows"]) for row in listed] == [
        ("pg_five_star", 600),
        ("pg_kinds", 4),
        ("pg_reviews", 3000),
        ("pg_sales_order_items", 3),
    ]
    assert main([*state, "catalog", "show", "pg_sales_order_items"]) == 0
    shown = capsys.readouterr()
    assert "Unit Price" in shown.out and "postgresql://ann@/shop" in shown.out
    _no_password(added.out + added.err + shown.out + shown.err)


def test_a_refresh_profiles_only_the_tables_that_changed(shop: Shop, tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    first = add_server(settings, shop.uri, engine="local")
    again = refresh(settings, "shop", engine="local")[0]
    assert first.datasets == ("shop_five_star", "shop_kinds", "shop_reviews", "shop_sales_order_items", "shop_secrets")
    assert again.datasets == () and again.unchanged_datasets == first.datasets
    assert (again.files.unchanged, again.files.changed, again.files.new) == (7, 0, 0)  # broken, drafts: skipped
    assert again.version == first.version + 1
    shop.execute('UPDATE sales."Order Items" SET note = \'changed\' WHERE "Qty" = 1')
    try:
        changed = refresh(settings, "shop", engine="local")[0]
    finally:
        shop.execute('UPDATE sales."Order Items" SET note = \'first\' WHERE "Qty" = 1')
    assert changed.datasets == ("shop_sales_order_items",) and changed.files.changed == 1
    notes = [row["note"] for row in Catalog.open(settings).dataset("shop_sales_order_items").samples]
    assert "changed" in notes and "first" not in notes


def test_a_refresh_finds_the_password_where_libpq_looks(
    shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog keeps no password: a refresh without one says where to give it."""
    settings = Settings(state_dir=tmp_path / "state")
    add_server(settings, shop.ann_uri, engine="local")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    with pytest.raises(CatalogError, match="PGPASSWORD") as refused:
        refresh(settings, "shop", engine="local")
    _no_password(str(refused.value))
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    assert refresh(settings, "shop", engine="local")[0].datasets == ()


def _refused(settings: Settings, uri: str, match: str) -> str:
    started = time.monotonic()
    with pytest.raises(CatalogError, match=match) as refused:
        add_server(settings, uri, engine="local")
    assert time.monotonic() - started < 15
    assert Catalog.open(settings).datasets() == []
    text = str(refused.value)
    _no_password(text)
    return text


def test_bad_uris_wrong_passwords_and_unreachable_servers_are_clear_errors(
    shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    # libpq quotes a bad percent-encoding back, password and all
    text = _refused(settings, f"postgresql://ann:{ENCODED}%zz@/shop?host={shop.socket_dir}", "percent")
    assert "postgresql://ann@/shop" in text
    _refused(settings, f"postgresql://ann:{ENCODED}@127.0.0.1:notaport/shop", "port")
    wrong = f"postgresql://ann:{ENCODED}x@/shop?host={shop.socket_dir}"
    _refused(settings, wrong, 'password authentication failed for user "ann"')
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    _refused(settings, f"postgresql://ann:{ENCODED}@127.0.0.1:{closed}/shop", "refused")


def test_a_server_that_never_answers_times_out(shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener that accepts the connection and never speaks: the connect timeout ends the wait."""
    from semray.sources import postgres_source

    monkeypatch.setattr(postgres_source, "CONNECT_TIMEOUT_S", 2)  # libpq's least
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        started = time.monotonic()
        _refused(Settings(state_dir=tmp_path / "state"), f"postgresql://ann:{ENCODED}@127.0.0.1:{port}/shop", "timeout")
        assert 1.5 < time.monotonic() - started < 10


def test_the_reader_keeps_types_nulls_and_order_and_names_what_is_missing(shop: Shop) -> None:
    from semray.sources import Source, open_source

    source = open_source("postgres", shop.uri, {"schema": "sales", "table": "Order Items"})
    assert isinstance(source, Source) and source.estimated_rows() == 3
    assert source.schema() == pa.schema([("Qty", pa.int32()), ("Unit Price", pa.float64()), ("note", pa.string())])
    (task,) = source.read_tasks(["note", "Qty"], batch_rows=2)
    batches = list(task())
    assert [batch.num_rows for batch in batches] == [2, 1]
    rows = pa.concat_tables(batches).to_pylist()  # physical order (no primary key): an update moves a row
    assert sorted(row["_rowid"] for row in rows) == ["0", "1", "2"]
    assert sorted((row["Qty"] or 0, row["note"] or "") for row in rows) == [(0, "third"), (1, "first"), (2, "")]
    kinds = open_source("postgres", shop.uri, {"table": "kinds"})
    (task,) = kinds.read_tasks(None, batch_rows=10)
    first, *_ = pa.concat_tables(list(task())).to_pylist()
    assert first == {
        "_rowid": "0",
        "id": 1,
        "price": 2.5,
        "label": "pen",
        "active": True,
        "seen": datetime.datetime(2024, 3, 1, 9, 30),
    }
    reviews = open_source("postgres", shop.uri, {"table": "reviews"})
    first = next(iter(reviews.read_tasks(["id"], 1000)[0]()))
    assert first.column("id").to_pylist() == list(range(1, 1001))  # primary-key order
    opened = open_source("postgres", shop.ann_uri, {"table": "kinds"})
    _no_password(repr(opened) + repr(opened.read_tasks(None, 10)))
    with pytest.raises(SourceError, match="did you mean 'reviews'"):
        open_source("postgres", shop.uri, {"table": "reveiws"})
    with pytest.raises(SourceError, match="empty"):
        open_source("postgres", shop.uri, {"table": "drafts"})


@pytest.mark.ray
def test_a_catalogued_table_is_queried_with_sql_and_a_semantic_filter(
    shop: Shop, tmp_path: Path, ray_settings: Settings
) -> None:
    """The plan's Scan reads the table in Ray tasks, through the catalogued URI (the trusted role: the
    catalog keeps no password, and the workers started before this test could be given one)."""
    import semray
    from semray.api import read_catalog
    from semray.serving.config import ServingConfig
    from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec

    settings = ray_settings.model_copy(update={"catalog_dir": tmp_path / "catalog"})
    add_server(settings, shop.uri, engine="local")
    reviews = read_catalog("shop_reviews", settings)
    counted = semray.sql(
        "SELECT stars, count(*) AS n, min(id) AS first FROM reviews WHERE stars >= 4 GROUP BY stars ORDER BY stars",
        {"reviews": reviews},
    ).execute()
    assert counted.table.drop_columns(["_rowid"]).to_pylist() == [
        {"stars": stars, "n": n, "first": first}
        for stars, n, first in shop.execute(
            "SELECT stars, count(*), min(id) FROM reviews WHERE stars >= 4 GROUP BY stars ORDER BY stars"
        )
    ]

    rows = shop.execute("SELECT id, review FROM reviews WHERE id <= 40 ORDER BY id")
    labels = pa.table(
        {
            "id": [row_id for row_id, _ in rows],
            "review": [text for _, text in rows],
            "battery": ["true" if "battery" in text else "false" for _, text in rows],
        }
    )
    simulator = SimulatorConfig.from_labels(
        labels,
        key_column="id",
        text_columns=["review"],
        tasks=(
            TaskSpec(
                name="battery", kind="filter", label_column="battery", true_values=("true",), keywords=("battery",)
            ),
        ),
        dataset="reviews",
        models={"sim-small": ModelProfile(error_rate=0.0), "sim-large": ModelProfile(error_rate=0.0)},
    )
    query = (
        reviews.filter("id <= 40")
        .with_serving(ServingConfig(simulator=simulator, cache_enabled=False))
        .sem_filter("{review} complains about the battery")
    )
    result = query.execute()
    assert sorted(result.table["id"].to_pylist()) == [row_id for row_id, text in rows if "battery" in text]
    assert result.usage.calls == 40


def test_types_without_an_arrow_counterpart_read_as_text(shop: Shop) -> None:
    from semray.sources import open_source

    shop.execute(
        "CREATE TYPE mood AS ENUM ('sad', 'happy');"
        "CREATE TABLE exotic (u uuid, j jsonb, tags integer[], wait interval, m mood, d date, t time, "
        "z timestamptz, b bytea, amount numeric(12, 3));"
        "INSERT INTO exotic VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2]}', '{1,2}',"
        " '1 day 2 hours', 'happy', '2024-02-29', '23:59:01', '2024-01-01 10:00+02', '\\x0102', 1234.567), "
        "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    try:
        source = open_source("postgres", shop.uri, {"table": "exotic"})
        (task,) = source.read_tasks(None, 10)
        rows = pa.concat_tables(list(task())).drop_columns(["_rowid"]).to_pylist()
    finally:
        shop.execute("DROP TABLE exotic; DROP TYPE mood")
    assert source.schema().types == [pa.string()] * 5 + [
        pa.date32(),
        pa.time64("us"),
        pa.timestamp("us", tz="UTC"),
        pa.binary(),
        pa.float64(),
    ]
    assert rows[0] == {
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "j": '{"k": [1, 2]}',
        "tags": "{1,2}",
        "wait": "1 day 02:00:00",
        "m": "happy",
        "d": datetime.date(2024, 2, 29),
        "t": datetime.time(23, 59, 1),
        "z": datetime.datetime(2024, 1, 1, 8, 0, tzinfo=datetime.UTC),
        "b": b"\x01\x02",
        "amount": 1234.567,
    }
    assert set(rows[1].values()) == {None}
