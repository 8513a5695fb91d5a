"""What a run's semantic operators report to the Ray dashboard, one batch at a time.

Two recorders, so that nothing is counted twice:

* ``CommitMeter``, in the driver: every batch the driver's attempt commits to the journal (read
  by ``semray.pipeline.runs.progress.RunWatcher``) becomes rows in and out, failed rows, calls,
  tokens and dollars. The driver outlives the actor pools, so these reach the metrics agent
  even when a pool ends within Ray's ~10 s export interval. A batch an actor paid for and
  never committed (killed mid-batch) is not counted; one a resume fenced off
  (``BatchRefused``) counts its usage, not its rows.
* ``OperatorMeter``, in the actors (picklable: they get it with their constructor arguments):
  only what the journal lacks: a model round trip's requests, cache hits and errors
  (``responses``, counted from its ``ModelResponse`` list), its seconds, and in a cascade the
  tier that decided each row (``decided``). These can lag or be lost for a pool that ends
  within the export interval.

The driver tags a journal key with the operator name and tier the actors use
(``operator_tags``, journaled with the run as ``operator_metrics``).

>>> meter = OperatorMeter.of("run-1", "SemFilter[review is positive]", "large")
>>> meter.decided({"embedding": 20, "small": 8, "large": 4})  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semray.cluster import metrics
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import CascadeStage, SemanticStage, SemanticTask
from semray.pipeline.stages.set_ops import AggStage, EmbedStage, TopKStage
from semray.serving.contract import ModelResponse, Usage
from semray.tasks import TaskKind
from semray.transactions import LLMUsage
from semray.transactions.records import BatchCommitted, BatchRefused, Record, RunStarted


def usage_of(responses: Sequence[ModelResponse]) -> LLMUsage:
    """What the responses paid: ``calls`` counts model calls (2 after a repair re-ask, 0 for a cache
    hit or an input error), and cache hits pay nothing."""
    paid = [response for response in responses if not response.cache_hit]
    return LLMUsage(
        calls=sum(response.calls for response in paid),
        tokens_in=sum(response.usage.input_tokens for response in paid),
        tokens_out=sum(response.usage.output_tokens for response in paid),
        dollars=sum(response.usage.dollars for response in paid),
    )


def paid_for(usage: Usage | None, calls: int) -> LLMUsage:
    """A ledger's ``LLMUsage`` of ``calls`` model calls that used ``usage`` (None: nothing was asked)."""
    if usage is None:
        return LLMUsage(calls=calls)
    return LLMUsage(calls=calls, tokens_in=usage.input_tokens, tokens_out=usage.output_tokens, dollars=usage.dollars)


NO_RUN = "-"
"""The run tag of work outside a journaled run (a UDF driven by hand, tests)."""

OPERATOR_NAMES = {
    TaskKind.FILTER: "SemFilter",
    TaskKind.MAP: "SemMap",
    TaskKind.SCORE: "SemMap",
    TaskKind.CLASSIFY: "SemClassify",
    TaskKind.EXTRACT: "SemExtract",
}
NAME_CHARS = 60


def operator_name(task: SemanticTask, kind: str | None = None) -> str:
    """The plan operator as the Ray dashboard names it, e.g. ``SemFilter[review is positive]``.

    The instruction without its ``{column}`` braces, cut to 60 characters; ``kind`` names a set
    operator (``SemAgg``), whose task kind does not.
    """
    kind = kind or OPERATOR_NAMES.get(task.kind, "SemExtract")
    text = " ".join(task.instruction.replace("{", "").replace("}", "").split())
    if len(text) > NAME_CHARS:
        text = text[: NAME_CHARS - 3].rstrip() + "..."
    return f"{kind}[{text}]"


@dataclass(frozen=True, slots=True)
class OperatorMeter:
    """Records one operator's batches under its run, name and tier."""

    tags: metrics.MetricTags

    @classmethod
    def of(cls, run: str | None, operator: str, tier: str) -> OperatorMeter:
        return cls(metrics.MetricTags(run=run or NO_RUN, operator=operator, tier=tier))

    @classmethod
    def for_task(cls, run: str | None, task: SemanticTask) -> OperatorMeter:
        return cls.of(run, operator_name(task), task.tier)

    def on_tier(self, tier: str) -> OperatorMeter:
        return OperatorMeter(metrics.MetricTags(self.tags.run, self.tags.operator, tier))

    def responses(self, responses: Sequence[ModelResponse], seconds: float) -> None:
        """A model round trip's requests, cache hits and errors, and its seconds (what it paid
        is counted by the driver from the journal: ``CommitMeter``)."""
        # Counted directly: a UsageTotals per response (a validated model each) cost more than
        # the rest of a batch's bookkeeping on a zero-latency tier.
        metrics.record_model_usage(
            self.tags,
            metrics.ModelUsagePoint(
                requests=len(responses),
                cache_hits=sum(1 for response in responses if response.cache_hit),
                errors=sum(1 for response in responses if response.error is not None),
                seconds=seconds,
            ),
        )

    def decided(self, rows_by_tier: Mapping[str, int]) -> None:
        metrics.record_cascade_rows(self.tags, rows_by_tier)


