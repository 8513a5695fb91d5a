"""Plan time: factorize semantic joins whose wording rule 7 cannot read, verified before use.

``choose_factorization(plan, ask, sample, choice)`` (on the configured tiers, as a journaled run:
``join_factorization_run.choose_factorization_for_run``), for every ``SemJoin`` still on
``implementation="auto"`` after the rules (rule 7 already factorized the exact "same X" /
"different X" forms):

1. **Candidate**, the first of: the syntactic forms rule 7 leaves to verification (ordered
   comparisons "{l.a} is more X than {r.b}", "opposite X") and one comparison phrase in free-form
   wording (``planner/join_factors.find_factorization``); a right side of at most
   ``choice.right_labels_max`` rows read by one column, whose values become the labels each left
   row is classified into (n calls, not n x m); else one structured-output call to the large
   tier (``prompts.set_ops.factorization_request``) that names the property, its labels and the
   relation, or says the condition does not factorize. A simulated large tier answers only
   labelled rows and is not asked (logged ``factorization_proposal_unavailable``).
2. **Verify** (``join_factor_check.verify_factorization``): pairs drawn from the first
   ``choice.sample_rows`` rows of each side, ``choice.sample_pairs`` per look up to
   ``choice.max_pairs``, pairwise against factorized; kept only when the one-sided Wilson lower
   bound of the agreement at ``choice.confidence`` (split over the looks) reaches
   ``choice.target``. Otherwise the join stays pairwise.
3. **Journal**: every proposal and every verification is a batch of the ledger of the join's own
   check run (``factor_proposal:<key>``, ``factor_trial:<key>``) with what its calls cost. The run is
   keyed by the join alone (``join_factorization_run.join_identity``: its predicate, both inputs,
   tiers, models and the choice), so a resumed check, a re-run, and any other query over the same
   join (under another LIMIT, another filter above it) find the verdict and pay nothing again
   (``FactorTrial.reused``).

The kept factorization is written into the node (``factor``, ``relation``, ``labels``,
``right_labels``, ``agreement``), so EXPLAIN's operator line names it and its measured agreement;
``FactorDecision.explain()`` gives one line per join, kept or not.

>>> FactorizationChoice().target, FactorizationChoice().sample_pairs, FactorizationChoice().worst_calls(256, 256)
(0.9, 100, 928)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from semray.cost_model.cardinality import row_bound
from semray.log import get_logger
from semray.operators import Node
from semray.operators.keys import operator_key
from semray.operators.plan_paths import operator_paths, rewrite_at_paths
from semray.operators.schema import ROW_ID
from semray.operators.semantic import SemJoin
from semray.pipeline.lowering.set_ops import side_columns
from semray.pipeline.runs.plan_time.code_commit import Lookup
from semray.pipeline.runs.plan_time.join_factor_check import Ask, Row, Verification, verify_factorization
from semray.pipeline.workers.metering import paid_for
from semray.planner.capabilities import rebuild
from semray.planner.join_factors import Factorization, detect_factorization, find_factorization
from semray.serving.contract import ResponseValue
from semray.serving.prompts.set_ops import factorization_request
from semray.transactions import BatchLedger, LLMUsage

log = get_logger(__name__)

PROPOSAL_TIER = "large"
BATCH = "trial"
_RELATIONS = {"same": "=", "different": "<>", "greater": ">", "less": "<"}
_TRIAL_SCHEMA = pa.schema(
    [
        ("origin", pa.string()),
        ("factor", pa.string()),
        ("relation", pa.string()),
        ("labels", pa.list_(pa.string())),
        ("right_labels", pa.bool_()),
        ("pairs", pa.int64()),
        ("agreeing", pa.int64()),
        ("lower_bound", pa.float64()),
        ("accepted", pa.bool_()),
        ("reason", pa.string()),
        ("calls", pa.int64()),
        ("dollars", pa.float64()),
    ]
)


@dataclass(frozen=True, slots=True)
class FactorizationChoice:
    """Keep a factorization when the agreement's lower bound at ``confidence`` is at least ``target``."""

    target: float = 0.9
    confidence: float = 0.95
    sample_rows: int = 64
    sample_pairs: int = 100
    max_pairs: int = 800
    right_labels_max: int = 16

    def worst_calls(self, left_rows: int, right_rows: int) -> int:
        """The most calls a verification can make: every drawn pair, every sampled row of each side."""
        pairs = min(self.max_pairs, left_rows * right_rows)
        return pairs + min(left_rows, self.sample_rows) + min(right_rows, self.sample_rows)

    def __post_init__(self) -> None:
        if not 0.0 < self.target <= 1.0 or not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"target is in (0, 1] and confidence in [0.5, 1), not {self.target}, {self.confidence}")
        if self.sample_rows < 1 or not 1 <= self.sample_pairs <= self.max_pairs or self.right_labels_max < 0:
            raise ValueError("sample_rows is at least 1, 1 <= sample_pairs <= max_pairs, right_labels_max >= 0")


