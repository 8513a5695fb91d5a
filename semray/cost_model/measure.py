"""Measure a semantic operator (or a chain of filters) on sample rows of its input: pure, no Ray.

`measure_statistics` takes the rows, a proxy (cheap non-negative scores per row, e.g. embedding
similarity to the instruction: `similarity_scores`) and a labeller (the top tier, as a
callable), and returns a `Measurement`:

1. **Selectivity.** Draw ``budget`` rows with replacement, with probability proportional to the
   proxy mixed with uniform (`semray.cost_model.sampling.ImportanceProposal`); the product of
   the chain's proxies for a conjunction. The labeller answers each distinct drawn row once.
2. **Conjunctions by progressive sampling.** Filter ``k`` of a chain is labelled only on drawn
   rows that passed filters ``1..k-1``. The conjunction's selectivity is the Hansen-Hurwitz
   mean of ``w * prod_k y_k`` (unbiased); filter ``k``'s selectivity is its conditional one
   given the earlier filters (`estimate_conditional_mean`), so the product along the chain
   is the conjunction's.
3. **Tokens.** Every operator's prompt is counted on up to ``token_rows`` rows of a uniform
   subsample (`semray.cost_model.tokens.PromptTokens`), completion tokens on the top tier's
   answers (`count_answer_tokens`): mean with a normal interval, clipped to what was seen.
4. **Quality per tier.** Each of ``tier_labellers`` answers the same labelled rows; its
   agreement with the top tier is estimated like a selectivity (weighted, with an interval).
5. **Labels for reuse.** Every answer bought is returned keyed by ``_rowid``
   (`Measurement.labels`), for the engine to journal so execution never pays for them twice.

A labeller is ``labeller(node, rows) -> answers`` (one per row; a filter answers a bool or
Yes/No). Example with a stand-in labeller:

>>> from semray.operators import Scan, SemFilter, Schema, SourceSpec
>>> scan = Scan(source=SourceSpec(kind="csv", path="r.csv"), source_schema=Schema.of(("t", "VARCHAR")))
>>> node = SemFilter(input=scan, instruction="{t} mentions a cat")
>>> rows = [{"_rowid": str(i), "t": "a cat" if i % 4 == 0 else "a dog"} for i in range(400)]
>>> truth = lambda node, batch: [row["t"] == "a cat" for row in batch]
>>> proxy = lambda node, batch: [0.9 if row["t"] == "a cat" else 0.1 for row in batch]
>>> found = measure_statistics(node, rows, proxy, truth, budget=40, seed=1)
>>> found.operators[0].selectivity.covers(0.25), len(found.labels()[statistics_key(node)]) <= 40
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from types import MappingProxyType

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from semray.cost_model.estimates import Interval
from semray.cost_model.quality import agreement
from semray.cost_model.sampling import (
    Estimate,
    ImportanceProposal,
    SampleDesign,
    SamplingError,
    draw_uniform_sample,
    estimate_conditional_mean,
    estimate_mean,
)
from semray.cost_model.statistics import PlanStatistics
from semray.cost_model.tokens import PromptTokens, count_answer_tokens
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.keys import statistics_key
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemFilter, SemJoin

log = get_logger(__name__)

Row = Mapping[str, object]
Labeller = Callable[[Node, Sequence[Row]], Sequence[object]]
Proxy = Callable[[Node, Sequence[Row]], npt.ArrayLike]
_YES = frozenset({"yes", "true", "1", "y", "t"})


def passes(answer: object) -> bool:
    """Whether a filter's answer keeps the row: True, or text Yes/true/1."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, int | float):
        return answer != 0
    return isinstance(answer, str) and answer.strip().casefold() in _YES


@dataclass(frozen=True, slots=True, eq=False)
class OperatorMeasurement:
    """What was measured about one operator; mappings are read-only."""

    node: Node
    key: str
    selectivity: Estimate | None
    """The kept fraction (a filter's, conditional on the earlier filters of its chain); None if row-preserving."""
    tokens_per_row: Interval
    output_tokens_per_row: Interval
    tier_quality: Mapping[str, Estimate]
    labels: Mapping[str, object]
    """``_rowid`` -> the top tier's answer, for every row it answered here."""
    tier_answers: Mapping[str, Mapping[str, object]]
    """tier -> ``_rowid`` -> that tier's answer (calibration answers, reusable too)."""


