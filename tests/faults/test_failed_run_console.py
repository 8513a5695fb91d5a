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
from pathlib import Path

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


# -- the executor's abort notice, and a Serve replica's failed request --------------------------


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("error", "hidden"),
    [
        (RayTaskError("map", "Traceback ...", SourceError("t.csv: row 9 is not a valid int64")), True),
        (RayTaskError("map", "Traceback ...", _source_error()).as_instanceof_cause(), True),
        (RayTaskError("map", "Traceback ...", RuntimeError("a Ray bug")), False),
    ],
    ids=["semray-cause", "semray-dual-class", "not-semray"],
)
def test_the_executors_abort_notice_of_a_semray_error_stays_off_the_console(error: RayTaskError, hidden: bool) -> None:
    """Ray Data's executor logs 'An exception was raised from a task of operator ...' with the
    task's whole trace (with ANSI codes) on ``EXECUTOR_LOGGER``; a type change past the inference
    window put ~95 such lines above semray's one-line error."""
    from semray.cluster import connect as connecting

    connecting._configure_data_context()
    logger = logging.getLogger(connecting.EXECUTOR_LOGGER)
    handler = _Keep()
    logger.addHandler(handler)
    try:
        logger.error("An exception was raised from a task of operator ...", exc_info=_raised(error))
    finally:
        logger.removeHandler(handler)
    (record,) = handler.records
    assert HiddenRecordFilter().filter(record) is not hidden


def test_a_replicas_failed_request_trace_stays_in_its_log_file(tmp_path: Path) -> None:
    """Serve logs each failed request with its trace on the replica's console handler, which Ray
    forwards to the driver's terminal (37 lines per failed batch for an endpoint that is down);
    semray's error reaches the caller anyway. The file handler keeps it; a failure that is not
    semray's stays on the console."""
    import io

    from semray.serving.deployments import quiet_reported_failures
    from semray.serving.errors import EndpointUnavailableError

    logger = logging.getLogger("test.serve.replica")
    console, log_file = io.StringIO(), tmp_path / "replica.log"
    handlers = [logging.StreamHandler(console), logging.FileHandler(log_file)]
    for handler in handlers:
        logger.addHandler(handler)
    try:
        quiet_reported_failures(logger)
        quiet_reported_failures(logger)  # a second replica in the process adds nothing
        down = EndpointUnavailableError(
            "http://127.0.0.1:9/v1/chat/completions", "m", "unreachable", "ConnectError", attempts=5
        )
        logger.error("Request failed.", exc_info=_raised(down))
        assert console.getvalue() == ""
        logger.error("Request failed.", exc_info=_raised(RuntimeError("a bug in a backend")))
        assert "a bug in a backend" in console.getvalue()
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
    written = log_file.read_text()
    assert "EndpointUnavailableError" in written and "a bug in a backend" in written
    assert all(len(handler.filters) <= 1 for handler in handlers)