DEFAULT_CHOICE = FactorizationChoice()


@dataclass(frozen=True, slots=True)
class FactorTrial:
    """One join's candidate (``origin``: detected, right-labels, proposed; or none) and its verification."""

    origin: str
    factor: str | None
    relation: str
    labels: tuple[str, ...]
    right_labels: bool
    pairs: int
    agreeing: int
    lower_bound: float
    accepted: bool
    reason: str
    calls: int
    dollars: float
    reused: bool = field(default=False, compare=False)
    """Found journaled (this join's verdict from an earlier check): no call was made for it now."""

    @property
    def agreement(self) -> float:
        return self.agreeing / self.pairs if self.pairs else 0.0

    def explain(self, instruction: str) -> str:
        cached = " [verdict journaled: reused, no call]" if self.reused else ""
        if self.origin == "none":
            return f"SemJoin {instruction!r}: pairwise ({self.reason}){cached}"
        shown = "left rows into the right values" if self.right_labels else f"{self.factor} {self.relation}"
        verdict = "factorized" if self.accepted else "pairwise"
        return (
            f"SemJoin {instruction!r}: {verdict}; {self.origin} factorization {shown}: "
            f"{self.agreeing}/{self.pairs} pairs agree, lower bound {self.lower_bound:.3f} ({self.reason}){cached}"
        )


@dataclass(frozen=True, slots=True)
class FactorDecision:
    """The plan after the choice and each candidate join's trial, by operator path."""

    plan: Node
    trials: Mapping[str, FactorTrial] = field(default_factory=dict)
    instructions: Mapping[str, str] = field(default_factory=dict)
    paid: LLMUsage = field(default_factory=LLMUsage)
    """What the journaled check runs of this decision paid (``join_factorization_run``); 0 when every
    verdict was found journaled, or when the choice ran without a run."""

    @property
    def calls(self) -> int:
        """The calls this decision made: its trials', less those found journaled."""
        return sum(trial.calls for trial in self.trials.values() if not trial.reused)

    def explain(self) -> str:
        """One line per candidate join: kept or pairwise, with the agreement measured."""
        return "\n".join(trial.explain(self.instructions[path]) for path, trial in self.trials.items())


Sample = Callable[[Node, int], pa.Table]
"""The first rows of a plan (a join's side), at most the count given."""


def factor_candidates(plan: Node) -> dict[str, SemJoin]:
    """The joins of ``plan`` whose implementation is still for the planner to choose, by path."""
    return {
        path: node
        for path, node in operator_paths(plan).items()
        if isinstance(node, SemJoin) and node.implementation == "auto"
    }


def choose_factorization(
    plan: Node,
    ask: Ask,
    sample: Sample,
    choice: FactorizationChoice = DEFAULT_CHOICE,
    *,
    propose: bool = True,
    ledger: BatchLedger | None = None,
    earlier: Lookup | None = None,
    row_counts: Callable[[Node], int | None] = row_bound,
) -> FactorDecision:
    """``plan`` with every candidate join whose verified factorization met ``choice.target`` factorized.

    ``ask(tier, requests)`` answers on a tier, ``sample(side, n)`` gives the first rows of a side,
    ``propose`` allows the large tier's proposal call, ``ledger`` (optional) journals proposals and
    trials, ``earlier`` (optional) finds them in a finished run, ``row_counts`` bounds each side's
    rows: a join whose pairs cost no more than verifying and running it factorized is not tried.
    """
    candidates = factor_candidates(plan)
    trials: dict[str, FactorTrial] = {}
    for path, join in candidates.items():
        trials[path] = trial_join(
            join, ask, sample, choice, propose=propose, ledger=ledger, earlier=earlier, row_counts=row_counts
        )
    return apply_trials(plan, candidates, trials)