@dataclass(frozen=True, slots=True, eq=False)
class Measurement:
    """The measurements of one operator or chain, and the conjunction's selectivity for a chain."""

    operators: tuple[OperatorMeasurement, ...]
    conjunction: Estimate | None
    design: SampleDesign
    population: int
    row_ids: tuple[str, ...] = ()
    """``_rowid`` of every sample row, in the order the design's row indices refer to."""

    def row_weights(self) -> dict[str, float]:
        """``_rowid`` -> Hansen-Hurwitz weight of every labelled row: ``sum over its draws of
        1 / (n N q)`` (``n`` draws, ``N`` sample rows, ``q`` the row's draw probability).

        For any per-row figure ``y``, ``sum(weight * y)`` over the labelled rows is an unbiased
        estimate of its mean over the sample (the weights sum to about 1), so a pool of labelled
        rows weighted this way stands for the whole sample despite the importance draw.
        """
        design = self.design
        rows = design.rows_to_label
        per_draw = design.weights / design.n_draws
        weights = np.bincount(np.searchsorted(rows, design.draws), weights=per_draw, minlength=rows.shape[0])
        return {self.row_ids[int(row)]: float(weight) for row, weight in zip(rows, weights, strict=True)}

    def labels(self) -> dict[str, dict[str, object]]:
        """``statistics_key`` -> ``_rowid`` -> top-tier answer: what the engine journals for reuse."""
        return {op.key: dict(op.labels) for op in self.operators}

    def statistics(self, *, conservative_quality: bool = True) -> PlanStatistics:
        """As `PlanStatistics`; tier quality is the interval's low end unless ``conservative_quality=False``."""
        selectivity = {op.key: Interval.from_estimate(op.selectivity) for op in self.operators if op.selectivity}
        quality = {
            (op.key, tier): (estimate.low if conservative_quality else min(max(estimate.value, 0.0), 1.0))
            for op in self.operators
            for tier, estimate in op.tier_quality.items()
        }
        return PlanStatistics(
            selectivity=selectivity,
            tokens_per_row={op.key: op.tokens_per_row for op in self.operators},
            tier_quality=quality,
            output_tokens_per_row={op.key: op.output_tokens_per_row for op in self.operators},
        )


def measure_statistics(
    nodes: Node | Sequence[Node],
    rows: Sequence[Row] | pa.Table,
    proxy: Proxy,
    labeller: Labeller,
    *,
    budget: int = 50,
    seed: int = 0,
    tier_labellers: Mapping[str, Labeller] | None = None,
    token_rows: int = 500,
    confidence: float = 0.95,
    tokens: PromptTokens | None = None,
) -> Measurement:
    """Measure ``nodes`` (one operator, or filters applied in order then optionally one more operator).

    ``rows`` is a sample of the first operator's input with a ``_rowid`` column; ``budget`` is
    the number of importance draws (at most that many rows are labelled per operator). With
    ``budget >= len(rows)`` every row is labelled and the figures are exact for the sample.
    """
    chain = (nodes,) if isinstance(nodes, Node) else tuple(nodes)
    _check_chain(chain)
    table = rows.to_pylist() if isinstance(rows, pa.Table) else list(rows)
    if not table:
        raise SamplingError("no sample rows to measure on; read some rows of the operator's input first")
    row_ids = _row_ids(table)
    size = len(table)
    design = _design(chain, table, proxy, budget, seed)
    counter = tokens or PromptTokens()
    token_sample = _uniform_subset(size, token_rows, seed)
    labelled = design.rows_to_label
    reached = np.ones(labelled.shape[0], dtype=bool)  # per labelled row: passed every earlier filter
    passed_all = np.ones(labelled.shape[0], dtype=np.float64)
    measured: list[OperatorMeasurement] = []
    for node in chain:
        active = labelled[reached]
        batch = [table[i] for i in active]
        answers = list(labeller(node, batch)) if batch else []
        if len(answers) != len(batch):
            raise SamplingError(f"labeller gave {len(answers)} answers for {len(batch)} rows of {node.label()}")
        kept = np.zeros(labelled.shape[0], dtype=np.float64)
        kept[reached] = [float(passes(a)) for a in answers] if _is_filter(node) else 1.0
        selectivity = None
        if _is_filter(node):
            selectivity = (
                estimate_conditional_mean(
                    design,
                    design.labels_of_draws(kept),
                    design.labels_of_draws(reached.astype(np.float64)),
                    confidence=confidence,
                )
                if len(measured)
                else estimate_mean(design, design.labels_of_draws(kept), confidence=confidence)
            )
        quality, tier_answers = _calibrate(node, design, batch, answers, reached, tier_labellers or {}, confidence)
        measured.append(
            OperatorMeasurement(
                node=node,
                key=statistics_key(node),
                selectivity=selectivity,
                tokens_per_row=_mean_interval(counter.count_rows(node, [table[i] for i in token_sample]), confidence),
                output_tokens_per_row=_mean_interval(count_answer_tokens(answers, counter.counter), confidence),
                tier_quality=MappingProxyType(quality),
                labels=MappingProxyType({row_ids[i]: a for i, a in zip(active, answers, strict=True)}),
                tier_answers=MappingProxyType(
                    {
                        tier: MappingProxyType({row_ids[i]: a for i, a in zip(active, got, strict=True)})
                        for tier, got in tier_answers.items()
                    }
                ),
            )
        )
        passed_all = passed_all * kept
        reached = passed_all > 0
    conjunction = None
    if sum(_is_filter(node) for node in chain) > 1:
        conjunction = estimate_mean(design, design.labels_of_draws(passed_all), confidence=confidence)
    log.debug(
        "cost_model_measured",
        operators=len(chain),
        rows=size,
        draws=design.n_draws,
        labelled=int(labelled.shape[0]),
        design=design.design,
    )
    return Measurement(tuple(measured), conjunction, design, size, tuple(row_ids))


