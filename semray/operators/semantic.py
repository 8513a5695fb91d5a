"""Semantic logical operators: LLM- and embedding-powered steps over templates.

Each validates its template's ``{column}`` references and derives its output schema, and declares
the capabilities rules ask about (``SemanticNode``). What a ``quality`` target means for an
operator (a cascade's target or the code choice's agreement bar) and which targets are refused is
``operators/quality_targets.py``; ``QualityTarget`` and ``as_quality`` are re-exported here.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar, Literal, TypeGuard

from pydantic import Field, StrictFloat

from semray.errors import PlanError
from semray.operators.base import Node, NodeArgumentError
from semray.operators.catalogued import (
    SEGMENT_HIT_COLUMNS,
    SegmentLevel,
    catalogued_documents,
    document_keys,
    documents_below,
)
from semray.operators.field_specs import ExtractField as ExtractField  # re-exported, with the next three
from semray.operators.field_specs import OutputName as OutputName
from semray.operators.field_specs import ValueType as ValueType
from semray.operators.field_specs import parse_fields as parse_fields
from semray.operators.quality_targets import QualityTarget as QualityTarget  # re-exported, with as_quality
from semray.operators.quality_targets import agreement_target, cascade_target, check_quality
from semray.operators.quality_targets import as_quality as as_quality
from semray.operators.relational import DOCUMENT_KEY, DOCUMENT_TEXT, ROW_ID_COLUMN, Unary
from semray.operators.schema import Column, Schema, right_names
from semray.operators.templates import check_template, split_side, template_columns
from semray.tasks import Question, TaskKind

if TYPE_CHECKING:
    from semray.operators.plan import PlanNode

Tier = Literal["auto", "cascade", "embedding", "small", "large"]
"""``auto`` runs on the large tier unless a quality target asks for a cascade; ``cascade`` routes
each row to the cheapest tier that can decide it (embedding, then small, then large)."""
AUTO_TIER = "large"
"""What ``tier="auto"`` runs on when no quality target asks for a cascade."""
DIAGNOSTIC_COLUMNS = (
    Column(name="_tier", type="VARCHAR"),
    Column(name="_confidence", type="DOUBLE"),
    Column(name="_error", type="VARCHAR"),
)
SQL_TYPES: dict[str, str] = {"text": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE"}
MAX_SCORE_CHOICES = 1000
"""The most whole numbers a score scale may offer: a whole-number range ``lo..hi`` is asked
as a choice of every integer in it, so ``SEM_SCORE(..., 1, 10000000)`` is refused."""


class SemanticNode(Node):
    """The base of every semantic operator, over one input or two (SemJoin): what it asks a model
    (``question``, hence ``task_kind``), what a cascade would route it as (``cascade_kind``), the
    tier it runs on (``resolved_tier``), the columns it adds (``output_types``), and the
    capabilities rules ask about: ``calls_llm`` and ``calls_model``, ``row_wise``,
    ``row_preserving``, ``deterministic`` (class variables), ``drops_rows_only()`` and
    ``columns_read()``. Lowering, token estimates and rules read these instead of testing classes.
    """

    calls_llm: ClassVar[bool] = True
    calls_model: ClassVar[bool] = True
    row_wise: ClassVar[bool] = False
    """Answers each input row on its own with one model call (filter, map, extract, classify):
    it lowers to a per-batch actor stage, may add diagnostics columns, cascade, and run in the
    growing round trips under a LIMIT."""

    @abstractmethod
    def question(self) -> Question | None:
        """What it asks of each input row (a SemJoin: of each pair; a SemTopK: one record's question,
        whose measured tokens give the cost model a record's tokens; a SemAgg: what it is priced as
        per row), or None when it sends no prompt (SemSearch, SemCode)."""

    def task_kind(self) -> TaskKind | None:
        """The kind of its ``question``: ``SemFilter(...).task_kind() == TaskKind.FILTER``."""
        question = self.question()
        return None if question is None else question.kind

    def cascade_kind(self) -> TaskKind | None:
        """What the cascade router would route it as, or None when it cannot cascade."""
        return None

    @abstractmethod
    def resolved_tier(self) -> str:
        """The tier it runs on as lowering resolves ``tier``: ``"cascade"`` for a cascade whose
        target can be certified, the large tier for ``"auto"`` (and for a cascade whose target
        cannot be), else its own tier."""

    def given_tier(self) -> Tier | None:
        """Its ``tier`` argument as written (``"auto"``, ``"small"``, ...), or None when it takes
        none (SemSearch, SemCode)."""
        return None

    def tier_is_open(self) -> bool:
        """The optimizer chooses its tier: it was given ``tier="auto"`` and no quality target."""
        return self.given_tier() == "auto"

    def output_types(self) -> tuple[tuple[str, str], ...]:
        """(column, semray value type) it adds to each row, e.g. ``(("label", "text"),)``."""
        return ()


class Semantic(Unary, SemanticNode):
    """A semantic operator over one input, driven by an instruction template."""

    cascadable: ClassVar[bool] = False
    """Its question may run as a cascade (when its kind is one the router routes)."""
    instruction: str
    tier: Tier = "auto"
    on_error: Literal["fail", "skip", "default"] = "default"
    """A row the model cannot answer: fail the run, drop the row, or give null (a filter drops it)."""
    diagnostics: bool = Field(default=False, strict=True)
    """Add ``_tier``, ``_confidence`` and ``_error`` columns (row-wise operators only)."""
    quality: QualityTarget | None = None
    """A cascade's target; setting it on a ``tier="auto"`` operator asks for a cascade. On a
    ``tier="auto"`` operator no cascade routes (a SemMap without a score range, a SemExtract) it is
    the agreement a validated function must reach with its per-row answers to replace it
    (`agreement_target`; ``planner/rules/prefer_validated_code.py``)."""

    @abstractmethod
    def question(self) -> Question:
        """What it asks of each input row (a SemTopK: one record's question, see `SemanticNode`; a
        SemAgg: what it is priced as per row)."""

    def cascade_kind(self) -> TaskKind | None:
        kind = self.task_kind()
        return kind if self.cascadable and kind is not None and kind.cascades else None

    def resolved_tier(self) -> str:
        if self.cascades() is not None:
            return "cascade"
        return AUTO_TIER if self.tier in ("auto", "cascade") else self.tier

    def given_tier(self) -> Tier:
        return self.tier

    def tier_is_open(self) -> bool:
        return self.tier == "auto" and self.quality is None

    def cascade_target(self) -> QualityTarget | None:
        """The target this operator asks a cascade for, or None when it runs on one tier."""
        return cascade_target(self)

    def agreement_target(self) -> QualityTarget | None:
        """Its own target when that is the code choice's bar, not a cascade's (`quality_targets.agreement_target`).

        >>> from semray.operators import Scan, Schema, SourceSpec
        >>> scan = Scan(source=SourceSpec(kind="csv", path="d.csv"), source_schema=Schema.of(("raw", "VARCHAR")))
        >>> SemMap(input=scan, instruction="{raw} as a date", output="day", quality=QualityTarget(level=0.97)).label()
        "SemMap [code agreement>=0.97 delta=0.05] '{raw} as a date'"
        """
        return agreement_target(self)

    def cascades(self) -> QualityTarget | None:
        """The target this operator runs as a cascade for: ``cascade_target()`` when it can be
        certified, else None (it runs on the large tier; ``quality_shortfall`` says why)."""
        target = self.cascade_target()
        return target if target is not None and target.certifiable else None

    def quality_shortfall(self) -> str | None:
        """A warning when the asked target cannot be certified (see ``QualityTarget.shortfall``)."""
        target = self.cascade_target()
        return target.shortfall(f"{type(self).__name__} {self.instruction!r}") if target is not None else None

    def check_quality(self) -> None:
        """Refuse a target this operator cannot take (`quality_targets.check_quality`)."""
        check_quality(self)

    def diagnostic_columns(self) -> tuple[Column, ...]:
        if not self.diagnostics:
            return ()
        if not self.row_wise:
            raise PlanError(f"{type(self).__name__}: diagnostics columns are only for row-wise operators")
        return DIAGNOSTIC_COLUMNS

    row_wise: ClassVar[bool] = True

    def template_columns(self) -> tuple[str, ...]:
        return check_template(self.instruction, self.input_schema.names, type(self).__name__)

    def columns_read(self) -> frozenset[str]:
        return frozenset(template_columns(self.instruction, type(self).__name__))

    def with_output(self, *columns: Column) -> Schema:
        for column in columns:
            if column.name in self.input_schema:
                raise PlanError(
                    f"{type(self).__name__}: output column {column.name!r} already exists in the input; "
                    "choose another name"
                )
        return Schema(columns=self.input_schema.columns + columns)

    def label(self) -> str:
        target, own = self.cascades(), self.agreement_target()
        if own is not None:
            tier = f" [code agreement>={own.level} delta={own.delta}]"
        elif self.quality_shortfall() is not None:
            tier = " [large: the cascade's target cannot be certified]"
        elif target is not None:
            tier = f" [cascade {target.metric}>={target.level} delta={target.delta}]"
        else:
            tier = "" if self.tier == "auto" else f" [{self.tier}]"
        return f"{type(self).__name__}{tier} {self.instruction!r}"


class SemFilter(Semantic):
    """Keep rows for which the instruction holds: ``SemFilter(input=s, instruction="{review} is positive")``."""

    op: Literal["sem_filter"] = "sem_filter"
    cascadable: ClassVar[bool] = True

    def question(self) -> Question:
        return Question(TaskKind.FILTER, self.instruction)

    def drops_rows_only(self) -> bool:
        return not self.diagnostics

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        return self.with_output(*self.diagnostic_columns())


class SemMap(Semantic):
    """Add one column computed by the model; a score when ``lo``/``hi`` are given."""

    op: Literal["sem_map"] = "sem_map"
    row_preserving: ClassVar[bool] = True
    cascadable: ClassVar[bool] = True
    output: OutputName
    output_type: ValueType = "text"
    lo: StrictFloat | None = None
    hi: StrictFloat | None = None

    def question(self) -> Question:
        if self.lo is None:
            return Question(TaskKind.MAP, self.instruction)
        return Question(TaskKind.SCORE, self.instruction, lo=self.lo, hi=self.hi)

    def output_types(self) -> tuple[tuple[str, str], ...]:
        return ((self.output, self.output_type),)

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        if (self.lo is None) != (self.hi is None):
            raise PlanError("SemMap: give both lo and hi for a score, or neither")
        if self.lo is not None and self.hi is not None:
            if self.output_type not in ("int", "float"):
                raise PlanError("SemMap: a score range needs output_type 'int' or 'float'")
            check_score_range(self.lo, self.hi)
        return self.with_output(Column(name=self.output, type=SQL_TYPES[self.output_type]), *self.diagnostic_columns())


class SemExtract(Semantic):
    """Extract typed fields from text; a field the text lacks comes back null."""

    op: Literal["sem_extract"] = "sem_extract"
    row_preserving: ClassVar[bool] = True
    fields: tuple[ExtractField, ...]

    def question(self) -> Question:
        return Question(TaskKind.EXTRACT, self.instruction, fields=self.output_types())

    def output_types(self) -> tuple[tuple[str, str], ...]:
        return tuple((field.name, field.type) for field in self.fields)

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        if not self.fields:
            raise PlanError("SemExtract: give at least one field, e.g. 'sender: text'")
        fields = tuple(Column(name=f.name, type=SQL_TYPES[f.type]) for f in self.fields)
        return self.with_output(*fields, *self.diagnostic_columns())


class SemClassify(Semantic):
    """Assign one of N labels: ``labels=("positive", "negative", "neutral")``."""

    op: Literal["sem_classify"] = "sem_classify"
    row_preserving: ClassVar[bool] = True
    cascadable: ClassVar[bool] = True
    labels: tuple[str, ...]
    output: OutputName = "label"

    def question(self) -> Question:
        return Question(TaskKind.CLASSIFY, self.instruction, choices=self.labels)

    def output_types(self) -> tuple[tuple[str, str], ...]:
        return ((self.output, "text"),)

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        if len(self.labels) < 2:
            raise PlanError("SemClassify: give at least two labels")
        for position, label in enumerate(self.labels):
            if not label.strip():
                raise NodeArgumentError("SemClassify", ("labels", str(position)), "empty label; every label needs text")
        if len(set(self.labels)) != len(self.labels):
            raise PlanError(f"SemClassify: labels must be unique, got {list(self.labels)}")
        return self.with_output(Column(name=self.output, type="VARCHAR"), *self.diagnostic_columns())


class SemTopK(Semantic):
    """The k rows that best satisfy the instruction, ranked 1..k in ``output``."""

    op: Literal["sem_topk"] = "sem_topk"
    row_wise: ClassVar[bool] = False
    k: int = Field(ge=1, strict=True)
    output: OutputName = "rank"

    def question(self) -> Question:
        """A 1 to 10 relevance score of one record: what ``tokens_per_row`` measures of it (its
        tokens less the fixed part are a record's). It runs as pairwise comparisons
        (``serving/prompts/set_ops.py``), priced as such (``cost_model/topk_rule.py``)."""
        return Question(TaskKind.SCORE, self.instruction, lo=TOPK_SCALE[0], hi=TOPK_SCALE[1])

    def resolved_tier(self) -> str:
        return set_tier(self.tier)

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        self.diagnostic_columns()
        return self.with_output(Column(name=self.output, type="BIGINT"))


class SemAgg(Semantic):
    """Answer or summarise the instruction over each group of rows (all rows without keys)."""

    op: Literal["sem_agg"] = "sem_agg"
    row_wise: ClassVar[bool] = False
    keys: tuple[str, ...] = ()
    output: OutputName = "answer"

    def question(self) -> Question:
        """Priced as a free-text answer; it runs over packed groups of rows (``serving/prompts/set_ops.py``)."""
        return Question(TaskKind.MAP, self.instruction)

    def resolved_tier(self) -> str:
        return set_tier(self.tier)

    def derive_schema(self) -> Schema:
        self.template_columns()
        self.check_quality()
        schema = self.input_schema
        schema.require(self.keys, "SemAgg keys")
        self.diagnostic_columns()
        if self.output in self.keys:
            raise PlanError(f"SemAgg: output {self.output!r} clashes with a key")
        keys = tuple(Column(name=key, type=schema.type_of(key)) for key in self.keys)
        return Schema(columns=(ROW_ID_COLUMN, *keys, Column(name=self.output, type="VARCHAR")))

    def columns_read(self) -> frozenset[str]:
        return super().columns_read() | frozenset(self.keys)


class SemSearch(Unary, SemanticNode):
    """Retrieve the k rows of ``column`` nearest to a query by vectors, full text or both.

    ``level`` None ranks the input's rows as they are: a run-scoped index of ``column``, or, over the
    documents of a catalogued dataset (``operators/catalogued.py``), the catalog's document segments.
    A ``level`` of the catalog's hierarchy (``"document"``, ``"section"``, ``"paragraph"``, ``"chunk"``)
    searches the segments of that level of the input's documents instead: one output row per segment
    hit (the k best), its document's row followed by the score and ``SEGMENT_HIT_COLUMNS`` (the
    segment's id, path of headings, source span and text), with ``_rowid`` made unique per segment.
    It needs catalogued documents as input (``read_catalog``); anything else is a PlanError.
    """

    op: Literal["sem_search"] = "sem_search"
    calls_llm: ClassVar[bool] = False
    column: str
    query: str
    k: int = Field(ge=1, strict=True)
    mode: Literal["vector", "fts", "hybrid"] = "vector"
    output: OutputName = "score"
    level: SegmentLevel | None = None
    """The catalog segment level to search (one row per segment hit); None: rank the input's rows."""

    def derive_schema(self) -> Schema:
        self.input_schema.require([self.column], "SemSearch")
        if self.input_schema.type_of(self.column) != "VARCHAR":
            raise PlanError(f"SemSearch: column {self.column!r} is {self.input_schema.type_of(self.column)}, not text")
        if not self.query.strip():
            raise PlanError("SemSearch: the query is empty")
        added = [Column(name=self.output, type="DOUBLE")]
        if self.level is not None:
            if catalogued_documents(self) is None:
                raise PlanError(
                    f"SemSearch level={self.level!r} searches the catalog's {self.level} segments, so its input must "
                    "be the documents of a catalogued dataset (semray.read_catalog(NAME)) under filters, limits and "
                    f"projections, searching their {DOCUMENT_TEXT!r} and keeping their {DOCUMENT_KEY!r}; "
                    "drop level to rank the rows as they are"
                )
            added += [Column(name=name, type=kind) for name, kind in SEGMENT_HIT_COLUMNS]
        for column in added:
            if column.name in self.input_schema:
                raise PlanError(f"SemSearch: output column {column.name!r} already exists; choose another name")
        return Schema(columns=(*self.input_schema.columns, *added))

    def columns_read(self) -> frozenset[str]:
        # Over catalogued documents the column naming each row's document is read too: the catalog's
        # indexes are found by it, so pruning it would turn the search back into embedding every row.
        found = documents_below(self.input)
        keys = document_keys(found[1]) if found is not None else []
        return frozenset({self.column, *keys[:1]})

    def label(self) -> str:
        level = f" level={self.level}" if self.level is not None else ""
        return f"SemSearch {self.mode} {self.column} ~ {self.query!r} k={self.k}{level}"

    def question(self) -> None:
        return None  # it embeds its column (and the query); no prompt

    def resolved_tier(self) -> str:
        return "embedding"

    def output_types(self) -> tuple[tuple[str, str], ...]:
        return ((self.output, "float"),)  # a level's SEGMENT_HIT_COLUMNS describe a segment, not a model answer


class SemJoin(SemanticNode):
    """Pairs of rows for which an instruction over ``{l.col}`` and ``{r.col}`` holds."""

    op: Literal["sem_join"] = "sem_join"
    child_fields: ClassVar[tuple[str, ...]] = ("left", "right")
    left: PlanNode
    right: PlanNode
    instruction: str
    tier: Tier = "auto"
    implementation: Literal["auto", "nested", "blocked", "factorized"] = "auto"
    factor: str | None = None
    """A factorized join's per-row property (``"sentiment"``); None: the one the condition names."""
    relation: Literal["=", "<>", "<", ">"] = "="
    """How a pair's two property values relate when it holds (``<``/``>``: scores, left vs right)."""
    labels: tuple[str, ...] = ()
    """The property's values, asked as a choice (empty: free text, or a score when ordered)."""
    right_labels: bool = False
    """The right side's one referenced column is the label set: only left rows are classified into it."""
    agreement: float | None = Field(default=None, ge=0.0, le=1.0)
    """The measured agreement with the pairwise answers of a verified factorization (None: by its form)."""

    def derive_schema(self) -> Schema:
        self._check_factorization()
        references = template_columns(self.instruction, "SemJoin")
        sides = {split_side(reference, "SemJoin") for reference in references}
        for side, referenced in sides:
            schema = self.left.output_schema if side == "l" else self.right.output_schema
            schema.require([referenced], f"SemJoin instruction ({'left' if side == 'l' else 'right'} input)")
        if {side for side, _ in sides} != {"l", "r"}:
            raise PlanError("SemJoin: the instruction must reference both sides, e.g. {l.review} and {r.review}")
        left, right = self.left.output_schema, self.right.output_schema
        names = right_names(left, right)
        right_columns = tuple(Column(name=names[column.name], type=column.type) for column in right.user_columns())
        return Schema(columns=left.columns + right_columns)

    def columns_read(self) -> frozenset[str]:
        return frozenset(split_side(r, "SemJoin")[1] for r in template_columns(self.instruction, "SemJoin"))

    def _check_factorization(self) -> None:
        factorized = self.factor is not None or self.relation != "=" or self.labels or self.right_labels
        if factorized and self.implementation != "factorized":
            raise PlanError(
                f"SemJoin: factor, relation, labels and right_labels describe a factorized join; "
                f"set implementation='factorized' (not {self.implementation!r}) or drop them"
            )
        if self.relation in ("<", ">") and (self.factor is None or self.labels or self.right_labels):
            raise PlanError("SemJoin: an ordered relation compares scores of a named factor, without labels")
        if self.right_labels and not self.labels:
            raise PlanError("SemJoin: right_labels needs the right side's values as labels")
        if self.right_labels and self.relation != "=":
            raise PlanError("SemJoin: right_labels classifies left rows into the right values; use relation '='")
        sides = {split_side(reference, "SemJoin") for reference in template_columns(self.instruction, "SemJoin")}
        if self.right_labels and len([column for side, column in sides if side == "r"]) != 1:
            raise PlanError("SemJoin: right_labels needs an instruction that reads one right column (the labels)")

    def label(self) -> str:
        if self.factor is None and not self.right_labels:
            return f"SemJoin[{self.implementation}] {self.instruction!r}"
        shown = "left into right values" if self.right_labels else f"{self.factor} {self.relation}"
        if self.labels:
            shown += f" of {len(self.labels)} labels"
        if self.agreement is not None:
            shown += f", verified: agreement {self.agreement:.3f}"
        return f"SemJoin[factorized: {shown}] {self.instruction!r}"

    def question(self) -> Question:
        """Each pair is asked as a filter over ``{l.col}`` and ``{r.col}``."""
        return Question(TaskKind.FILTER, self.instruction)

    def resolved_tier(self) -> str:
        return set_tier(self.tier)

    def given_tier(self) -> Tier:
        return self.tier


TOPK_SCALE = (1.0, 10.0)
"""The relevance scale of a SemTopK's one-record question (``SemTopK.question``)."""


def set_tier(tier: str) -> str:
    """The tier a join, top-k or aggregation calls: small or large (auto and cascade run on large).

    >>> set_tier("auto"), set_tier("small")
    ('large', 'small')
    """
    return tier if tier in ("small", "large") else AUTO_TIER


def is_row_semantic(node: Node) -> TypeGuard[Semantic]:
    """A semantic operator over one input that asks a language model about each row on its own
    (SemFilter, SemMap, SemExtract, SemClassify): capabilities ``row_wise`` and ``calls_llm``."""
    return isinstance(node, Semantic) and node.row_wise and node.calls_llm


def check_score_range(lo: float, hi: float) -> None:
    """Refuse a score scale that is not finite, is empty, or offers more than MAX_SCORE_CHOICES
    whole numbers (``1`` to ``10_000_000`` is refused; ``0.5`` to ``1e9`` asks for a free number).

    >>> check_score_range(1, 5)
    """
    lo, hi = float(lo), float(hi)
    for name, value in (("lo", lo), ("hi", hi)):
        if not math.isfinite(value):
            raise NodeArgumentError(
                "SemMap", (name,), f"score bound {name}={value} is not a finite number; give e.g. 1 and 5"
            )
    if lo >= hi:
        raise NodeArgumentError("SemMap", ("lo",), f"score range lo={_bound(lo)} must be below hi={_bound(hi)}")
    count = hi - lo + 1
    if lo.is_integer() and hi.is_integer() and count > MAX_SCORE_CHOICES:
        spans = f"{count:,.0f}" if count < 1e16 else ("more than 1e308" if math.isinf(count) else f"{count:.3g}")
        raise NodeArgumentError(
            "SemMap",
            ("hi",),
            f"the score range {_bound(lo)} to {_bound(hi)} spans {spans} whole numbers, more than the "
            f"{MAX_SCORE_CHOICES:,} a score may choose from; narrow it (e.g. 1 to 10), or ask for a free "
            "number: output_type 'float' without lo and hi (in SQL, SEM_MAP('...', 'float'))",
        )


def _bound(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)


def with_quality(plan: Node, target: QualityTarget) -> Node:
    """Give every ``tier="auto"`` filter, classification and score without a target of its own
    this one, so each runs as a cascade: the query-level ``quality=``."""
    from semray.operators.base import transform

    def give(node: Node) -> Node:
        if not isinstance(node, Semantic) or node.tier != "auto" or node.quality is not None:
            return node
        kind = node.cascade_kind()
        if kind is None:
            return node  # free text, extraction, top-k, aggregation: no cascade; they keep their tier
        own = target if kind == TaskKind.FILTER else target.model_copy(update={"metric": "accuracy"})
        fields = {name: getattr(node, name) for name in type(node).model_fields}
        return type(node).model_validate({**fields, "quality": own})

    return transform(plan, give)
