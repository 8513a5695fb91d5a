"""A failed run on the console (issue 26): when a run fails with a ``SemrayError`` inside Ray Data
(a read task's SourceError, an operator's typed error), Ray Data narrates the failure on
``ray.data.exceptions`` (a preface, then the stack trace) as it re-raises it. semray reports the
error itself with a message naming the cause, so those records are marked ``hide``: Ray Data's
console handler drops them, its log file keeps them. A failure that is not semray's (a bug in
Ray) stays on the console. No cluster: Ray Data's own decorator raises, as the driver does
(a SourceError raised on the driver, while Ray Data plans the read, reaches it unwrapped).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from ray.data._internal.logging import HiddenRecordFilter
from ray.data.exceptions import RayDataUserCodeException, omit_traceback_stdout
from ray.exceptions import RayTaskError

from semray.cluster.connect import EXCEPTIONS_LOGGER, hide_reported_failure
from semray.errors import ExecutionError, SourceError

pytestmark = pytest.mark.timeout(60)


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logged() -> Iterator[list[logging.LogRecord]]:
    logger = logging.getLogger(EXCEPTIONS_LOGGER)
    handler = _Keep()
    logger.addHandler(handler)
    logger.addFilter(hide_reported_failure)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(hide_reported_failure)


def _source_error() -> SourceError:
    return SourceError("/data/t.csv: row 7 has 3 fields, the header 2")


def _user_code_error() -> BaseException:
    try:
        raise RayDataUserCodeException("read failed") from _source_error()
    except RayDataUserCodeException as error:
        return error


FAILURES = {
    "semray-error-raised": lambda: _source_error(),
    "semray-error-in-a-ray-task-error": lambda: RayTaskError("read", "Traceback ...", _source_error()),
    "semray-error-in-user-code": _user_code_error,
    "semray-error-in-a-dual-class": lambda: RayTaskError(
        "map", "Traceback ...", ExecutionError("SemMap: boom")
    ).as_instanceof_cause(),
}


@pytest.mark.parametrize("make", FAILURES.values(), ids=list(FAILURES))
def test_ray_datas_narration_of_a_semray_error_stays_off_the_console(
    logged: list[logging.LogRecord], make: object
) -> None:
    error = make()  # type: ignore[operator]

    @omit_traceback_stdout
    def execute() -> None:
        raise error

    with pytest.raises(type(error)):
        execute()
    # semray.pipeline.ray.failures, once imported, drops a RayTaskError's stack from the log altogether.
    assert logged or isinstance(error, RayTaskError), "Ray Data logs the failure"
    console = HiddenRecordFilter()
    assert not [record.getMessage()[:80] for record in logged if console.filter(record)]


def test_a_failure_that_is_not_semrays_stays_on_the_console(logged: list[logging.LogRecord]) -> None:
    @omit_traceback_stdout
    def execute() -> None:
        raise RuntimeError("an internal Ray Data bug")

    with pytest.raises(RuntimeError):
        execute()
    console = HiddenRecordFilter()
    shown = [record for record in logged if console.filter(record)]
    assert shown and any(record.exc_info for record in shown), "the stack trace of a Ray bug is shown"
