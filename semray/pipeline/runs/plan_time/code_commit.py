"""Plan time for SemCode: give every SemCode without code a validated function, journaled.

``commit_code`` runs before a plan is lowered (``pipeline/runs/execute.py``; ``Query.with_code()``
for an explicit step). For each SemCode without code, innermost first, it draws the first
``sample_rows`` rows of the operator's input (running that input as a query), has the large tier
write and validate the function (``code_generation.generate_code``), and returns the plan with
the code, its hash, ``origin="generated"`` and the measured agreement in the node. The
generation is one journaled run (``semray runs ls``): each committed function is a batch of the
run's ledger under ``code:<operator key>`` with what its calls cost, so a resume of an
interrupted generation pays only for the functions not yet committed, and a re-run of the same
query (the newest succeeded generation run with the same fingerprint: plan and model; plans over
in-memory tables excepted, as for resumes) takes the committed functions without a call or a
tier started (``succeeded_lookup``). The executing run then journals the plan *with* the code,
so it and its resume run the same code.

The simulated tier answers from labels and cannot write code: a SemCode without code on a
simulated large tier raises ``CodeGenerationUnavailableError`` before any call.

A user's function is validated too before it is committed (``pending_code`` lists it until
``checked_rows`` is set): ``code_generation.check_user_code`` on the first ``sample_rows`` rows,
with the model's per-row answers where ``min_agreement`` is set and the large tier is a real one
(journaled under ``code_check:<operator key>``); a failure raises and no model rewrites it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.errors import CodeGenerationUnavailableError
from semray.log import get_logger
from semray.operators import Limit, Node, Scan, plan_to_json, transform, walk
from semray.operators.code import SemCode
from semray.operators.keys import operator_key
from semray.pipeline.runs.plan_time.code_generation import Ask, GeneratedCode, generate_code
from semray.pipeline.workers.metering import paid_for
from semray.serving.config import ServingConfig
from semray.settings import Settings
from semray.transactions import BatchLedger, committed_table, fingerprint, list_runs, open_run
from semray.transactions.registry import load_state, runs_dir

log = get_logger(__name__)

CODE_TIER = "large"
CODE_BATCH = "function"
"""The ledger's batch key of a committed function (one per SemCode)."""


def pending_code(plan: Node) -> list[SemCode]:
    """The SemCode operators of ``plan`` that have no code yet, or user code not yet validated."""
    return [
        node for node in walk(plan) if isinstance(node, SemCode) and (node.code is None or unchecked_user_code(node))
    ]


def unchecked_user_code(node: SemCode) -> bool:
    """Whether ``node`` holds the user's function, not yet validated (``checked_rows`` unset)."""
    return node.code is not None and node.origin == "user" and node.checked_rows is None


def _to_write(plan: Node) -> list[SemCode]:
    return [node for node in walk(plan) if isinstance(node, SemCode) and node.code is None]


def commit_code(plan: Node, settings: Settings, serving: ServingConfig | None) -> Node:
    """``plan`` with a validated function in every SemCode (unchanged when none lacks one).

    A user's function is validated too, on the first ``sample_rows`` rows of its input
    (``code_generation.check_user_code``; agreement with the model's per-row answers only where
    the large tier is a real model: the simulated one answers labelled tasks only), and a failure
    raises ``CodeValidationError``: no model rewrites user code.
    """
    if not pending_code(plan):
        return plan
    config = serving or ServingConfig()
    if not _to_write(plan) and (config.tier(CODE_TIER).backend == "simulated" or not _asks(plan)):
        # only user code, checked without a model: no run, no call
        return commit_with(plan, _no_calls, None, lambda node: sample_input(node, settings, serving), agree=False)
    check_can_write_code(plan, config)
    document: dict[str, Any] = json.loads(plan_to_json(plan, indent=None))
    identity = code_run_identity(plan, config)
    earlier = None if reads_memory(document) else succeeded_lookup(settings, identity)
    if earlier is not None and all(earlier(_key(node), CODE_BATCH) is not None for node in pending_code(plan)):
        # A re-run of a query whose functions a finished run committed: the same code, no call.
        return commit_with(plan, _no_calls, None, _no_sample, earlier=earlier)
    with code_run(settings, config, document, identity, "code_generation") as (ask, ledger):
        return commit_with(plan, ask, ledger, lambda node: sample_input(node, settings, serving), earlier=earlier)


