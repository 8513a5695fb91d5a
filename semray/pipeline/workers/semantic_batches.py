"""Actor-pool UDFs of semantic operators: one model round trip per batch, journaled.

Each actor holds the tiers' Serve handles and the run's batch ledger. For a batch it
takes already-committed answers from the ledger (a resumed run never pays twice), then the
answers this tier gave the same question while the run measured its statistics (journaled
under ``estimation_key``; see ``semray.pipeline.runs.measure_in_run``), asks the tier about the
remaining rows in one call, commits those answers, and applies them: a filter keeps rows,
the other operators add typed columns. The rows that got no answer are committed with the
batch too, by reason (``semray.pipeline.workers.failed_rows``), so the run counts them per operator.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from semray.errors import FailedRowsError
from semray.log import get_logger
from semray.pipeline.stages.semantic import SemanticTask, estimation_key
from semray.pipeline.workers.failed_rows import failure_reason, first_row_failed, row_failures
from semray.pipeline.workers.metering import OPERATOR_NAMES, OperatorMeter, usage_of
from semray.pipeline.workers.row_counts import RowCounts, count_rows
from semray.serving.contract import ModelResponse
from semray.serving.handles import TierHandles
from semray.serving.prompts.operators import row_request
from semray.tasks import TaskKind
from semray.transactions import BatchLedger, LLMUsage, batch_key
from semray.transactions.batches import ROW_ID  # operators.schema's, without the plan layer in every actor

log = get_logger(__name__)

KEEP = "_keep"
ERROR = "_error"
TIER = "_tier"
CONFIDENCE = "_confidence"
ARROW_TYPES = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "date": pa.date32()}


class SemanticBatchUDF:
    """Callable class for ``map_batches(compute=ActorPoolStrategy(...))``."""

    def __init__(
        self,
        task: SemanticTask,
        operator_key: str,
        tiers: TierHandles,
        ledger: BatchLedger | None,
        *,
        row_counts: RowCounts | None = None,
        counted_as: tuple[str, ...] = (),
    ) -> None:
        """``row_counts``/``counted_as``: report each output batch as the rows of these operators."""
        self.task = task
        self.operator_key = operator_key
        self.tiers = tiers
        self.ledger = ledger
        self.row_counts = row_counts
        self.counted_as = counted_as
        self.meter = OperatorMeter.for_task(run_of(ledger), task)
        """What only the actors know of the operator's calls, to the Ray dashboard (``workers/metering.py``)."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        output = self.apply(batch, self.answers(batch))
        if self.row_counts is not None and self.counted_as:
            count_rows(output, self.row_counts, self.counted_as)
        return output

    def answers(self, batch: pa.Table) -> pa.Table:
        """One answer row per row of ``batch`` (any order): committed ones reused, the rest asked."""
        if batch.num_rows == 0:
            return self.answers_schema().empty_table()
        parts: list[pa.Table] = []
        todo = batch
        for key in self._committed_keys():
            todo = self._take_committed(key, todo, parts)
            if not todo.num_rows:
                break
        if todo.num_rows:
            parts.append(self._ask(todo))
        return pa.concat_tables(parts) if parts else self.answers_schema().empty_table()

    def _committed_keys(self) -> tuple[str, ...]:
        """Where answers may already be committed: this operator's key, then what estimation
        bought from this same tier for this question (never another tier's answers)."""
        if self.ledger is None:
            return ()
        question = self.task.question_key
        if question is None or self.task.tier in ("cascade", "auto"):
            return (self.operator_key,)
        reused = estimation_key(question, self.task.tier)
        return (self.operator_key,) if reused == self.operator_key else (self.operator_key, reused)

    def _take_committed(self, key: str, todo: pa.Table, parts: list[pa.Table]) -> pa.Table:
        """Append the rows of ``todo`` committed under ``key`` to ``parts``; return the rest."""
        assert self.ledger is not None
        row_ids = [str(value) for value in todo.column(ROW_ID).to_pylist()]
        found = self.ledger.lookup_rows(key, row_ids)
        if found.table is None or not found.table.num_rows:
            return todo
        taken = found.table.select(self.answers_schema().names).cast(self.answers_schema())
        parts.append(taken)
        if key != self.operator_key:
            log.debug("semantic_answers_reused", kind=self.task.kind, tier=self.task.tier, rows=taken.num_rows)
            # Under this operator's own key too, at no cost: its journal then counts every row it
            # answered (EXPLAIN's actual rows), and a resume finds them there first.
            self._commit(taken, LLMUsage())
        return todo.filter(pc.is_in(todo.column(ROW_ID), pa.array(found.missing, pa.string())))

    # asking --------------------------------------------------------------------------
    def _ask(self, rows: pa.Table) -> pa.Table:
        task = self.task
        ids = [str(value) for value in rows.column(ROW_ID).to_pylist()]
        question = task.question
        requests = [
            row_request(question, row, request_id=row_id) for row_id, row in zip(ids, rows.to_pylist(), strict=True)
        ]
        if self.ledger is not None:
            # An orphaned actor of a killed driver stops here once a resume began: it pays no more.
            self.ledger.raise_if_fenced()
        started = time.perf_counter()
        responses = self.tiers.generate(task.tier, requests)
        self.meter.responses(responses, time.perf_counter() - started)
        truncated = sum(1 for response in responses if response.truncated)
        if truncated:
            # The tier cut these prompts to its context length (TierConfig.truncation); say how many.
            log.info("semantic_prompts_truncated", kind=task.kind, tier=task.tier, rows=truncated)
        answers = self._answers(ids, responses)
        if self.ledger is not None:
            self._commit(answers, usage_of(responses))
        return answers

    def _commit(self, answers: pa.Table, usage: LLMUsage) -> None:
        """Journal the answered rows of a batch with what the whole batch paid, and which rows
        failed and why.

        Failed rows (an empty cell, an unparseable reply, a model error, a row the simulator has
        no label for) are counted but not stored as answers: a resumed run asks them again
        instead of finding the same failure forever (a run stopped by ``on_error="fail"`` could
        otherwise never succeed on resume).
        """
        assert self.ledger is not None
        failed_mask = pc.is_valid(answers.column(ERROR))
        answered = answers.filter(pc.invert(failed_mask))
        failed = answers.filter(failed_mask)
        if not answered.num_rows and not failed.num_rows and not usage.calls:
            return
        ids = [str(value) for value in answered.column(ROW_ID).to_pylist()]
        failures = row_failures(
            [str(value) for value in failed.column(ROW_ID).to_pylist()], failed.column(ERROR).to_pylist()
        )
        key = batch_key(self.operator_key, ids or [str(value) for value in answers.column(ROW_ID).to_pylist()])
        kept = int(pc.sum(answered.column(KEEP)).as_py() or 0) if self.task.kind == TaskKind.FILTER else None
        self.ledger.commit(self.operator_key, key, ids, answered, usage, kept, failed=failures)

    def answers_schema(self) -> pa.Schema:
        """The answer rows' schema: built once per UDF (it is asked for on every batch)."""
        schema: pa.Schema | None = getattr(self, "_answers_schema", None)
        if schema is None:
            schema = self._answers_schema = self._schema_of_answers()
        return schema

    def _schema_of_answers(self) -> pa.Schema:
        fields = [
            pa.field(ROW_ID, pa.string()),
            pa.field(ERROR, pa.string()),
            pa.field(TIER, pa.string()),
            pa.field(CONFIDENCE, pa.float64()),
        ]
        if self.task.kind == TaskKind.FILTER:
            fields.append(pa.field(KEEP, pa.bool_()))
        fields += [pa.field(name, ARROW_TYPES[kind]) for name, kind in self.task.outputs]
        return pa.schema(fields)

    def _answers(self, ids: list[str], responses: list[ModelResponse]) -> pa.Table:
        columns: dict[str, list[Any]] = {name: [] for name in self.answers_schema().names}
        columns[ROW_ID] = ids
        for response in responses:
            values, error = self._values(response)
            columns[ERROR].append(error)
            columns[TIER].append(response.tier)
            columns[CONFIDENCE].append(response.confidence)
            for name, value in values.items():
                columns[name].append(value)
        return pa.table(columns, schema=self.answers_schema())

    def _values(self, response: ModelResponse) -> tuple[dict[str, Any], str | None]:
        """Typed output values of one response, and its error (values null on error)."""
        task = self.task
        empty = {name: None for name, _ in task.outputs}
        if task.kind == TaskKind.FILTER:
            empty[KEEP] = None
        if response.error is not None or response.value is None:
            return empty, response.error or "empty: the tier gave no value"
        try:
            if task.kind == TaskKind.FILTER:
                return {KEEP: _as_bool(response.value)}, None
            if task.kind == TaskKind.EXTRACT:
                value = response.value if isinstance(response.value, dict) else {}
                return {name: _typed(value.get(name), kind) for name, kind in task.outputs}, None
            ((name, kind),) = task.outputs
            return {name: _typed(response.value, kind)}, None
        except (TypeError, ValueError) as error:
            return empty, f"unparseable: {error}"

    # applying ------------------------------------------------------------------------
    def apply(self, batch: pa.Table, answers: pa.Table) -> pa.Table:
        """Keep rows (a filter) or add the output columns, row order of ``batch``."""
        position = {row_id: index for index, row_id in enumerate(answers.column(ROW_ID).to_pylist())}
        order = pa.array([position[str(row_id)] for row_id in batch.column(ROW_ID).to_pylist()], pa.int64())
        aligned = answers.take(order)
        errors = aligned.column(ERROR)
        failed = pc.is_valid(errors)
        count = int(pc.sum(failed).as_py() or 0)
        if count:
            first = next(error for error in errors.to_pylist() if error is not None)
            if self.task.on_error == "fail":
                label = task_label(self.task)
                raise FailedRowsError(
                    first_row_failed(label, count, first),
                    operator=label,
                    failed=count,
                    attempted=batch.num_rows,
                    reasons=dict(Counter(failure_reason(error) for error in errors.to_pylist() if error is not None)),
                )
            # Counted in the journal with the batch; the run totals them, fails past max_error_rate
            # and otherwise says how many failed (so one line per batch is only for debugging).
            log.info("semantic_rows_failed", kind=self.task.kind, rows=count, policy=self.task.on_error, first=first)
        result = batch
        for name, _ in self.task.outputs:
            result = result.append_column(name, aligned.column(name))
        if self.task.diagnostics:
            for name in (TIER, CONFIDENCE, ERROR):
                result = result.append_column(name, aligned.column(name))
        if self.task.kind == TaskKind.FILTER:
            return result.filter(pc.fill_null(aligned.column(KEEP), False))
        if self.task.on_error == "skip" and count:
            result = result.filter(pc.invert(failed))
        return result


def run_of(ledger: BatchLedger | None) -> str | None:
    """The run id a ledger commits to (its folder's name); None without one."""
    run_dir = getattr(ledger, "run_dir", None)
    return run_dir.name if run_dir is not None else None


def task_label(task: SemanticTask) -> str:
    """How an error names the operator a task belongs to, e.g. ``SemFilter [large] '{t} is urgent'``."""
    return f"{OPERATOR_NAMES.get(task.kind, 'SemExtract')} [{task.tier}] {task.instruction!r}"


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("yes", "true", "1"):
        return True
    if text in ("no", "false", "0"):
        return False
    raise ValueError(f"expected Yes or No, got {value!r}")


def _typed(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "text":
        return value if isinstance(value, str) else str(value)
    if kind == "int":
        return int(float(value)) if not isinstance(value, bool) else int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return _as_bool(value)
    if kind == "date":
        return datetime.date.fromisoformat(str(value)[:10])
    raise ValueError(f"unknown value type {kind!r}")