def trial_join(
    join: SemJoin,
    ask: Ask,
    sample: Sample,
    choice: FactorizationChoice = DEFAULT_CHOICE,
    *,
    propose: bool = True,
    ledger: BatchLedger | None = None,
    earlier: Lookup | None = None,
    row_counts: Callable[[Node], int | None] = row_bound,
) -> FactorTrial:
    """One candidate join's trial (arguments as `choose_factorization`): found in ``ledger`` or
    ``earlier`` when journaled (``reused`` set), else made now and committed to ``ledger``."""
    too_small = not_worth_trying(join, choice, row_counts)
    if too_small is not None:
        return FactorTrial("none", None, "=", (), False, 0, 0, 0.0, False, too_small, 0, 0.0)
    key = _trial_key(join, choice)
    found = _found(key, ledger, earlier)
    if found is not None:
        log.info("factor_trial_reused", instruction=join.instruction, accepted=found.accepted)
        return dataclasses.replace(found, reused=True)
    trial, paid = _trial(join, ask, sample, choice, propose, ledger, earlier)
    if ledger is not None:
        _commit(ledger, key, trial, paid)
    return trial


def apply_trials(plan: Node, candidates: Mapping[str, SemJoin], trials: Mapping[str, FactorTrial]) -> FactorDecision:
    """``plan`` with the joins whose trial was accepted factorized, by operator path."""
    rewrites = {path: _applying(trial) for path, trial in trials.items() if trial.accepted}
    rewritten = rewrite_at_paths(plan, rewrites) if rewrites else plan
    return FactorDecision(rewritten, dict(trials), {path: join.instruction for path, join in candidates.items()})


def not_worth_trying(
    join: SemJoin, choice: FactorizationChoice, row_counts: Callable[[Node], int | None]
) -> str | None:
    """Why ``join`` is too small to try (its pairs cost no more than verifying and factorizing), or None."""
    left, right = row_counts(join.left), row_counts(join.right)
    if left is None or right is None:
        return None
    cost = choice.worst_calls(left, right) + left + right
    if cost < left * right:
        return None
    return f"{left * right} pairs cost no more than verifying and factorizing ({cost} calls at most)"


def _applying(trial: FactorTrial) -> Callable[[Node], Node]:
    def apply(node: Node) -> Node:
        return _factorized(node, trial, agreement=round(trial.agreement, 6))

    return apply


def _factorized(node: Node, trial: FactorTrial, agreement: float | None = None) -> SemJoin:
    joined = rebuild(
        node,
        implementation="factorized",
        factor=trial.factor,
        relation=trial.relation,
        labels=trial.labels,
        right_labels=trial.right_labels,
        agreement=agreement,
    )
    assert isinstance(joined, SemJoin)
    return joined


def _trial(
    join: SemJoin,
    ask: Ask,
    sample: Sample,
    choice: FactorizationChoice,
    propose: bool,
    ledger: BatchLedger | None,
    earlier: Lookup | None,
) -> tuple[FactorTrial, LLMUsage]:
    found, origin, reason, proposal = _candidate(join, sample, ask, choice, propose, ledger, earlier)
    if found is None:
        log.info("factorization_none", instruction=join.instruction, reason=reason)
        none = FactorTrial(origin, None, "=", (), False, 0, 0, 0.0, False, reason, proposal.calls, proposal.dollars)
        return none, LLMUsage()
    trial = FactorTrial(
        origin,
        found.factor or None,
        found.relation,
        found.labels,
        origin == "right-labels",
        0,
        0,
        0.0,
        False,
        "",
        0,
        0.0,
    )
    candidate = _factorized(join, trial)
    left, right = _rows(sample(join.left, choice.sample_rows)), _rows(sample(join.right, choice.sample_rows))
    checked: Verification = verify_factorization(
        join, candidate, left, right, ask,
        pairs=choice.sample_pairs, max_pairs=choice.max_pairs, target=choice.target, confidence=choice.confidence,
    )  # fmt: skip
    accepted = checked.pairs > 0 and checked.lower_bound >= choice.target
    comparison = ">=" if accepted else "<"
    verdict = f"{comparison} target {choice.target} at {choice.confidence:.0%} confidence"
    log.info(
        "factor_trial",
        instruction=join.instruction,
        origin=origin,
        relation=found.relation,
        accepted=accepted,
        agreement=checked.agreement,
        lower_bound=checked.lower_bound,
        calls=checked.calls,
    )
    return FactorTrial(
        origin,
        trial.factor,
        found.relation,
        found.labels,
        trial.right_labels,
        checked.pairs,
        checked.agreeing,
        checked.lower_bound,
        accepted,
        verdict,
        checked.calls + proposal.calls,
        checked.dollars + proposal.dollars,
    ), LLMUsage(
        calls=checked.calls, tokens_in=checked.tokens_in, tokens_out=checked.tokens_out, dollars=checked.dollars
    )


