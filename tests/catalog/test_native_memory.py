"""A low mmap threshold around a block of work: large blocks stay mappings of their own there (glibc only).

Each check runs in a fresh interpreter: the threshold is process-wide, and glibc's dynamic threshold
in this test process depends on what ran before.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from semray.catalog.native_memory import USER_SETTING, large_blocks_returned

GLIBC_MALLINFO2 = hasattr(ctypes.CDLL(None), "mallinfo2")

PROBE = """
import ctypes, sys
from semray.catalog.native_memory import large_blocks_returned

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
block = 8 << 20

def mapped():
    libc.free(libc.malloc(block))  # glibc's dynamic threshold rises past 8 MiB on this free
    before = libc.mallinfo2().hblkhd
    pointer = libc.malloc(block)
    grown = libc.mallinfo2().hblkhd - before
    libc.free(pointer)
    return grown >= block

if sys.argv[1] == "inside":
    with large_blocks_returned(1 << 20) as taken:
        print(taken and mapped())
elif sys.argv[1] == "after":
    with large_blocks_returned(1 << 20):
        pass
    print(mapped())
else:
    print(mapped())
"""


def mapped_after_a_free(mode: str, **env: str) -> bool:
    """Whether an 8 MiB block allocated after one was freed is a mapping of its own, in a fresh interpreter."""
    environment = {key: value for key, value in os.environ.items() if key != USER_SETTING} | env
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=environment, check=True, timeout=60
    )
    return result.stdout.strip() == "True"


@pytest.mark.skipif(not GLIBC_MALLINFO2, reason="needs glibc >= 2.33 (mallinfo2)")
def test_large_blocks_are_mappings_of_their_own_inside_and_come_from_the_heap_after() -> None:
    assert not mapped_after_a_free("dynamic")  # glibc's default keeps the second block in an arena
    assert mapped_after_a_free("inside")
    assert not mapped_after_a_free("after")  # 32 MiB after: the model's blocks come from the heap again


def test_zero_and_the_users_setting_leave_malloc_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    with large_blocks_returned(0) as taken:
        assert not taken
    monkeypatch.setenv(USER_SETTING, "65536")
    with large_blocks_returned(1 << 20) as taken:
        assert not taken


def test_an_ingest_publishes_inside_the_threshold_of_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's publish (LanceDB's writes and index builds) runs with ``Settings.catalog_mmap_threshold``;
    nothing else of the ingest does (the embedding model's activations are blocks of that size)."""
    from semray.catalog import ingest
    from semray.catalog.store import Catalog
    from semray.settings import Settings

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("The ferry was late.\n")
    inside: list[int] = []
    published_inside: list[bool] = []
    real_context, real_publish = ingest.large_blocks_returned, Catalog.publish

    @contextmanager
    def recorded(threshold: int) -> Iterator[bool]:
        assert threshold == 3 << 20
        with real_context(threshold) as taken:
            inside.append(threshold)
            yield taken
            inside.pop()

    def publish(catalog: Catalog, change_set: Any) -> int:
        published_inside.append(bool(inside))
        return real_publish(catalog, change_set)

    monkeypatch.setattr(ingest, "large_blocks_returned", recorded)
    monkeypatch.setattr(Catalog, "publish", publish)
    settings = Settings(state_dir=tmp_path / "state", catalog_mmap_threshold=3 << 20)
    report = ingest.add_server(settings, str(folder), engine="local")
    assert report.documents_read == 1
    assert published_inside == [True] and inside == []
