"""Native memory that glibc's malloc keeps after it is freed: a low mmap threshold returns large blocks.

glibc serves an allocation above its mmap threshold with a mapping of its own, unmapped when freed, and
smaller ones from an arena, whose freed pages mostly stay with the process. The threshold starts at
128 KiB and rises (to at most 32 MiB) each time such a mapping is freed, so a process that allocates
and frees large buffers soon serves them all from its arenas, which it keeps: one per thread that
contended for one, up to eight per core. LanceDB's writer and index builder do that on a pool of Rust
threads. ``mallopt(M_MMAP_THRESHOLD)`` sets the threshold for every arena at once, and stops it rising.

Measured on 100k random 384-d rows in three LanceDB tables, each added then given its HNSW index, in
one process (scratch probe, 2 cores): RSS peak +419 / +460 / +524 MiB over the three tables with
glibc's dynamic threshold, +227 / +248 / +248 MiB with a 1 MiB threshold, and about 60 MiB kept after
each build instead of 250-420. A whole 100k-document ingest: ``benchmarks/notes/ingest.md``.

Only around the catalog's publish (``catalog.ingest``, ``Settings.catalog_mmap_threshold``): the
embedding model's activations are blocks of 1-12 MiB, and mapping each afresh cost the model 10-25%
more CPU per text (same probe, four processes alternating). Afterwards the threshold is 32 MiB, where
glibc's dynamic one stops rising (glibc has no call that makes it dynamic again). Nothing happens
without glibc, or when the user set ``MALLOC_MMAP_THRESHOLD_`` (their choice stands).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

from semray.log import get_logger

log = get_logger(__name__)

M_MMAP_THRESHOLD = -3
"""``mallopt``'s parameter number for the mmap threshold (glibc's malloc.h)."""
DYNAMIC_THRESHOLD_MAX = 32 << 20
"""Where glibc's dynamic mmap threshold stops rising on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``)."""
USER_SETTING = "MALLOC_MMAP_THRESHOLD_"
"""The environment variable through which a user sets the threshold for glibc at the process's start."""


@contextmanager
def large_blocks_returned(threshold: int) -> Iterator[bool]:
    """Inside, every block of at least ``threshold`` bytes (> 0) is a mapping of its own, returned when freed.

    Yields whether glibc took it: False without glibc, when ``threshold`` is 0, or when
    ``MALLOC_MMAP_THRESHOLD_`` is set. Example: ``with large_blocks_returned(1 << 20): catalog.publish(...)``.
    """
    taken = threshold > 0 and USER_SETTING not in os.environ and _set_mmap_threshold(threshold)
    try:
        yield taken
    finally:
        if taken:
            _set_mmap_threshold(DYNAMIC_THRESHOLD_MAX)


def _set_mmap_threshold(size: int) -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    taken = bool(mallopt(M_MMAP_THRESHOLD, size))
    log.debug("mmap_threshold_set", bytes=size, taken=taken)
    return taken