def _candidate(
    join: SemJoin,
    sample: Sample,
    ask: Ask,
    choice: FactorizationChoice,
    propose: bool,
    ledger: BatchLedger | None,
    earlier: Lookup | None,
) -> tuple[Factorization | None, str, str, LLMUsage]:
    """The candidate, its origin, why there is none, and what proposing it cost."""
    nothing = LLMUsage()
    detected = detect_factorization(join.instruction) or find_factorization(join.instruction)
    if detected is not None:
        return detected, "detected", "", nothing
    columns = side_columns(join, "r")
    right = _rows(sample(join.right, choice.right_labels_max + 1)) if len(columns) == 1 else []
    if right and len(right) <= choice.right_labels_max:
        values = tuple(dict.fromkeys(str(row[columns[0]]).strip() for row in right if row.get(columns[0]) is not None))
        if values:
            return Factorization("", "=", values), "right-labels", "", nothing
    if not propose:
        return None, "none", "no form detected; the large tier cannot propose one (simulated)", nothing
    proposed, paid = _proposal(join, ask, ledger, earlier)
    if proposed is None:
        return None, "none", "the large tier says the condition does not factorize", paid
    return proposed, "proposed", "", paid


def _proposal(
    join: SemJoin, ask: Ask, ledger: BatchLedger | None, earlier: Lookup | None
) -> tuple[Factorization | None, LLMUsage]:
    key = f"factor_proposal:{operator_key(join)}"
    found = ledger.lookup(key, BATCH) if ledger is not None else None
    if found is None and earlier is not None:
        found = earlier(key, BATCH)
    paid = LLMUsage()
    if found is not None:
        value = json.loads(found.column("reply")[0].as_py())
    else:
        (response,) = ask(PROPOSAL_TIER, [factorization_request(join.instruction, request_id="propose")])
        value = response.value if response.ok else None
        log.info("factorization_proposal", instruction=join.instruction, reply=value, error=response.error)
        if ledger is not None:
            paid = paid_for(response.usage, response.calls)
            ledger.commit(key, BATCH, (), pa.table({"reply": [json.dumps(value)]}), usage=paid)
    return parse_proposal(value), paid


def parse_proposal(value: ResponseValue) -> Factorization | None:
    """A proposal reply (``PROPOSE_OUTPUT``) as a factorization, or None (does not factorize, or malformed).

    >>> parse_proposal({"factorizes": True, "property": "tone", "relation": "different", "labels": ["calm", "angry"]})
    Factorization(factor='tone', relation='<>', labels=('calm', 'angry'), exact=False)
    >>> parse_proposal({"factorizes": False, "property": "", "relation": "same", "labels": []}) is None
    True
    """
    if not isinstance(value, dict) or value.get("factorizes") is not True:
        return None
    prop, relation, labels = value.get("property"), _RELATIONS.get(str(value.get("relation"))), value.get("labels")
    if not isinstance(prop, str) or not prop.strip() or len(prop) > 80 or relation is None:
        return None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        return None
    distinct = tuple(dict.fromkeys(label.strip() for label in labels if label.strip()))
    ordered = relation in ("<", ">")
    return Factorization(" ".join(prop.split()), relation, () if ordered or len(distinct) < 2 else distinct)  # type: ignore[arg-type]


def _rows(table: pa.Table) -> list[Row]:
    return [{k: v for k, v in row.items() if k != ROW_ID} for row in table.to_pylist()]


def _trial_key(join: SemJoin, choice: FactorizationChoice) -> str:
    digest = hashlib.sha256(json.dumps(asdict(choice), sort_keys=True).encode()).hexdigest()[:8]
    return f"factor_trial:{operator_key(join)}:{digest}"


def _found(key: str, ledger: BatchLedger | None, earlier: Lookup | None) -> FactorTrial | None:
    found = ledger.lookup(key, BATCH) if ledger is not None else None
    if found is None and earlier is not None:
        found = earlier(key, BATCH)
    if found is None:
        return None
    row = found.to_pylist()[0]
    return FactorTrial(**{**row, "labels": tuple(row["labels"])})


def _commit(ledger: BatchLedger, key: str, trial: FactorTrial, paid: LLMUsage) -> None:
    row = {name: getattr(trial, name) for name in _TRIAL_SCHEMA.names}
    row["labels"] = list(trial.labels)
    ledger.commit(key, BATCH, (), pa.Table.from_pylist([row], schema=_TRIAL_SCHEMA), usage=paid)
