"""Native memory that glibc's malloc keeps after it is freed: a fixed mmap threshold returns large blocks.

glibc serves an allocation above its mmap threshold with a mapping of its own, unmapped when freed, and
smaller ones from an arena, whose freed pages mostly stay with the process. The threshold starts at
128 KiB and rises (to at most 32 MiB) each time such a mapping is freed, so a process that allocates
and frees large buffers soon serves them all from its arenas, which it keeps: one per thread that
contended for one, up to eight per core. LanceDB's writer and index builder do that on a pool of Rust
threads. ``mallopt(M_MMAP_THRESHOLD)`` fixes the threshold (it stops rising) for every arena at once.

Measured on 100k random 384-d rows in three LanceDB tables, each added then given its HNSW index, in
one process (scratch probe, 2 cores): RSS peak +419 / +460 / +524 MiB over the three tables with
glibc's dynamic threshold, +227 / +248 / +248 MiB with a fixed 1 MiB threshold, and about 60 MiB kept
after each build instead of 250-420. A whole 100k-document ingest: ``benchmarks/notes/ingest.md``.

Process-wide and for the process's life: ``catalog.ingest`` applies it when an ingest starts
(``Settings.catalog_mmap_threshold``). A no-op without glibc, and when the user set
``MALLOC_MMAP_THRESHOLD_`` (their choice stands).
"""

from __future__ import annotations

import ctypes
import os

from semray.log import get_logger

log = get_logger(__name__)

M_MMAP_THRESHOLD = -3
"""``mallopt``'s parameter number for the mmap threshold (glibc's malloc.h)."""
USER_SETTING = "MALLOC_MMAP_THRESHOLD_"
"""The environment variable through which a user sets the threshold for glibc at the process's start."""


def fix_mmap_threshold(size: int) -> bool:
    """Serve every allocation of at least ``size`` bytes (> 0) from a mapping of its own, returned when freed.

    True when glibc took the setting; False without glibc, when ``size`` is 0 (glibc's dynamic threshold
    stays) or when ``MALLOC_MMAP_THRESHOLD_`` is set. Example: ``fix_mmap_threshold(1 << 20)``.
    """
    if size <= 0 or USER_SETTING in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    taken = bool(mallopt(M_MMAP_THRESHOLD, size))
    log.debug("mmap_threshold_fixed", bytes=size, taken=taken)
    return taken
