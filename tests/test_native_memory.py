"""A fixed mmap threshold: large blocks stay mappings of their own after one is freed (glibc only).

Each check runs in a fresh interpreter: the threshold is process-wide, and glibc's dynamic threshold
in this test process depends on what ran before.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from semray.native_memory import USER_SETTING, fix_mmap_threshold

GLIBC_MALLINFO2 = hasattr(ctypes.CDLL(None), "mallinfo2")

PROBE = """
import ctypes, sys
from semray.native_memory import fix_mmap_threshold

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold(1 << 20)
block = 8 << 20
libc.free(libc.malloc(block))  # glibc's dynamic threshold rises past 8 MiB on this free
before = libc.mallinfo2().hblkhd
pointer = libc.malloc(block)
mapped = libc.mallinfo2().hblkhd - before
libc.free(pointer)
print(mapped >= block)
"""


def mapped_after_a_free(mode: str, **env: str) -> bool:
    """Whether an 8 MiB block allocated after one was freed is a mapping of its own, in a fresh interpreter."""
    environment = {key: value for key, value in os.environ.items() if key != USER_SETTING} | env
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=environment, check=True, timeout=60
    )
    return result.stdout.strip() == "True"


@pytest.mark.skipif(not GLIBC_MALLINFO2, reason="needs glibc >= 2.33 (mallinfo2)")
def test_a_fixed_threshold_maps_large_blocks_after_one_was_freed() -> None:
    assert not mapped_after_a_free("dynamic")  # glibc's default keeps the second block in an arena
    assert mapped_after_a_free("fixed")


def test_zero_and_the_users_setting_leave_malloc_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not fix_mmap_threshold(0)
    monkeypatch.setenv(USER_SETTING, "65536")
    assert not fix_mmap_threshold(1 << 20)
