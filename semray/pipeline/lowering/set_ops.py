"""Lowering of the set-level semantic operators (SemJoin, SemTopK, SemAgg, SemSearch).

A SemJoin lowers by its ``implementation``:

* ``nested``: every pair (a broadcast cross join) judged by the row-wise filter stage;
* ``blocked``: both sides embedded, the ``per_row`` most similar right rows of each left row
  kept as candidates, then judged like nested pairs; one relation on both sides
  (``reads_one_relation``: the same rows, the same cells) is embedded once;
* ``factorized``: each side asked once for the property the condition compares (n + m calls),
  then an exact relational join of the answers by the node's ``relation`` (equal, different, or
  ordered scores); with ``right_labels`` only the left rows are classified into the right side's
  values (n calls). Under a LIMIT the left rows are asked in the LIMIT's round trips
  (``BroadcastJoinStage.left_rounds``): m calls and about what the LIMIT needs of the n.
  A self-join (``is_self_join``: one input plan, one question) asks each row once and joins
  the answers with themselves (``SelfJoinStage``): n calls, not 2n, fewer under a LIMIT;
* ``auto``: nested up to ``NESTED_MAX_PAIRS`` estimated pairs, blocked above
  (``operators/join_sides.join_implementation``, which the cost model asks too).
"""

from __future__ import annotations

import hashlib
import string

from semray.catalog.catalogued_rows import CatalogRoute, catalog_route
from semray.cost_model.cardinality import row_bound
from semray.cost_model.topk_rule import prefilter_rows
from semray.log import get_logger
from semray.operators.base import Node
from semray.operators.join_sides import block_size, is_self_join, join_implementation, reads_one_relation, side_cells
from semray.operators.keys import operator_key
from semray.operators.relational import CatalogPin
from semray.operators.schema import ROW_ID, quote, right_names
from semray.operators.semantic import SemAgg, SemJoin, SemSearch, SemTopK
from semray.pipeline.lowering.registry import Inputs, Lowering
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.relational import BroadcastJoinStage, SelfJoinStage
from semray.pipeline.stages.semantic import SemanticStage, SemanticTask
from semray.pipeline.stages.set_ops import (
    VECTOR,
    AggStage,
    BlockStage,
    CatalogSearchStage,
    EmbedStage,
    SearchStage,
    TopKStage,
)
from semray.serving.prompts.set_ops import (
    FACTOR_SCALE,
    pair_template,
    plain_question,
    right_labels_template,
    side_template,
)
from semray.settings import Settings
from semray.tasks import TaskKind

log = get_logger(__name__)

FACTOR_KEY = "_fk"
AGG_CONTEXT_TOKENS = 4096
"""Prompt budget of one aggregation call; the simulator's and small open models' context.
TODO: take the tier's context length (TierConfig.context_length) once lowering can see it."""
EMBED_BATCH_ROWS = 256
EMBED_ACTORS = 1


def _key(node: Node, role: str) -> str:
    return hashlib.sha256(f"{operator_key(node)}:{role}".encode()).hexdigest()[:24]


side_columns = side_cells
"""The columns the instruction reads of one side (the name plan-time code imports)."""


def _record_template(columns: list[str]) -> str:
    """``{a}`` for one column, ``a: {a}\\nb: {b}`` for several."""
    if len(columns) == 1:
        return "{" + columns[0] + "}"
    return "\n".join(f"{column}: {{{column}}}" for column in columns)


def _renames(node: SemJoin) -> dict[str, str]:
    """Right input column -> its name in the join output (``_right`` added on clashes)."""
    return right_names(node.left.output_schema, node.right.output_schema)


def _pair_sql(node: SemJoin, on: str) -> str:
    left = [f"l.{quote(name)}" for name in node.left.output_schema.names if name != ROW_ID]
    right = [f"r.{quote(old)} AS {quote(new)}" for old, new in _renames(node).items()]
    row_id = f"l.{ROW_ID} || '*' || r.{ROW_ID} AS {ROW_ID}"
    return f"SELECT {', '.join([row_id, *left, *right])} FROM batch AS l JOIN right_side AS r ON ({on})"


