"""``Query``: a logical plan with the settings and tiers to run it; chain operators, explain, run.

Built by the readers in ``semray/readers.py`` (``read_csv``, ``sql``, ...); ``semray.api`` re-exports both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from semray.cost_model.cardinality import source_statistics
from semray.errors import PlanError
from semray.explaining import failure_lines, run_actuals, tier_lines
from semray.operators import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    Node,
    Project,
    Schema,
    SemAgg,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemSearch,
    SemTopK,
    Sort,
    SortKey,
    Union,
    parse_fields,
    plan_to_json,
    render_tree,
)
from semray.operators.base import quality_warnings
from semray.operators.catalogued import SegmentLevel
from semray.operators.code import CodeExample, SandboxLimits, SemCode, code_listing
from semray.operators.semantic import (
    ExtractField,
    QualityTarget,
    Tier,
    ValueType,
    as_quality,
    with_quality,
)
from semray.operators.serialize import MAX_PLAN_DEPTH
from semray.operators.templates import template_columns
from semray.output import without_row_ids
from semray.settings import Settings
from semray.sql.semantic_calls import split_labels
from semray.sql_quoting import quote_identifier

OptionValue = str | int | float | bool | None
OnError = Literal["fail", "skip", "default"]

if TYPE_CHECKING:
    from semray.pipeline.runs.outcomes import ResultBatches


class Query:
    """An immutable logical plan plus the settings to run it with."""

    def __init__(self, plan: Node, settings: Settings | None = None, serving: Any = None) -> None:
        self._plan = plan
        self._settings = settings
        self._serving = serving

    @property
    def plan(self) -> Node:
        return self._plan

    @property
    def settings(self) -> Settings:
        return self._settings or Settings()

    @property
    def schema(self) -> Schema:
        return self._plan.output_schema

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.schema.user_columns())

    def _then(self, plan: Node) -> Query:
        if plan.depth > MAX_PLAN_DEPTH:
            raise PlanError(
                f"{plan.label()}: the plan would nest {plan.depth} operators deep, more than the {MAX_PLAN_DEPTH} "
                "semray runs (a run journals its plan as JSON, which nests at most that many); merge consecutive "
                "filters or selects, or run the query in steps, each written to a file that the next one reads"
            )
        return Query(plan, self._settings, self._serving)

    def with_settings(self, settings: Settings) -> Query:
        return Query(self._plan, settings, self._serving)

    def with_quality(
        self,
        quality: QualityTarget | float = 0.9,
        *,
        metric: Literal["accuracy", "precision", "recall"] | None = None,
        delta: float | None = None,
        strict: bool | None = None,
    ) -> Query:
        """Run every ``tier="auto"`` filter, classification and score without a target of its own as a
        cascade meeting this one: ``q.with_quality(0.95)`` or ``q.with_quality(0.9, metric="recall")``.

        Precision and recall apply to filters; classifications and scores take accuracy at that level.
        A target its calibration labels cannot certify runs on the large tier with a warning
        (EXPLAIN, the log, the CLI); ``strict=True`` refuses such a plan instead.
        """
        target = as_quality(quality)
        assert target is not None
        given = (("metric", metric), ("delta", delta), ("strict", strict))
        update = {key: value for key, value in given if value is not None}
        if update:
            target = QualityTarget.model_validate({**target.model_dump(), **update})
        return self._then(with_quality(self._plan, target))

    def with_code_choice(
        self, target: float | None = 0.9, *, sample_rows: int = 20, max_rows: int = 200, confidence: float = 0.95
    ) -> Query:
        """Let the large tier write code for each ``tier="auto"`` map or extraction where that is cheaper.

        Each candidate's function is checked against the model's own answers, in rounds of
        ``sample_rows`` rows up to ``max_rows``, and replaces the per-row operator only when the
        one-sided lower bound (at ``confidence``) on their agreement reaches ``target``, or the
        operator's own quality target (its level at ``1 - delta``) where it has one; the trials
        run now, journaled as one run (``semray/pipeline/runs/plan_time/code_choice.py``). On a simulated large
        tier, which cannot write code, the plan is returned unchanged. The query returned carries
        the choice in its plan, so it does not make the choice ``Settings.code_choice`` asks for
        again; ``target=None`` runs this query without that choice.
        """
        unset = self.settings.model_copy(update={"code_choice": None})
        if target is None:
            return Query(self._plan, unset, self._serving)
        from semray.pipeline.runs.plan_time.code_choice import CodeChoice, choose_code_for_run

        choice = CodeChoice(target, sample_rows, max_rows, confidence)
        decision = choose_code_for_run(self._plan, self.settings, self._tiers(), choice)
        return Query(decision.plan, unset, self._serving)

    def with_join_factorization(
        self,
        target: float | None = 0.9,
        *,
        confidence: float = 0.95,
        sample_rows: int = 64,
        sample_pairs: int = 100,
        max_pairs: int = 800,
        right_labels_max: int = 16,
    ) -> Query:
        """Factorize each semantic join whose pair predicate compares one per-row property of each side
        (the same, a different or an ordered value; or a right side of at most ``right_labels_max``
        categories) once a check shows it answers as the pairs would: ``q.with_join_factorization(0.95)``.

        The check runs now, as one journaled run (``pipeline/runs/plan_time/join_factorization_run.py``): pairs drawn
        from the first ``sample_rows`` rows of each side, ``sample_pairs`` per look up to ``max_pairs``,
        are asked pairwise and factorized on the join's tier; the rewrite is kept only when the lower
        bound of their agreement at ``confidence`` reaches ``target``, else the join stays pairwise.
        The exact "same X" / "different X" forms are factorized without a check (optimizer rule 7).
        A join too small to gain, or with ``implementation`` set, is left alone. ``target=None`` runs
        this query without the check that ``Settings.join_factorization`` would apply.
        """
        if target is None:
            return Query(self._plan, self.settings.model_copy(update={"join_factorization": None}), self._serving)
        from semray.pipeline.runs.plan_time.before_run import factorize_joins
        from semray.pipeline.runs.plan_time.join_factorization import FactorizationChoice

        choice = FactorizationChoice(target, confidence, sample_rows, sample_pairs, max_pairs, right_labels_max)
        return self._then(factorize_joins(self._plan, self.settings, self._tiers(), choice).plan)

    def with_topic_pruning(self, on: bool = True) -> Query:
        """Let the optimizer prune each semantic filter that names one topic of an organised, catalogued
        documents dataset to the documents the catalog labelled with it: ``q.with_topic_pruning()``.

        Fewer model calls, but a relevant document the catalog's classifier labelled with another
        topic is dropped without being asked about, so recall is bounded by the classifier's agreement
        with the model (``semray catalog show``). ``Settings.topic_pruning`` (SEMRAY_TOPIC_PRUNING) turns
        it on for every query; ``on=False`` turns it off for this one (docs/catalog.md, "Pruning a
        semantic filter by topic labels").
        """
        return Query(self._plan, self.settings.model_copy(update={"topic_pruning": on}), self._serving)

    def with_serving(self, serving: Any) -> Query:
        """Run semantic operators on these tiers (a ``semray.serving.config.ServingConfig``)."""
        return Query(self._plan, self._settings, serving)

    # relational ---------------------------------------------------------------------
    def filter(self, predicate: str) -> Query:
        """Keep rows where a SQL predicate holds: ``q.filter("rating >= 4")``."""
        return self._then(Filter(input=self._plan, predicate=predicate))

    def select(self, *columns: str, **exprs: str) -> Query:
        """Keep columns and compute new ones: ``q.select("product", stars="rating * 1.0")``."""
        # Plain dicts, validated by the node: a bad item is a NodeArgumentError naming exprs.N.name.
        items = [{"name": name, "expr": _quote_if_needed(name)} for name in columns]
        items += [{"name": name, "expr": expr} for name, expr in exprs.items()]
        return self._then(Project(input=self._plan, exprs=tuple(items)))

    def join(self, other: Query, on: str, how: Literal["inner", "left", "semi", "anti"] = "inner") -> Query:
        """Join on a condition over ``l.`` and ``r.`` columns: ``a.join(b, "l.id = r.product_id")``."""
        return self._then(Join(left=self._plan, right=other.plan, kind=how, on=on))

    def aggregate(self, by: Sequence[str] | str = (), **aggs: str) -> Query:
        """Group and aggregate: ``q.aggregate(by="product", n="count(*)", avg="avg(rating)")``."""
        keys = (by,) if isinstance(by, str) else tuple(by)
        items = tuple({"name": name, "expr": expr} for name, expr in aggs.items())  # validated as in select
        return self._then(Aggregate(input=self._plan, keys=keys, aggs=items))

    def sort(self, *columns: str, descending: bool | Sequence[bool] = False, nulls_first: bool | None = None) -> Query:
        """Order rows: ``q.sort("rating", "product", descending=[True, False])``."""
        flags = [descending] * len(columns) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(columns):
            raise PlanError(f"sort: {len(columns)} columns but {len(flags)} descending flags")
        keys = tuple(
            SortKey(column=c, descending=d, nulls_first=nulls_first) for c, d in zip(columns, flags, strict=True)
        )
        return self._then(Sort(input=self._plan, keys=keys))

    def limit(self, count: int, offset: int = 0) -> Query:
        return self._then(Limit(input=self._plan, count=count, offset=offset))

    def distinct(self) -> Query:
        return self._then(Distinct(input=self._plan))

    def union(self, *others: Query, distinct: bool = False) -> Query:
        plan: Node = Union(inputs=(self._plan, *(other.plan for other in others)))
        return self._then(Distinct(input=plan) if distinct else plan)

    # semantic -----------------------------------------------------------------------
    def sem_filter(
        self,
        instruction: str,
        tier: Tier = "auto",
        on_error: OnError = "default",
        diagnostics: bool = False,
        quality: QualityTarget | float | None = None,
    ) -> Query:
        """Keep rows for which an instruction holds: ``q.sem_filter("{review} complains about delivery")``.

        ``on_error``: a row the model cannot answer fails the run, is skipped, or (default) is
        dropped by a filter / gets null elsewhere. ``diagnostics`` adds ``_tier``, ``_confidence``
        and ``_error`` columns. ``quality`` (a ``QualityTarget`` or an accuracy such as 0.95) runs
        the filter as a cascade, embedding -> small -> large, that meets it against the large tier.
        """
        return self._row_wise(SemFilter, instruction, tier, on_error, diagnostics, quality=as_quality(quality))

    def sem_map(
        self,
        instruction: str,
        output: str,
        output_type: ValueType = "text",
        lo: float | None = None,
        hi: float | None = None,
        tier: Tier = "auto",
        on_error: OnError = "default",
        diagnostics: bool = False,
        quality: QualityTarget | float | None = None,
    ) -> Query:
        return self._row_wise(
            SemMap,
            instruction,
            tier,
            on_error,
            diagnostics,
            output=output,
            output_type=output_type,
            lo=lo,
            hi=hi,
            quality=as_quality(quality),
        )

    def sem_score(
        self,
        instruction: str,
        output: str,
        lo: int = 1,
        hi: int = 5,
        tier: Tier = "auto",
        on_error: OnError = "default",
        quality: QualityTarget | float | None = None,
    ) -> Query:
        return self.sem_map(
            instruction, output, output_type="int", lo=lo, hi=hi, tier=tier, on_error=on_error, quality=quality
        )

    def sem_extract(
        self,
        instruction: str,
        fields: str | Sequence[ExtractField],
        tier: Tier = "auto",
        on_error: OnError = "default",
        diagnostics: bool = False,
        quality: QualityTarget | float | None = None,
    ) -> Query:
        """Extract typed fields: ``q.sem_extract("{email}", "sender: text, subject: text")``.

        ``quality`` (an accuracy such as 0.97, or a ``QualityTarget``) does not cascade an
        extraction: it is the agreement with its per-row answers a function the code choice writes
        must show to replace them (`with_code_choice`), instead of the query's target.
        """
        parsed = parse_fields(fields) if isinstance(fields, str) else tuple(fields)
        own = as_quality(quality)
        return self._row_wise(SemExtract, instruction, tier, on_error, diagnostics, fields=parsed, quality=own)

    def sem_classify(
        self,
        instruction: str,
        labels: Sequence[str] | str,
        output: str = "label",
        tier: Tier = "auto",
        on_error: OnError = "default",
        diagnostics: bool = False,
        quality: QualityTarget | float | None = None,
    ) -> Query:
        choices = split_labels(labels) if isinstance(labels, str) else tuple(labels)
        return self._row_wise(
            SemClassify,
            instruction,
            tier,
            on_error,
            diagnostics,
            labels=choices,
            output=output,
            quality=as_quality(quality),
        )

    def _row_wise(
        self,
        node_type: type[SemFilter | SemMap | SemExtract | SemClassify],
        instruction: str,
        tier: Tier,
        on_error: OnError,
        diagnostics: bool,
        **fields: Any,
    ) -> Query:
        """Chain a row-wise semantic operator: the options all of them take, and its own ``fields``."""
        node = node_type(
            input=self._plan, instruction=instruction, tier=tier, on_error=on_error, diagnostics=diagnostics, **fields
        )
        return self._then(node)

    def sem_join(
        self,
        other: Query,
        instruction: str,
        implementation: Literal["auto", "nested", "blocked", "factorized"] = "auto",
        tier: Tier = "auto",
    ) -> Query:
        node = SemJoin(
            left=self._plan, right=other.plan, instruction=instruction, implementation=implementation, tier=tier
        )
        return self._then(node)

    def sem_topk(self, instruction: str, k: int, output: str = "rank", tier: Tier = "auto") -> Query:
        return self._then(SemTopK(input=self._plan, instruction=instruction, k=k, output=output, tier=tier))

    def sem_agg(
        self, instruction: str, by: Sequence[str] | str = (), output: str = "answer", tier: Tier = "auto"
    ) -> Query:
        keys = (by,) if isinstance(by, str) else tuple(by)
        return self._then(SemAgg(input=self._plan, instruction=instruction, keys=keys, output=output, tier=tier))

    def sem_search(
        self,
        column: str,
        query: str,
        k: int,
        mode: Literal["vector", "fts", "hybrid"] = "vector",
        level: SegmentLevel | None = None,
    ) -> Query:
        """The ``k`` rows whose ``column`` best matches ``query``, with their ``score``.

        ``level`` (over ``read_catalog`` documents only): the ``k`` best catalog segments of that level
        (``"section"``, ``"paragraph"``, ...) instead, one row each with its document's columns and the
        segment's id, path, span and text (``docs/catalog_search.md``).
        """
        return self._then(SemSearch(input=self._plan, column=column, query=query, k=k, mode=mode, level=level))

    def sem_code(
        self,
        instruction: str,
        outputs: str | Sequence[ExtractField],
        inputs: Sequence[str] | None = None,
        *,
        code: str | None = None,
        examples: Sequence[CodeExample | tuple[Mapping[str, Any], Mapping[str, Any]]] = (),
        min_agreement: float | None = 0.9,
        sample_rows: int = 20,
        limits: SandboxLimits | None = None,
    ) -> Query:
        """Add typed columns computed by one Python function, run sandboxed: the large tier writes and
        validates it at plan time, or give it as ``code``:
        ``q.sem_code("Parse {raw} as a date", "day: date", examples=[({"raw": "3 Jan 2024"}, {"day": "2024-01-03"})])``.

        ``inputs`` defaults to the instruction's ``{column}`` references. The function is
        ``def transform(batch)`` over a pandas DataFrame of the inputs, returning the outputs
        (``docs/sandbox.md``). Execution calls no model.
        """
        fields = parse_fields(outputs) if isinstance(outputs, str) else tuple(outputs)
        columns = tuple(inputs) if inputs is not None else template_columns(instruction, "SemCode")
        shown = tuple(
            example
            if isinstance(example, CodeExample)
            else CodeExample(inputs=dict(example[0]), outputs=dict(example[1]))
            for example in examples
        )
        node = SemCode(
            input=self._plan,
            instruction=instruction,
            inputs=columns,
            outputs=fields,
            examples=shown,
            code=code,
            min_agreement=min_agreement,
            sample_rows=sample_rows,
            limits=limits or SandboxLimits(),
        )
        return self._then(node)

    def with_code(self) -> Query:
        """This query with a validated function in every SemCode that has none: the large tier writes
        each one now (one journaled run), so ``to_json()`` saves the plan with its code."""
        from semray.pipeline.runs.plan_time.code_commit import commit_code, pending_code

        if not pending_code(self._plan):
            return self
        return self._then(commit_code(self._plan, self.settings, self._tiers()))

    # inspection and output ----------------------------------------------------------
    def optimized(self, policy: Any = None, statistics: Any = None) -> Query:
        """This query after the optimizer: rewrite rules and join ordering, which keep its results,
        and, given a ``policy`` (``semray.cost_model.policies.MinCost(quality=0.9)``, ...), tiers
        chosen for its ``tier="auto"`` operators by the cost model (``docs/optimizer.md``)."""
        from semray.pipeline.runs.plan_time.before_run import optimized

        return self._then(optimized(self._plan, self.settings, self._tiers(), policy, statistics))

    def _tiers(self) -> Any:
        """The tiers this query runs on: those of ``with_serving``, else the settings' model
        profile (``Settings.models``, ``./semray.toml``), else the defaults."""
        if self._serving is not None:
            return self._serving
        from semray.serving.profiles import resolve_serving

        return resolve_serving(self.settings.models)

    def _profiles(self) -> dict[str, Any]:
        from semray.cost_model.prices import profiles_from_serving

        return profiles_from_serving(self._tiers())

    def explain(self, result: Any = None, optimize: bool = True) -> str:
        """The logical plan, the plan that runs with the cost model's estimates per operator, the
        physical pipeline and the model tiers; given a finished run's ``Result``, the rows each
        operator passed on and the calls, tokens and dollars of each semantic operator beside the
        estimates. A join the factorization check would verify shows its journaled verdict, or that
        the run checks it first (``Settings.join_factorization``)."""
        from semray.cost_model.plan_cost import estimate_plan
        from semray.pipeline.runs.execute import explain_physical
        from semray.pipeline.runs.plan_time.before_run import explained_plan
        from semray.planner.explain_estimates import render_estimates

        ran = getattr(result, "plan", None)  # a measured run chose its plan itself
        runs, checked = (
            (ran, "") if ran is not None else explained_plan(self._plan, self.settings, self._tiers(), optimize)
        )
        statistics = source_statistics(runs)
        if getattr(result, "statistics", None) is not None:
            statistics = statistics.merged(result.statistics)
        estimate = estimate_plan(runs, statistics, self._profiles())
        actuals = run_actuals(runs, self.settings, result) if result is not None else None
        heading = "Optimized plan" if optimize else "Plan"
        text = "Logical plan\n" + render_tree(self._plan)
        text += f"\n\n{heading} with estimates (defaults where nothing was measured)\n"
        text += render_estimates(runs, estimate, actuals) + failure_lines(result) + _warning_lines(self._plan)
        text += checked
        if result is not None and not getattr(result, "operator_rows", None):
            text += (
                "\nOperators' rows were not counted in this run (count_rows is auto and the plan calls no model, "
                "or off): Settings(count_rows='on') or `semray explain --analyze` counts them."
            )
        listing = code_listing(runs)
        code = f"\n\nCode (sandboxed; execution costs CPU only)\n{listing}" if listing else ""
        return text + "\n\n" + explain_physical(runs, self.settings) + code + tier_lines(self._plan, self._tiers())

    def to_json(self) -> str:
        return plan_to_json(self._plan)

    def collect(
        self, optimize: bool = True, *, policy: Any = None, measure: Any = False, row_ids: bool = False
    ) -> pa.Table:
        """Run the plan and return the query's columns as an Arrow table (see `execute`).

        ``row_ids=True`` keeps the engine's stable row id, ``_rowid``, as the first column (as the
        CLI's ``--row-ids`` does); `execute` always returns it in ``Result.table``.
        """
        table = self.execute(optimize, policy=policy, measure=measure).table
        return table if row_ids else without_row_ids(table)

    def execute(self, optimize: bool = True, *, policy: Any = None, measure: Any = False, progress: Any = None) -> Any:
        """Run the plan; a ``Result`` with the rows, the run id and its model usage.

        ``optimize`` applies the optimizer's rewrite rules and join ordering first (they keep the
        results; see `optimized`); tiers stay as written unless a ``policy`` is given
        (``semray.cost_model.policies.MinCost(quality=0.9)``, ...), which chooses the tiers of
        ``tier="auto"`` operators. ``measure=True`` (or a
        ``semray.pipeline.runs.measure_in_run.MeasureOptions``, e.g. ``MeasureOptions(budget=50)``) has
        the run measure its statistics first, on a pre-sample of each semantic operator's input,
        and choose the tiers with them (policy ``MinCost()`` unless given); the labels bought are
        journaled and reused by execution, and ``Result.measured`` says what was measured and
        what it cost: ``q.execute(policy=MinCost(quality=0.9), measure=True)``.

        While a run with model calls runs, ``progress`` (a ``semray.pipeline.runs.progress.ProgressReporter``)
        gets its progress and cost at every poll of its journal; by default it logs a ``run_progress``
        line every ``Settings.progress_interval_s``. ``Settings.max_cost`` is the run's budget in
        dollars: ``q.with_settings(q.settings.model_copy(update={"max_cost": 2.0})).execute()``
        (``semray.pipeline.runs.budget``).
        """
        from semray.pipeline.runs.execute import execute

        run = self._prepared(optimize, policy, measure)
        return run.settle(execute(run.plan, run.settings, self._tiers(), run.planning, progress))

    def to_pandas(self, *, row_ids: bool = False) -> Any:
        """`collect` as a pandas DataFrame."""
        return self.collect(row_ids=row_ids).to_pandas()

    def iter_batches(
        self,
        batch_rows: int | None = None,
        optimize: bool = True,
        *,
        policy: Any = None,
        measure: Any = False,
        row_ids: bool = False,
    ) -> ResultBatches:
        """Stream results as Arrow tables without holding them all in memory (options as `collect`).

        The stream (``semray.pipeline.runs.outcomes.ResultBatches``) says what it cost once read to
        the end: ``usage`` (the join factorization check included), ``factorization_check`` and
        ``run_id``, as ``execute``'s ``Result`` does."""
        from semray.pipeline.runs.execute import iter_batches
        from semray.pipeline.runs.outcomes import ResultBatches

        run = self._prepared(optimize, policy, measure)
        batches = iter_batches(run.plan, run.settings, batch_rows, self._tiers(), run.planning)
        return ResultBatches(batches, run.factorization_check, (lambda batch: batch) if row_ids else without_row_ids)

    def write_parquet(
        self, path: str | Path, optimize: bool = True, *, policy: Any = None, measure: Any = False
    ) -> int:
        """Write results to one Parquet file, published atomically; returns the row count (options as `execute`)."""
        return int(self.publish_parquet(path, optimize, policy=policy, measure=measure).rows)

    def publish_parquet(
        self, path: str | Path, optimize: bool = True, *, policy: Any = None, measure: Any = False, progress: Any = None
    ) -> Any:
        """`write_parquet`, returning the ``Written`` (rows, run id, version, usage, failed rows);
        ``progress`` as in `execute`."""
        from semray.pipeline.runs.execute import publish_parquet

        run = self._prepared(optimize, policy, measure)
        return run.settle(publish_parquet(run.plan, run.settings, Path(path), self._tiers(), run.planning, progress))

    def _prepared(self, optimize: bool, policy: Any, measure: Any) -> Any:
        """The plan-time choices, made once before the run (``pipeline/runs/plan_time/before_run.py``):
        code, the code choice, the join factorization check, the optimizer or a measuring ``Planning``."""
        from semray.pipeline.runs.plan_time.before_run import prepare_run

        return prepare_run(self._plan, self.settings, self._tiers(), optimize=optimize, policy=policy, measure=measure)

    def __repr__(self) -> str:
        return f"Query(\n{render_tree(self._plan)}\n)"


def _warning_lines(plan: Node) -> str:
    """EXPLAIN's warnings: quality targets the plan asks for but cannot meet as asked."""
    warnings = quality_warnings(plan)
    return "".join(f"\n\nWARNING: {warning}" for warning in warnings)


def _quote_if_needed(name: str) -> str:
    return name if name.isidentifier() and name.islower() else quote_identifier(name)
