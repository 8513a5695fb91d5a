"""Fixtures of the fault corpus: a small CSV and a valid plan document per operator (JSON-plan
faults), and the scripted OpenAI-compatible servers (serving faults)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_endpoint import FakeEndpoint
from plan_documents import plan_documents, write_reviews


@pytest.fixture(scope="module")
def reviews_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reviews(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def documents(reviews_csv: Path) -> dict[str, dict[str, Any]]:
    return plan_documents(reviews_csv)


@pytest.fixture(scope="module")
def server_pool() -> Iterator[list[FakeEndpoint]]:
    servers = [FakeEndpoint(), FakeEndpoint()]
    yield servers
    for server in servers:
        server.close()


@pytest.fixture()
def server(server_pool: list[FakeEndpoint]) -> FakeEndpoint:
    server_pool[0].reset()
    return server_pool[0]


@pytest.fixture()
def other_server(server_pool: list[FakeEndpoint]) -> FakeEndpoint:
    server_pool[1].reset()
    return server_pool[1]
