"""Segment ids are the hash of ``json.dumps([dataset, document_id, chain])``, whatever the names hold."""

from __future__ import annotations

import hashlib
import json

import pytest

from semray.catalog.document_pipeline import segment_id


def _json_keyed(dataset: str, document_id: str, chain: tuple[tuple[str, int], ...]) -> str:
    key = json.dumps([dataset, document_id, [list(step) for step in chain]])
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


@pytest.mark.parametrize(
    ("dataset", "document_id"),
    [
        ("enron", "a.txt"),
        ("notes", 'quote " and back\\slash.md'),
        ("naïve", "dossier/café ☕ 日本.md"),
        ("ctl", "tab\there\nnewline\x00nul\x7f.txt"),
        ("", ""),
        ("emoji", "\U0001f600 surrogate pair.md"),
    ],
)
@pytest.mark.parametrize(
    "chain",
    [(), (("document", 0),), (("document", 0), ("section", 3), ("paragraph", 12), ("chunk", 1024))],
)
def test_segment_id_is_the_hash_of_the_json_key(
    dataset: str, document_id: str, chain: tuple[tuple[str, int], ...]
) -> None:
    assert segment_id(dataset, document_id, chain) == _json_keyed(dataset, document_id, chain)


def test_segment_id_is_stable() -> None:
    # the id of a catalogued segment never changes between versions of semray: a refresh relies on it
    assert segment_id("enron", "a.txt", (("document", 0),)) == "a6d2f68530797b9729a3c8c894bfcc39"