def _typed(node: Node, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((column.name, column.type) for column in node.output_schema.columns) + extra


def _verify(node: SemJoin, pairs: Stage, settings: Settings) -> Stage:
    task = SemanticTask(
        kind=TaskKind.FILTER, instruction=pair_template(node.instruction, _renames(node)), tier=node.resolved_tier()
    )
    return SemanticStage(
        task=task,
        operator_key=_key(node, "pairs"),
        batch_rows=settings.semantic_batch_size,
        actors=settings.semantic_actors,
        inputs=(pairs,),
    )


def _embed(side: Node, upstream: Stage, template: str, role: str, journaled: bool = False) -> EmbedStage:
    """``upstream`` (``side`` lowered) with each row's embedding of ``template`` added (``journaled``:
    counted in ``Result.usage`` and reused on resume; every embedding a run pays is)."""
    return EmbedStage(
        task=SemanticTask(kind=TaskKind.MAP, instruction=template, tier="embedding"),
        operator_key=_key(side, role),
        batch_rows=EMBED_BATCH_ROWS,
        actors=EMBED_ACTORS,
        journaled=journaled,
        inputs=(upstream,),
    )


def lower_nested_join(node: SemJoin, left: Stage, right: Stage, settings: Settings) -> Stage:
    pairs = BroadcastJoinStage(sql=_pair_sql(node, "TRUE"), right_columns=_typed(node.right), inputs=(left, right))
    return _verify(node, pairs, settings)


def lower_blocked_join(node: SemJoin, left: Stage, right: Stage, settings: Settings) -> Stage:
    left_embedded = _embed(node.left, left, _record_template(side_cells(node, "l")), "embed-left", journaled=True)
    if reads_one_relation(node):  # the right side's texts are the left's: embedded once, both sides read it
        sides: tuple[Stage, ...] = (left_embedded,)
    else:
        right_template = _record_template(side_cells(node, "r"))
        sides = (left_embedded, _embed(node.right, right, right_template, "embed-right", journaled=True))
    blocked = BlockStage(
        per_row=block_size(row_bound(node.right)),
        left_names=node.left.output_schema.names,
        right_names=tuple(_renames(node).items()),
        right_columns=_typed(node.right, (VECTOR, "FLOAT[]")),
        inputs=sides,
    )
    return _verify(node, blocked, settings)


def factor_task(node: SemJoin, side: str) -> SemanticTask:
    """What a factorized join asks each row of one side: its property as free text, as one of the
    labels (``labels``, or the right side's values with ``right_labels``) or as a score (ordered)."""
    tier = node.resolved_tier()
    if node.right_labels:
        instruction = right_labels_template(node.instruction)
        return SemanticTask(TaskKind.CLASSIFY, instruction, tier, outputs=((FACTOR_KEY, "text"),), choices=node.labels)
    ordered = node.relation in ("<", ">")
    instruction = side_template(node.instruction, side, node.factor, labels=bool(node.labels), ordered=ordered)
    if ordered:
        lo, hi = FACTOR_SCALE
        return SemanticTask(TaskKind.SCORE, instruction, tier, outputs=((FACTOR_KEY, "float"),), lo=lo, hi=hi)
    if node.labels:
        return SemanticTask(TaskKind.CLASSIFY, instruction, tier, outputs=((FACTOR_KEY, "text"),), choices=node.labels)
    return SemanticTask(TaskKind.MAP, instruction, tier, outputs=((FACTOR_KEY, "text"),))


def factor_condition(relation: str, left: str = f"l.{FACTOR_KEY}", right: str = f"r.{FACTOR_KEY}") -> str:
    """The relational join condition on the two sides' answers.

    >>> factor_condition("<>")
    'lower(trim(l._fk)) <> lower(trim(r._fk))'
    >>> factor_condition(">")
    'l._fk > r._fk'
    """
    if relation in ("<", ">"):
        return f"{left} {relation} {right}"
    return f"lower(trim({left})) {relation} lower(trim({right}))"


def lower_factorized_join(node: SemJoin, left: Stage, right: Stage, settings: Settings) -> Stage:
    def keyed(side: str, upstream: Stage) -> Stage:
        return SemanticStage(
            task=factor_task(node, side),
            operator_key=_key(node, f"factor-{side}"),
            batch_rows=settings.semantic_batch_size,
            actors=1,
            inputs=(upstream,),
        )

    if node.right_labels:  # the right rows are the labels: only the left side is asked (n calls)
        (column,) = side_cells(node, "r")
        return BroadcastJoinStage(
            sql=_pair_sql(node, factor_condition("=", right=f"r.{quote(column)}")),
            right_columns=_typed(node.right),
            left_rounds=True,
            inputs=(keyed("l", left), right),
        )
    key_type = "DOUBLE" if node.relation in ("<", ">") else "VARCHAR"
    if is_self_join(node):  # one relation, one question: each row asked once, joined with itself
        return SelfJoinStage(
            sql=_pair_sql(node, factor_condition(node.relation)),
            right_columns=_typed(node.right, (FACTOR_KEY, key_type)),
            inputs=(keyed("l", left),),
        )
    return BroadcastJoinStage(
        sql=_pair_sql(node, factor_condition(node.relation)),
        right_columns=_typed(node.right, (FACTOR_KEY, key_type)),
        left_rounds=True,  # under a LIMIT: rounds of left rows against the right side asked once
        inputs=(keyed("l", left), keyed("r", right)),
    )


def lower_sem_join(node: SemJoin, inputs: Inputs, settings: Settings) -> Stage:
    left, right = inputs
    implementation: str = node.implementation
    if implementation == "auto":  # the sources' counts, as the cost model asks with its estimates
        implementation = join_implementation(node, row_bound(node.left), row_bound(node.right))
    if implementation == "nested":
        return lower_nested_join(node, left, right, settings)
    if implementation == "blocked":
        return lower_blocked_join(node, left, right, settings)
    return lower_factorized_join(node, left, right, settings)


def _template_of(instruction: str) -> str:
    columns = [field for _, field, _, _ in string.Formatter().parse(instruction) if field]
    return _record_template(list(dict.fromkeys(columns)))


def lower_sem_topk(node: SemTopK, inputs: Inputs, settings: Settings) -> Stage:
    (upstream,) = inputs
    template = _template_of(node.instruction)
    return TopKStage(
        task=SemanticTask(kind=TaskKind.FILTER, instruction=node.instruction, tier=node.resolved_tier()),
        operator_key=_key(node, "topk"),
        batch_rows=settings.semantic_batch_size,
        actors=1,
        k=node.k,
        output=node.output,
        criterion=plain_question(node.instruction),
        record_template=template,
        prefilter=prefilter_rows(node.k),
        input_columns=_typed(node.input, (VECTOR, "FLOAT[]")),
        inputs=(_embed(node.input, upstream, template, "embed", journaled=True),),
    )


def lower_sem_agg(node: SemAgg, inputs: Inputs, settings: Settings) -> Stage:
    return AggStage(
        task=SemanticTask(kind=TaskKind.MAP, instruction=node.instruction, tier=node.resolved_tier()),
        operator_key=_key(node, "agg"),
        batch_rows=settings.semantic_batch_size,
        actors=1,
        keys=node.keys,
        output=node.output,
        question=plain_question(node.instruction),
        record_template=_template_of(node.instruction),
        context_tokens=AGG_CONTEXT_TOKENS,
        input_columns=_typed(node.input),
        inputs=inputs,
    )


def lower_sem_search(node: SemSearch, inputs: Inputs, settings: Settings) -> Stage:
    """The k best rows: ranked by the catalog's segments when the input is catalogued documents
    (``catalog_route``), else by a run-scoped index of the rows, embedded unless the search is full text."""
    (upstream,) = inputs
    found = catalog_route(node)
    if found is not None:
        return _catalog_search(node, upstream, settings, *found)
    embedded = node.mode != "fts"
    return SearchStage(
        column=node.column,
        query=node.query,
        k=node.k,
        mode=node.mode,
        output=node.output,
        operator_key=_key(node, "search"),
        index_root=settings.state_path / "indexes",
        input_columns=_typed(node.input, *(((VECTOR, "FLOAT[]"),) if embedded else ())),
        inputs=(
            _embed(node.input, upstream, "{" + node.column + "}", "embed", journaled=True) if embedded else upstream,
        ),
    )


def _catalog_search(
    node: SemSearch, upstream: Stage, settings: Settings, pin: CatalogPin, route: CatalogRoute
) -> CatalogSearchStage:
    """The catalog-ranked stage of a SemSearch over catalogued documents: its input is not embedded."""
    log.debug("sem_search_routed_to_catalog", dataset=pin.dataset, version=pin.version, key=route.key_column)
    return CatalogSearchStage(
        column=node.column,
        query=node.query,
        k=node.k,
        mode=node.mode,
        output=node.output,
        operator_key=hashlib.sha256(f"{operator_key(node)}:catalog-search".encode()).hexdigest()[:24],
        index_root=settings.state_path / "indexes",
        input_columns=tuple((column.name, column.type) for column in node.input.output_schema.columns),
        pin=pin,
        route=route,
        catalog_path=settings.catalog_path,
        inputs=(upstream,),
    )


SET_LOWERINGS = (
    Lowering(SemJoin, lower_sem_join),
    Lowering(SemTopK, lower_sem_topk),
    Lowering(SemAgg, lower_sem_agg),
    Lowering(SemSearch, lower_sem_search),
)