def reads_memory(document: dict[str, Any]) -> bool:
    """Whether a plan document reads an in-memory table (such a run can neither resume nor be reused)."""
    return '"kind": "memory"' in json.dumps(document)


def memory_digests(node: Node) -> dict[str, str]:
    """The content digest of each in-memory table ``node`` reads, by ref: a ref names a table of this
    process only, so a journaled choice (a join's verdict, a code trial) is reused for the same
    content, never for another table under that name."""
    from semray.sources.memory_source import registered_table

    digests: dict[str, str] = {}
    for scan in walk(node):
        if isinstance(scan, Scan) and scan.source.kind == "memory":
            ref = str(scan.source.options.get("ref"))
            sink = pa.BufferOutputStream()
            table = registered_table(ref)
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            digests[ref] = hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).hexdigest()
    return digests


@contextmanager
def code_run(
    settings: Settings, config: ServingConfig, document: dict[str, Any], identity: str, purpose: str
) -> Iterator[tuple[Ask, BatchLedger]]:
    """A journaled run that asks the large tier for code: its ``ask`` and the ledger of its batches."""
    from semray.cluster.connect import connect
    from semray.serving.deployments import start_tiers

    run = open_run(
        settings,
        document,
        None,
        config={"purpose": purpose, "tiers": [CODE_TIER]},
        plan_fingerprint=identity,
        resume=not reads_memory(document),
    )
    with run:
        connect(settings)
        tiers = start_tiers(config, settings, tiers=[CODE_TIER])

        def ask(requests: Any) -> Any:
            return tiers.generate(CODE_TIER, list(requests))

        yield ask, run.ledger


Lookup = Callable[[str, str], "pa.Table | None"]
"""A read-only ``BatchLedger.lookup``: the committed output of (operator key, batch key), or None."""


def code_run_identity(plan: Node, serving: ServingConfig) -> str:
    """The fingerprint of the run that writes ``plan``'s functions: the plan and the large tier's model."""
    document: dict[str, Any] = json.loads(plan_to_json(plan, indent=None))
    large = serving.tier(CODE_TIER)
    return fingerprint({"generate_code": document, "model": f"{large.backend}:{large.model}"})


def succeeded_lookup(settings: Settings, identity: str) -> Lookup | None:
    """Read-only lookups in the newest succeeded run with this fingerprint, or None.

    ``open_run`` resumes interrupted and failed runs only; a function committed by a run that
    finished is found here, so re-running the same query runs the same code and pays nothing.
    """
    root = runs_dir(settings)
    for summary in list_runs(settings):
        if summary.plan_fingerprint != identity or summary.status != "succeeded":
            continue
        path = root / summary.run_id
        committed = load_state(path).committed

        def lookup(operator: str, batch: str, path: Path = path, committed: Any = committed) -> pa.Table | None:
            record = committed.get((operator, batch))
            return None if record is None else committed_table(path, record)

        return lookup
    return None


def commit_with(
    plan: Node,
    ask: Ask,
    ledger: BatchLedger | None,
    sample: Any,
    *,
    earlier: Lookup | None = None,
    agree: bool = True,
) -> Node:
    """``commit_code``'s work with the pieces given: ``ask`` answers on the large tier, ``ledger``
    (optional) journals each function, ``sample(node)`` gives rows of a SemCode's input,
    ``earlier`` (optional) finds functions a finished run committed; ``agree``: compare user code
    with the model's per-row answers (where ``min_agreement`` is set)."""

    def commit(node: Node) -> Node:
        if isinstance(node, SemCode) and unchecked_user_code(node):
            return _check_user(node, ask if agree else None, ledger, sample, earlier)
        if not isinstance(node, SemCode) or node.code is not None:
            return node
        key = _key(node)
        found = _journaled(key, ledger, earlier)
        if found is not None:
            row = found.to_pylist()[0]
            log.info("code_reused", instruction=node.instruction, sha256=row["sha256"])
            return with_code(node, str(row["code"]), row["agreement"])
        generated = generate_code(node, sample(node), ask)
        if ledger is not None:
            ledger.commit(key, CODE_BATCH, (), _record(generated), usage=paid_for(generated.usage, generated.calls))
        committed = with_code(node, generated.code, generated.agreement)
        log.info(
            "code_committed",
            instruction=node.instruction,
            sha256=committed.code_sha256,
            attempts=len(generated.attempts),
            agreement=generated.agreement,
            calls=generated.calls,
            dollars=generated.usage.dollars,
        )
        return committed

    return transform(plan, commit)