def named_udf(udf: type[Any], name: str) -> type[Any]:
    """A subclass of the UDF class ``udf`` called ``name``, so Ray Data names its operator
    ``MapBatches(<name>)`` and the dashboard its actors ``MapWorker(MapBatches(<name>))``.

    Ray Data 2.60's ``map_batches`` takes no operator name; it names the operator after the
    callable class. The subclass adds nothing else (cloudpickle ships it by value).

    >>> named_udf(dict, "SemFilter[review is positive]").__name__
    'SemFilter[review is positive]'
    """
    key = (udf, name)
    if key not in _NAMED:
        _NAMED[key] = type(name, (udf,), {"__qualname__": name, "__module__": udf.__module__, "__doc__": udf.__doc__})
    return _NAMED[key]


_NAMED: dict[tuple[type[Any], str], type[Any]] = {}


STAGE_KINDS: dict[type[Stage], str] = {TopKStage: "SemTopK", AggStage: "SemAgg", EmbedStage: "Embed"}
"""Set operators, named by their stage (their task's kind does not say)."""


def operator_tags(stages: Stage) -> dict[str, Any]:
    """What the driver needs to tag a journal key as the actors do, for the run's journal config.

    ``operators``: journal key -> [operator name, tier] of each model-calling stage (a cascade's
    large answers under its key, its small tier's under ``KEY:small``, its proxies under
    ``KEY:embedding``); ``questions``: question key -> operator name, for the answers estimation
    bought (``answers:QUESTION:TIER``).
    """
    operators: dict[str, list[str]] = {}
    questions: dict[str, str] = {}

    def visit(stage: Stage) -> None:
        if isinstance(stage, SemanticStage):
            name = operator_name(stage.task, STAGE_KINDS.get(type(stage)))
            if isinstance(stage, CascadeStage):
                operators[stage.operator_key] = [name, "large"]
                operators[stage.operator_key + ":small"] = [name, "small"]
                operators[stage.operator_key + ":embedding"] = [name, "embedding"]  # its proxies
            else:
                operators[stage.operator_key] = [name, stage.task.tier]
            if stage.task.question_key is not None:
                questions[stage.task.question_key] = name
        for child in stage.inputs:
            visit(child)

    visit(stages)
    return {"operators": operators, "questions": questions}


@dataclass
class CommitMeter:
    """The driver's counters of the batches its attempt commits (module docstring).

    ``observe`` each journal record in order (the run's first, ``RunStarted``, carries the
    tags). Only the batches of ``attempt`` count: an earlier attempt's driver counted its own,
    so a resume counts what it adds, and a batch journaled twice counts once. Rows count for
    the plan's operators only (answers bought while estimating are paid, and counted in usage,
    under a key of no operator).
    """

    run: str
    attempt: int
    operators: dict[str, tuple[str, str]] = field(default_factory=dict)
    questions: dict[str, str] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def observe(self, record: Record) -> None:
        match record:
            case RunStarted():
                self._read_tags(record.config.get("operator_metrics"))
            case BatchCommitted() if record.attempt == self.attempt:
                key = (record.operator_key, record.batch_key)
                if key in self._seen:
                    return
                self._seen.add(key)
                failed = sum(len(group.row_ids) for group in record.failed)
                counted = record.operator_key in self.operators
                self._record(
                    record.operator_key,
                    record.usage,
                    rows_in=len(record.row_ids) + failed if counted else 0,
                    rows_out=record.rows_out if counted else 0,
                    failed=failed if counted else 0,
                )
            case BatchRefused() if record.current_attempt == self.attempt:
                self._record(record.operator_key, record.usage)

    def tags(self, operator_key: str) -> metrics.MetricTags:
        """The journal key's operator and tier; the key itself (no tier) for one the run did not name."""
        if operator_key in self.operators:
            name, tier = self.operators[operator_key]
            return metrics.MetricTags(self.run, name, tier)
        prefix, _, rest = operator_key.partition(":")
        question, _, tier = rest.rpartition(":")
        if prefix == "answers" and question in self.questions:
            return metrics.MetricTags(self.run, self.questions[question], tier)
        return metrics.MetricTags(self.run, operator_key, "")

    def _read_tags(self, config: object) -> None:
        if not isinstance(config, dict):
            return  # a run journaled before operator_metrics: its keys are their own tags
        operators, questions = config.get("operators"), config.get("questions")
        if isinstance(operators, dict):
            self.operators = {str(key): (str(value[0]), str(value[1])) for key, value in operators.items()}
        if isinstance(questions, dict):
            self.questions = {str(key): str(value) for key, value in questions.items()}

    def _record(self, operator_key: str, usage: LLMUsage, rows_in: int = 0, rows_out: int = 0, failed: int = 0) -> None:
        point = metrics.CommittedPoint(
            rows_in=rows_in,
            rows_out=rows_out,
            failed_rows=failed,
            calls=usage.calls,
            tokens_in=usage.tokens_in,
            tokens_out=usage.tokens_out,
            dollars=usage.dollars,
        )
        metrics.record_committed(self.tags(operator_key), point)
