"""A join factorization checked on a sample of pairs before the plan uses it.

``verify_factorization(join, candidate, left, right, ask, ...)``: from the sampled rows of each
side, pairs are drawn uniformly with replacement (seeded by the operator, so a re-run draws the
same pairs), ``pairs`` more per look, up to ``max_pairs``. Each distinct pair is asked pairwise,
on the join's tier, exactly as the nested join asks it (``prompts.set_ops.pair_template`` as a
filter); each row in a drawn pair is asked the side question of the candidate
(``lowering/set_ops.factor_task``, the very stage the factorized join runs), on the same tier, and
the pair's factorized answer is the relational condition the join applies (a failed side answer
joins nothing). The agreement of the two answers over the draws is a binomial share: it is kept
only when its one-sided Wilson lower bound (``cost_model.sampling.wilson_interval`` at
``z = Phi^-1(confidence)``, the confidence split over the looks) reaches the target; it stops
early once the upper bound falls below the target.

Pairs whose pairwise answer failed are left out (nothing to compare with). The draws are
independent and uniform over the sampled rows' pairs, so the bound is on the agreement over
those pairs; the sampled rows are the first rows of each side (like the code choice), so a side
sorted by its property can make the sample unrepresentative.

>>> relate("Positive ", "positive", "="), relate(3.0, 7.0, ">"), relate(None, "x", "<>")
(True, False, False)
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from semray.cost_model.bounds import agreement_lower_bound, decide, look_confidence, looks_for
from semray.operators.keys import operator_key
from semray.operators.schema import right_names
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.set_ops import factor_task, side_columns
from semray.serving.contract import ModelRequest, ModelResponse
from semray.serving.prompts.operators import row_request
from semray.serving.prompts.set_ops import pair_template
from semray.tasks import Question, TaskKind

Row = Mapping[str, object]
Ask = Callable[[str, Sequence[ModelRequest]], list[ModelResponse]]
"""Answers a batch of requests on a tier (``small`` or ``large``), in order."""


@dataclass(frozen=True, slots=True)
class Verification:
    """How the factorized answers agreed with the pairwise ones on the drawn pairs."""

    pairs: int
    agreeing: int
    lower_bound: float
    calls: int
    dollars: float
    tokens_in: int = 0
    tokens_out: int = 0

    @property
    def agreement(self) -> float:
        return self.agreeing / self.pairs if self.pairs else 0.0


def relate(left: object, right: object, relation: str) -> bool:
    """The factorized answer of a pair: the join's relation on the two sides' values (null: no pair)."""
    if left is None or right is None:
        return False
    if relation in ("<", ">"):
        try:
            a, b = float(left), float(right)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return a > b if relation == ">" else a < b
    same = str(left).strip().casefold() == str(right).strip().casefold()
    return same if relation == "=" else not same


def draw_pairs(join: SemJoin, left_rows: int, right_rows: int, pairs: int) -> list[tuple[int, int]]:
    """``pairs`` uniform draws (with replacement) of (left index, right index), seeded by the join."""
    seed = int(hashlib.sha256(f"factor-pairs:{operator_key(join)}".encode()).hexdigest()[:16], 16)
    rng = random.Random(seed)
    return [(rng.randrange(left_rows), rng.randrange(right_rows)) for _ in range(pairs)]


def verify_factorization(
    join: SemJoin,
    candidate: SemJoin,
    left: Sequence[Row],
    right: Sequence[Row],
    ask: Ask,
    *,
    pairs: int,
    max_pairs: int,
    target: float,
    confidence: float,
) -> Verification:
    """Compare ``candidate`` (``join`` factorized) with ``join``'s pairwise answers on drawn pairs.

    Sequential: ``pairs`` more draws per look, up to ``max_pairs``; it stops as soon as the lower
    bound reaches ``target`` (kept) or the upper bound falls below it (refused). Each of the
    ``looks`` bounds is taken at ``bounds.look_confidence`` (Bonferroni), so the decision holds at
    ``confidence`` whichever look makes it.
    """
    if not left or not right:
        return Verification(pairs=0, agreeing=0, lower_bound=0.0, calls=0, dollars=0.0)
    looks = looks_for(pairs, max_pairs)
    per_look = look_confidence(confidence, looks)
    drawn = draw_pairs(join, len(left), len(right), pairs * looks)
    answers: dict[str, ModelResponse] = {}
    paid: list[ModelResponse] = []
    compared = agreeing = 0
    lower = 0.0
    for look in range(looks):
        batch = drawn[look * pairs : (look + 1) * pairs]
        requests = [r for r in _requests(join, candidate, left, right, batch) if r.request_id not in answers]
        requests = list({request.request_id: request for request in requests}.values())
        responses = ask(join.resolved_tier(), requests) if requests else []
        paid += responses
        answers.update({request.request_id: response for request, response in zip(requests, responses, strict=True)})
        for i, j in batch:
            pairwise = _yes_no(answers[f"p{i}:{j}"])
            if pairwise is None:
                continue
            factorized = relate(
                _side(answers, candidate, right, "l", i), _side(answers, candidate, right, "r", j), candidate.relation
            )
            compared += 1
            agreeing += factorized == pairwise
        lower = agreement_lower_bound(agreeing, compared, per_look)
        if decide(agreeing, compared, target, per_look) != "undecided":
            break
    return Verification(
        pairs=compared,
        agreeing=agreeing,
        lower_bound=lower,
        calls=sum(response.calls for response in paid),
        dollars=sum(response.usage.dollars for response in paid),
        tokens_in=sum(response.usage.input_tokens for response in paid),
        tokens_out=sum(response.usage.output_tokens for response in paid),
    )


def _requests(
    join: SemJoin, candidate: SemJoin, left: Sequence[Row], right: Sequence[Row], batch: Sequence[tuple[int, int]]
) -> list[ModelRequest]:
    """The pairwise question of each pair and the side question of each row in them (ids ``p``, ``l``, ``r``)."""
    renames = right_names(join.left.output_schema, join.right.output_schema)
    question = Question(TaskKind.FILTER, pair_template(join.instruction, renames))
    requests = [
        row_request(
            question,
            {**left[i], **{renames[k]: v for k, v in right[j].items() if k in renames}},
            request_id=f"p{i}:{j}",
        )
        for i, j in batch
    ]
    left_task = factor_task(candidate, "l")
    requests += [row_request(left_task.question, left[i], request_id=f"l{i}") for i, _ in batch]
    if not candidate.right_labels:
        right_task = factor_task(candidate, "r")
        requests += [row_request(right_task.question, right[j], request_id=f"r{j}") for _, j in batch]
    return requests


def _side(
    answers: Mapping[str, ModelResponse], candidate: SemJoin, right: Sequence[Row], tag: str, index: int
) -> object:
    """A row's factorized value: its answer, or with ``right_labels`` the right row's own value."""
    column = _right_column(candidate)
    if tag == "r" and column is not None:
        return right[index].get(column)
    response = answers[f"{tag}{index}"]
    return response.value if response.ok else None


def _yes_no(response: ModelResponse) -> bool | None:
    """A pairwise answer as the filter stage reads it (Yes/No, true/false), or None when it failed."""
    if not response.ok:
        return None
    if isinstance(response.value, bool):
        return response.value
    return {"yes": True, "true": True, "no": False, "false": False}.get(str(response.value).strip().lower())


def _right_column(candidate: SemJoin) -> str | None:
    if not candidate.right_labels:
        return None
    (column,) = side_columns(candidate, "r")
    return column