def _journaled(key: str, ledger: BatchLedger | None, earlier: Lookup | None) -> pa.Table | None:
    """The committed record under ``key`` in this run's ledger, else in an earlier run's."""
    found = ledger.lookup(key, CODE_BATCH) if ledger is not None else None
    return earlier(key, CODE_BATCH) if found is None and earlier is not None else found


def _key(node: SemCode) -> str:
    return f"{'code_check' if unchecked_user_code(node) else 'code'}:{operator_key(node)}"


def _asks(plan: Node) -> bool:
    """Whether validating ``plan``'s user code asks the model (some has ``min_agreement``)."""
    return any(node.min_agreement is not None for node in pending_code(plan) if unchecked_user_code(node))


def _check_user(
    node: SemCode, ask: Ask | None, ledger: BatchLedger | None, sample: Any, earlier: Lookup | None
) -> SemCode:
    """``node`` with its user function validated (``checked_rows`` and ``agreement`` set), journaled
    under ``code_check:<operator key>`` when there is a ledger; raises ``CodeValidationError``."""
    from semray.pipeline.runs.plan_time.code_generation import check_user_code, model_answers

    key = _key(node)
    found = _journaled(key, ledger, earlier)
    if found is not None:
        row = found.to_pylist()[0]
        return _checked(node, row["agreement"], row["checked_rows"])
    rows = sample(node)
    answers: list[dict[str, object] | None] = [None] * rows.num_rows
    usage, calls = None, 0
    if ask is not None:
        answers, usage, calls = model_answers(node, rows, ask)
    agreement = check_user_code(node, rows, answers)
    if ledger is not None:
        record = pa.table(
            {"agreement": pa.array([agreement], pa.float64()), "checked_rows": pa.array([rows.num_rows], pa.int64())}
        )
        ledger.commit(key, CODE_BATCH, (), record, usage=paid_for(usage, calls))
    log.info("user_code_checked", instruction=node.instruction, rows=rows.num_rows, agreement=agreement, calls=calls)
    return _checked(node, agreement, rows.num_rows)


def _checked(node: SemCode, agreement: float | None, rows: int) -> SemCode:
    fields = {name: getattr(node, name) for name in type(node).model_fields}
    fields.update(agreement=agreement, checked_rows=rows)
    return SemCode.model_validate(fields)


def _no_calls(requests: Any) -> Any:
    raise AssertionError("every function was found committed; no model call is made")


def _no_sample(node: SemCode) -> pa.Table:
    raise AssertionError("every function was found committed; no sample is drawn")


def with_code(node: SemCode, code: str, agreement: float | None) -> SemCode:
    """``node`` with a generated, validated function committed to it."""
    fields = {name: getattr(node, name) for name in type(node).model_fields}
    fields.update(code=code, code_sha256=None, origin="generated", agreement=agreement)
    return SemCode.model_validate(fields)


def check_can_write_code(plan: Node, serving: ServingConfig) -> None:
    """Refuse, before any call, a plan whose SemCode needs code from a tier that cannot write it."""
    large = serving.tier(CODE_TIER)
    if large.backend != "simulated":
        return
    if not _to_write(plan):
        return
    first = _to_write(plan)[0]
    raise CodeGenerationUnavailableError(
        f"SemCode {first.instruction!r} has no code, and the large tier is simulated ({large.model}), which "
        "answers from labels and cannot write code; supply the function yourself "
        "(Query.sem_code(..., code='def transform(batch): ...'), or SEM_CODE('...', 'out: type', 'def transform...') "
        "in SQL), or configure a real large tier (--models FILE / SEMRAY_MODELS with an openai, vllm or hf large tier)"
    )


def sample_input(node: SemCode, settings: Settings, serving: ServingConfig | None) -> pa.Table:
    """The first ``max_sample_rows`` (else ``sample_rows``) rows of the operator's input (a query of its own)."""
    from semray.pipeline.runs.execute import collect

    return collect(Limit(input=node.input, count=node.max_sample_rows or node.sample_rows), settings, serving)


def _record(generated: GeneratedCode) -> pa.Table:
    from semray.operators.code import code_sha256

    return pa.table(
        {
            "code": [generated.code],
            "sha256": [code_sha256(generated.code)],
            "agreement": pa.array([generated.agreement], pa.float64()),
            "attempts": [len(generated.attempts)],
        }
    )
