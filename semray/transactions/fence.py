"""The run's fence: only its current attempt may commit batches.

A resume writes the number of the attempt it begins to ``<run>/attempt`` (fsync'd, renamed
into place) while it holds the journal's lock, just before it journals ``run_resumed``. Every
batch commit reads that number under the same lock, just before it appends its record, and
a commit of an older attempt is refused (``FencedWriterError``). The lock orders the two: a
commit appended before the resume's fence is a commit of a still-current attempt, and after
it no older attempt's commit lands, so in journal order no ``batch_committed`` of attempt N
follows the ``run_resumed`` of an attempt above N.

No file means no resume happened yet: attempt 1 is current (and runs of older semray
versions, whose resumes wrote no fence, fence nothing until they are resumed again).

>>> advance_fence(run_dir, 2)  # doctest: +SKIP
>>> stale_against(run_dir, attempt=1)  # doctest: +SKIP
2
"""

from __future__ import annotations

from pathlib import Path

from semray.transactions.durability import write_bytes_atomically
from semray.transactions.errors import TransactionError

FENCE_NAME = "attempt"


def current_attempt(run_dir: Path) -> int | None:
    """The attempt the fence holds, or None when no resume wrote one (attempt 1 is current)."""
    try:
        text = (run_dir / FENCE_NAME).read_text()
    except FileNotFoundError:
        return None
    try:
        return int(text.strip())
    except ValueError:
        # Written by rename of a whole fsync'd file, so never torn: anything else is damage.
        raise TransactionError(
            f"the fence file {run_dir / FENCE_NAME} holds {text[:40]!r}, not an attempt number; "
            "the run folder is damaged (resume the run to rewrite it)"
        ) from None


def stale_against(run_dir: Path, attempt: int) -> int | None:
    """The current attempt when ``attempt`` is older than it (the writer is fenced off), else None.

    Cheap (one small file read): workers call it before each batch's model call as well as,
    under the journal lock, before each commit.
    """
    current = current_attempt(run_dir)
    return current if current is not None and attempt < current else None


def advance_fence(run_dir: Path, attempt: int) -> None:
    """Make ``attempt`` the run's current one, durably; call it holding the journal's lock."""
    write_bytes_atomically(run_dir / FENCE_NAME, f"{attempt}\n".encode())
