"""What a failed Ray task or actor raises on the driver: its own error, not Ray's wrapper.

``reported_failures`` turns a ``RayError`` into the first ``SemrayError`` in its cause chain (a
``SourceError`` from a read task, an endpoint's error with its URL and status), or an
``ExecutionError`` naming the innermost cause; Ray Data's notice that a task's own exception is a
bug in Ray is kept off the log.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from ray.exceptions import RayError, RayTaskError

from semray.errors import ExecutionError, SemrayError


@contextlib.contextmanager
def reported_failures() -> Iterator[None]:
    """A failed Ray task or actor raises its own error: the first ``SemrayError`` in the cause
    chain, as itself (a ``SourceError`` from a read task, an endpoint's error with its URL and
    status); otherwise an ``ExecutionError`` naming the innermost cause's type and message."""
    try:
        yield
    except RayError as error:
        raise unwrapped(error) from None


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RETRY_NOTE = re.compile(r"\n?Failed to [^\n]* after \d+/\d+ attempts \(total backoff [0-9.]+s\)\.[\s\S]*\Z")
"""What Ray Data appends to the message of a task's last failure (``iterate_with_retry``)."""


class _TaskErrorsAreNotRayBugs(logging.Filter):
    """Ray Data logs a task's own exception (``raise_original_map_exception``) as a bug in Ray,
    with its whole stack: drop that notice and the stack of a task's error, which the caller
    gets as a semray error anyway (see ``unwrapped``). Ray's own failures still log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Exception occurred in Ray Data or Ray Core internal code"):
            return False
        failed = record.exc_info[1] if record.exc_info else None
        return not (message.startswith("Full stack trace") and isinstance(failed, RayTaskError))


logging.getLogger("ray.data.exceptions").addFilter(_TaskErrorsAreNotRayBugs())


def unwrapped(error: BaseException) -> SemrayError:
    """The error to show for a failure Ray reports (see ``reported_failures``)."""
    innermost = error
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, RayTaskError):
            # A RayTaskError may also be an instance of its cause's class (as_instanceof_cause):
            # its message is Ray's traceback text, so take the cause it carries instead.
            inner = cause.cause
            cause = inner if isinstance(inner, BaseException) else None
            continue
        innermost = cause
        if isinstance(cause, SemrayError):
            return _without_ray_notes(cause)
        cause = getattr(cause, "cause", None) or cause.__cause__ or cause.__context__
    message = _clean(str(innermost))
    if isinstance(innermost, RayTaskError | RayError) and not message:
        message = type(innermost).__name__
    elif isinstance(innermost, RayError):
        # Ray's own error (an actor that died, a lost object): its last line says what happened.
        lines = [line for line in message.splitlines() if line.strip()]
        message = lines[-1] if lines else type(innermost).__name__
    return ExecutionError(f"the pipeline failed: {type(innermost).__name__}: {message}")


def _clean(text: str) -> str:
    return RETRY_NOTE.sub("", ANSI.sub("", text)).strip()


def _without_ray_notes(error: SemrayError) -> SemrayError:
    """``error`` with the retry note Ray Data appended to its message removed (and no ANSI codes)."""
    if error.args and isinstance(error.args[0], str):
        error.args = (_clean(error.args[0]), *error.args[1:])
    elif error.args and isinstance(error.args[-1], str) and RETRY_NOTE.search("\n" + error.args[-1]):
        error.args = error.args[:-1]
    return error
