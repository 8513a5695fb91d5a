"""Failed rows without Ray: totals per operator from the journal, the max_error_rate threshold and
its message, operator labels from a lowered plan, and how a failed Ray task's error is unwrapped.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import semray
from semray.errors import ExecutionError, FailedRowsError, SemrayError, SourceError
from semray.pipeline.runs.execute import Result
from semray.pipeline.runs.resume_record import Job
from semray.pipeline.workers.failed_rows import (
    FailedRows,
    OperatorFailures,
    check_failed_rows,
    failed_rows,
    operator_labels,
    row_failures,
)
from semray.settings import Settings
from semray.transactions import FailureCount, LLMUsage, OperatorProgress, open_run


def failures(attempted: int, failed: int, reason: str = "no_label") -> FailedRows:
    reasons = (FailureCount(reason=reason, rows=failed, example=f"{reason}: row r1 has none"),) if failed else ()
    return FailedRows((OperatorFailures("k", "SemFilter '{t} is good'", "rows", attempted, failed, reasons),))


@pytest.mark.parametrize(("failed", "fails"), [(0, False), (10, False), (11, True), (100, True)])
def test_the_run_fails_only_past_max_error_rate(failed: int, fails: bool) -> None:
    if fails:
        with pytest.raises(FailedRowsError):
            check_failed_rows(failures(100, failed), 0.1)
    else:
        check_failed_rows(failures(100, failed), 0.1)


def test_the_threshold_can_be_raised_to_accept_every_failure() -> None:
    check_failed_rows(failures(300, 300), 1.0)
    with pytest.raises(FailedRowsError):
        check_failed_rows(failures(300, 1), 0.0)


def test_the_message_says_which_operator_how_many_why_and_what_to_do() -> None:
    with pytest.raises(FailedRowsError) as raised:
        check_failed_rows(failures(300, 300), 0.1)
    error = raised.value
    message = str(error)
    assert message.startswith("SemFilter '{t} is good': 300 of 300 rows got no answer (100%")
    assert "no_label (300), e.g. 'no_label: row r1 has none'" in message
    assert "give it labels" in message and "model profile" in message
    assert 'on_error="skip"' in message and "SEMRAY_MAX_ERROR_RATE" in message
    assert (error.failed, error.attempted, error.reasons) == (300, 300, {"no_label": 300})
    assert isinstance(error, ExecutionError)
    copy = pickle.loads(pickle.dumps(error))  # crosses Ray's process boundaries
    assert type(copy) is FailedRowsError and str(copy) == message and copy.reasons == error.reasons


def test_every_semray_error_pickles_whatever_its_constructor() -> None:
    from semray.errors import ColumnNotFoundError

    error = ColumnNotFoundError("revew", ["review", "rating"], "'reviews'")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ColumnNotFoundError and str(copy) == str(error) and copy.column == "revew"


def test_the_loud_line_of_a_run_below_the_threshold() -> None:
    found = failures(300, 12)
    assert found.line() == "12 rows failed: SemFilter '{t} is good' 12 of 300"
    result = Result(pa.table({"x": [1]}), run_id="run-1", failures=found)
    assert result.failed_rows == 12
    assert result.failed_line().startswith("WARNING: 12 rows failed: SemFilter '{t} is good' 12 of 300")
    assert "semray runs show run-1" in result.failed_line()
    assert Result(pa.table({"x": [1]})).failed_line() == ""


def test_totals_come_from_the_journal_per_operator_of_the_plan(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    reviews = tmp_path / "reviews.csv"
    reviews.write_text("id,review\n1,great lamp\n2,broken fan\n", encoding="utf-8")
    query = (
        semray.read_csv(reviews, settings)
        .sem_filter("{review} is positive")
        .sem_classify("topic of {review}", "lamp|fan", output="topic")
    )
    job = Job.prepare(query.plan, settings, None)
    labels = operator_labels(job.plan, job.stages)
    assert sorted(label for label, _ in labels.values()) == [
        "SemClassify 'topic of {review}'",
        "SemFilter '{review} is positive'",
    ]
    classify, filter_ = sorted(labels, key=lambda key: labels[key][0])
    with open_run(settings, plan={"t": 1}, output=None) as run:
        run.ledger.commit(filter_, "b1", ["1"], pa.table({"_rowid": ["1"]}), LLMUsage(calls=1))
        failed = row_failures(["2"], ["no_label: the simulator has no label"])
        run.ledger.commit(filter_, "b2", [], pa.table({"_rowid": pa.array([], pa.string())}), failed=failed)
        run.ledger.commit("answers:xyz:large", "b3", [], pa.table({"_rowid": ["9"]}), failed=failed)  # not the plan's
        found = failed_rows(run.state().operators.values(), labels)
    (only,) = found.operators  # the classification never ran: nothing to count
    assert (only.operator, only.attempted, only.failed, only.share) == ("SemFilter '{review} is positive'", 2, 1, 0.5)
    assert only.describe() == "SemFilter '{review} is positive': 1 of 2 rows failed (50%): no_label 1"
    assert classify not in {operator.operator_key for operator in found.operators}


def test_progress_without_failures_reads_as_zero() -> None:
    progress = OperatorProgress(operator_key="k", batches=1, rows_in=5)
    found = failed_rows([progress], {"k": ("SemMap 'x'", "rows")})
    assert found.total == 0 and found.line() == "" and found.operators[0].attempted == 5


# unwrapping Ray's errors -------------------------------------------------------------------


def task_error(cause: BaseException) -> BaseException:
    """What the driver gets from a failed task: a RayTaskError carrying ``cause`` (Ray's own
    constructor, with the traceback text Ray would print, ANSI codes included)."""
    from ray.exceptions import RayTaskError

    traceback = (
        f"\x1b[36mray::MapBatches(udf)()\x1b[39m (pid=1, ip=127.0.0.1)\n  File x\n{type(cause).__name__}: {cause}"
    )
    return RayTaskError("MapBatches(udf)", traceback, cause, proctitle="ray::x", pid=1, ip="127.0.0.1")


RETRY_NOTE = (
    "\nFailed to apply UDF transform after 1/1 attempts (total backoff 0.0s).\nTo change retry attempts, backoff, "
    "or which errors are retried, configure `ray.data.DataContext.get_current()`"
)


def reraised(error: BaseException) -> BaseException:
    from semray.pipeline.ray.failures import reported_failures

    with pytest.raises(BaseException) as caught, reported_failures():
        raise error
    return caught.value


def test_a_semray_error_in_a_task_reaches_the_caller_as_itself() -> None:
    source = SourceError("cannot read CSV 'x.csv': row 900 has text in column 'rating'" + RETRY_NOTE)
    for raised in (task_error(source), task_error(source).as_instanceof_cause()):  # type: ignore[attr-defined]
        error = reraised(raised)
        assert type(error) is SourceError
        assert str(error) == "cannot read CSV 'x.csv': row 900 has text in column 'rating'"


def test_a_semray_error_behind_two_ray_wrappers_is_found() -> None:
    class EndpointDown(SemrayError):
        def __init__(self, url: str, status: int) -> None:
            super().__init__(f"endpoint {url} answered HTTP {status}")
            self.url = url

    inner = task_error(EndpointDown("http://127.0.0.1:9/v1", 503)).as_instanceof_cause()  # type: ignore[attr-defined]
    error = reraised(task_error(inner))
    assert isinstance(error, EndpointDown) and error.url == "http://127.0.0.1:9/v1"
    assert str(error) == "endpoint http://127.0.0.1:9/v1 answered HTTP 503" and "\x1b" not in str(error)


def test_another_error_is_named_by_its_innermost_cause_not_by_rays_retry_note() -> None:
    cause = ValueError("Conversion Error: Could not convert string 'lamp' to INT32" + RETRY_NOTE)
    error = reraised(task_error(cause))
    assert type(error) is ExecutionError
    assert str(error) == "the pipeline failed: ValueError: Conversion Error: Could not convert string 'lamp' to INT32"


def test_set_operators_commit_their_failed_questions(tmp_path: Path) -> None:
    from semray.pipeline.workers.journaled_questions import JournaledAsker
    from semray.serving.contract import ModelRequest, ModelResponse, error_response

    class Tiers:
        def generate(self, tier: str, requests: list[ModelRequest]) -> list[ModelResponse]:
            return [
                ModelResponse(text="Yes", value="Yes", confidence=0.9, request_id=r.request_id)
                if r.request_id == "a>b"
                else error_response(r, "no_label: the simulator has no label", tier=tier, model="sim")
                for r in requests
            ]

    with open_run(Settings(state_dir=tmp_path), plan={"t": 2}, output=None) as run:
        asker = JournaledAsker(Tiers(), "large", run.ledger, "topk")  # type: ignore[arg-type]
        answers = asker.ask([ModelRequest(prompt="p", request_id=i) for i in ("a>b", "a>c", "b>c")])
        progress = run.state().operators["topk"]
    assert answers == {"a>b": "Yes", "a>c": None, "b>c": None} and asker.failures == 2
    assert (progress.rows_in, progress.rows_failed, progress.failures[0].reason) == (1, 2, "no_label")
