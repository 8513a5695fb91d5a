"""What a semantic operator's actors report to the Ray dashboard, one batch at a time.

One ``OperatorMeter`` per operator (picklable: the actors get it with their constructor
arguments) turns what a batch did into ``semray.cluster.metrics`` points: the rows it took
and passed on (``rows``), what its model round trip asked and paid (``responses``: the same
``UsageTotals`` the serving layer's usage accounting sums), and in a cascade the tier that
decided each row (``decided``). Usage is counted as the tier reports it, whether or not the
batch then commits, so the dashboard shows what was spent; the journal shows what was bought.

>>> meter = OperatorMeter.of("run-1", "SemFilter[review is positive]", "large")
>>> meter.rows(32, 12)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semray.cluster import metrics
from semray.pipeline.spec import SemanticTask
from semray.serving.contract import ModelResponse
from semray.serving.usage import UsageTotals

NO_RUN = "-"
"""The run tag of work outside a journaled run (a UDF driven by hand, tests)."""

OPERATOR_NAMES = {"filter": "SemFilter", "map": "SemMap", "score": "SemMap", "classify": "SemClassify"}
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

    def rows(self, rows_in: int, rows_out: int) -> None:
        metrics.record_rows(self.tags, rows_in, rows_out)

    def responses(self, responses: Sequence[ModelResponse], seconds: float) -> None:
        """A model round trip's responses; the requests that got an error count as failed rows."""
        totals = sum((UsageTotals.of(response) for response in responses), UsageTotals())
        paid = [response for response in responses if not response.cache_hit]
        metrics.record_model_usage(
            self.tags,
            metrics.ModelUsagePoint(
                requests=totals.requests,
                calls=totals.calls,
                cache_hits=totals.cache_hits,
                errors=totals.errors,
                tokens_in=sum(response.usage.input_tokens for response in paid),
                tokens_out=sum(response.usage.output_tokens for response in paid),
                dollars=sum(response.usage.dollars for response in paid),
                seconds=seconds,
            ),
        )

    def failed(self, rows: int) -> None:
        metrics.record_failed_rows(self.tags, rows)

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
