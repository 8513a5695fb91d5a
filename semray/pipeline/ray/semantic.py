"""Ray Data builders of the stages that run on actor pools: a row-wise semantic operator's
(``SemanticBatchUDF``: one model round trip per batch) and SemCode's (a sandboxed process per actor)."""

from __future__ import annotations

import ray.data as rd

from semray.errors import LoweringError
from semray.pipeline.ray.materialize import Builder, ExecutionContext, materialize
from semray.pipeline.stages.code import CodeStage
from semray.pipeline.stages.semantic import SemanticStage
from semray.pipeline.workers.code_batches import CodeBatchUDF
from semray.pipeline.workers.metering import named_udf, operator_name
from semray.pipeline.workers.semantic_batches import SemanticBatchUDF


def build_semantic(stage: SemanticStage, context: ExecutionContext) -> rd.Dataset:
    if context.tiers is None:
        raise LoweringError("a semantic stage needs model tiers; run it through semray.pipeline.runs.execute")
    # Blocks of one semantic batch each: every actor gets work, and a LIMIT downstream
    # stops the model calls after a few batches instead of after a whole read block.
    upstream = materialize(stage.inputs[0], context).repartition(target_num_rows_per_block=stage.batch_rows)
    return upstream.map_batches(
        named_udf(SemanticBatchUDF, operator_name(stage.task)),
        fn_constructor_args=(stage.task, stage.operator_key, context.tiers, context.ledger),
        fn_constructor_kwargs={"row_counts": context.row_counts, "counted_as": stage.operators},
        # Up to the pool lowering sized (``semantic_pool_size``), starting from one actor: a fixed
        # pool of that size hung a run whose Serve replicas left room for one actor only
        # (tests/pipeline/test_measure_run_ray.py: three tiers deployed on 2 CPUs).
        compute=rd.ActorPoolStrategy(min_size=1, max_size=stage.actors, max_tasks_in_flight_per_actor=2),
        batch_size=stage.batch_rows,
        batch_format="pyarrow",
        # Actors wait on model calls, not on CPU: a small share lets them sit beside the
        # Serve replicas on a 2-CPU machine.
        num_cpus=context.actor_cpus,
    )


def build_code(stage: CodeStage, context: ExecutionContext) -> rd.Dataset:
    """SemCode: an actor pool, each actor feeding batches to its own sandbox process (CPU only)."""
    upstream = materialize(stage.inputs[0], context)
    return upstream.map_batches(
        CodeBatchUDF,
        fn_constructor_args=(stage,),
        compute=rd.ActorPoolStrategy(min_size=1, max_size=stage.actors),
        batch_size=stage.batch_rows,
        batch_format="pyarrow",
        # The sandbox child does the work; the actor only moves batches over a pipe.
        num_cpus=context.actor_cpus,
    )


SEMANTIC_BUILDERS = (Builder(SemanticStage, build_semantic), Builder(CodeStage, build_code))