def _check_chain(chain: tuple[Node, ...]) -> None:
    if not chain:
        raise SamplingError("give at least one semantic operator to measure")
    for node in chain:
        if not node.calls_llm:
            raise SamplingError(f"{node.label()} calls no model; measure relational operators with filter_selectivity")
    for node in chain[:-1]:
        if not _is_filter(node):
            raise SamplingError(f"only filters may precede another operator in a measured chain, not {node.label()}")


def _is_filter(node: Node) -> bool:
    return isinstance(node, SemFilter | SemJoin)


def _row_ids(table: list[Row]) -> list[str]:
    if ROW_ID not in table[0]:
        raise SamplingError(f"sample rows need a {ROW_ID!r} column so that bought labels can be reused")
    return [str(row[ROW_ID]) for row in table]


def _design(chain: tuple[Node, ...], table: list[Row], proxy: Proxy, budget: int, seed: int) -> SampleDesign:
    size = len(table)
    if budget >= size:
        return draw_uniform_sample(size, size, seed)  # label every row: exact for the sample
    scores = np.ones(size, dtype=np.float64)  # no filter in the chain: uniform (the proposal's own fallback)
    for node in (node for node in chain if _is_filter(node)):
        values = np.asarray(proxy(node, table), dtype=np.float64)
        if values.shape != (size,):
            raise SamplingError(f"proxy gave {values.shape} scores for {size} rows of {node.label()}; give one per row")
        scores = scores * values
    return ImportanceProposal.from_scores(scores).draw(budget, seed)


def _calibrate(
    node: Node,
    design: SampleDesign,
    batch: list[Row],
    answers: list[object],
    reached: npt.NDArray[np.bool_],
    tier_labellers: Mapping[str, Labeller],
    confidence: float,
) -> tuple[dict[str, Estimate], dict[str, list[object]]]:
    quality: dict[str, Estimate] = {}
    tier_answers: dict[str, list[object]] = {}
    for tier, other in tier_labellers.items():
        got = list(other(node, batch)) if batch else []
        tier_answers[tier] = got
        agree = np.zeros(reached.shape[0], dtype=np.float64)
        agree[reached] = agreement(answers, got)
        quality[tier] = estimate_conditional_mean(
            design,
            design.labels_of_draws(agree),
            design.labels_of_draws(reached.astype(np.float64)),
            confidence=confidence,
        )
    return quality, tier_answers


def _uniform_subset(size: int, count: int, seed: int) -> npt.NDArray[np.int64]:
    if count >= size:
        return np.arange(size, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(size, size=count, replace=False)).astype(np.int64)


def _mean_interval(values: npt.NDArray[np.float64], confidence: float) -> Interval:
    """Mean of per-row counts with a normal-approximation interval, clipped to the range seen."""
    if values.shape[0] == 0:
        return Interval.exact(0.0)
    mean = float(values.mean())
    if values.shape[0] < 2:
        return Interval.exact(mean)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    half = z * float(values.std(ddof=1)) / math.sqrt(values.shape[0])
    return Interval(mean, max(mean - half, float(values.min())), min(mean + half, float(values.max())))


def similarity_scores(
    row_vectors: npt.ArrayLike, query_vector: npt.ArrayLike, *, temperature: float = 0.05
) -> npt.NDArray[np.float64]:
    """Proxy scores from embeddings: ``exp((cos - max cos) / temperature)``, in (0, 1].

    Vectors need not be normalised. The temperature sharpens similarity so that the rows most
    like the instruction are drawn far more often (0.05 suits MiniLM cosines).

    >>> similarity_scores([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0]).round(3).tolist()
    [1.0, 0.0]
    """
    rows = np.asarray(row_vectors, dtype=np.float64)
    query = np.asarray(query_vector, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
    cosine = rows @ query / np.maximum(norms, 1e-12)
    return np.asarray(np.exp((cosine - cosine.max()) / temperature), dtype=np.float64)
