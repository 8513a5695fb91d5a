"""Write-once objects in the state store: a second put of one name is refused, the first one kept.

Against moto's S3 server on 127.0.0.1 (``If-None-Match: *`` through boto3), a ``file://`` store (a hard
link), and an in-memory fsspec store (a check before the put, the one store kind it is not atomic on).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server

from semray.settings import Settings
from semray.transactions.errors import ObjectExistsError
from semray.transactions.remote import StateStore


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with S3Server.start() as running:
        yield running


def _s3_store(server: S3Server, prefix: str) -> StateStore:
    uri = Settings(state_dir=Path("/tmp"), state_uri=server.uri(prefix), state_endpoint=server.endpoint)
    return StateStore.from_uri(uri.state_store_uri or "")


def test_a_second_put_of_one_name_to_s3_is_refused_and_the_first_stays(tmp_path: Path, server: S3Server) -> None:
    prefix = f"{tmp_path.name}/once"
    store = _s3_store(server, prefix)
    path = store.run_path("20260101-000000-000000", "segments", "0000000001-w1.jsonl")
    store.write_once(path, b"first\n")
    with pytest.raises(ObjectExistsError, match="already exists and is written once"):
        store.write_once(path, b"second\n")
    key = path.split("/", 1)[1]
    assert server.versions(prefix) == {key: 1}, "the refused put made no version"
    assert server.client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"first\n"


def test_of_two_writers_racing_for_one_s3_name_exactly_one_wins(tmp_path: Path, server: S3Server) -> None:
    prefix = f"{tmp_path.name}/race"
    store = _s3_store(server, prefix)
    path = f"{store.base}/cache/segments/one.jsonl.gzip"
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def put(writer: int) -> None:
        start.wait()
        try:
            store.write_once(path, f"writer {writer}".encode())
            outcomes.append("put")
        except ObjectExistsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=put, args=(writer,)) for writer in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["put"] + ["refused"] * 7
    assert list(server.versions(prefix).values()) == [1]


def test_a_second_put_of_one_name_to_a_file_store_is_refused(tmp_path: Path) -> None:
    store = StateStore.from_uri((tmp_path / "bucket").as_uri())
    path = store.run_path("20260101-000000-000000", "commits", "n1w1-00000001.jsonl")
    store.write_once(path, b"first\n")
    with pytest.raises(ObjectExistsError):
        store.write_once(path, b"second\n")
    assert Path(path).read_bytes() == b"first\n"
    assert [p.name for p in Path(path).parent.iterdir()] == [Path(path).name], "no temporary file is left"


def test_a_second_put_to_a_store_without_conditional_puts_is_refused_by_its_check() -> None:
    pytest.importorskip("fsspec")
    store = StateStore.from_uri("memory://semray-write-once-test")
    path = f"{store.base}/cache/segments/x.jsonl.gzip"
    store.write_once(path, b"first")
    with pytest.raises(ObjectExistsError):
        store.write_once(path, b"second")
    assert store.read(path) == b"first"
