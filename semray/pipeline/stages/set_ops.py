"""Physical stages of the set-level semantic operators (SemJoin, SemTopK, SemAgg, SemSearch).

Stages that call a model tier subclass ``SemanticStage`` so that the run sees their tier
(``runs/resume_record.model_tiers``) and the actor budget counts them (``ray/materialize.with_actor_budget``);
``task.tier`` is the tier they call. The embedding of rows is its own stage (an actor pool),
and a join's pair verification reuses the row-wise ``SemanticStage`` filter over pair rows.
A SemSearch over catalogued documents is a ``CatalogSearchStage``: ranked by the catalog's segments,
its input is not embedded (``pipeline/workers/search.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage

if TYPE_CHECKING:  # annotations only: the actors that import stages need not load the plan layer or the catalog
    from semray.catalog.catalogued_rows import CatalogRoute
    from semray.operators.relational import CatalogPin

VECTOR = "_vec"
"""Column of float32 unit vectors that ``EmbedStage`` adds (dropped by the stages that use it)."""


@dataclass(frozen=True, slots=True)
class EmbedStage(SemanticStage):
    """Add ``VECTOR``: the embedding tier's vector of ``task.instruction`` rendered over each row,
    computed by an actor pool that sends whole batches to the embedding deployment.

    ``journaled``: each batch's vectors and usage are committed to the run's ledger under ``operator_key``
    (a run-scoped SemSearch's rows, a blocked join's sides, a top-k's prefilter: ``Result.usage`` counts
    them, a resume reuses them); otherwise the vectors are computed uncounted.
    """

    journaled: bool = False

    def describe(self) -> str:
        counted = ", journaled" if self.journaled else ""
        return f"Embed {self.task.instruction!r} (actor pool of {self.actors}, batches of {self.batch_rows}{counted})"


@dataclass(frozen=True, slots=True)
class BlockStage(Stage):
    """Candidate pairs of a blocked join: for each left row (inputs[0], streamed) the
    ``per_row`` right rows (inputs[1], gathered once) of highest cosine similarity. With one
    input, the join's two sides are that one relation (``join_sides.reads_one_relation``): it
    runs once and is both the left stream and the gathered right side.

    Output rows are pair rows: ``_rowid`` = ``left*right``, the left columns, then the right
    columns renamed as ``right_names`` says (old, new).
    """

    per_row: int
    left_names: tuple[str, ...]
    right_names: tuple[tuple[str, str], ...]
    right_columns: tuple[tuple[str, str], ...]
    """(name, DuckDB type) of the right input with its vectors, to gather it when empty."""

    def describe(self) -> str:
        return f"Block top {self.per_row} right rows per left row by cosine similarity"


@dataclass(frozen=True, slots=True)
class TopKStage(SemanticStage):
    """Rank by ``criterion``: keep the ``prefilter`` rows nearest to it by embedding, then
    order them by pairwise comparisons in batches (partial quicksort); emit ranks 1..k."""

    k: int
    output: str
    criterion: str
    record_template: str
    prefilter: int
    input_columns: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return (
            f"TopK[{self.k} by pairwise comparisons on {self.task.tier}] {self.criterion!r} "
            f"after an embedding prefilter to {self.prefilter} rows"
        )


@dataclass(frozen=True, slots=True)
class AggStage(SemanticStage):
    """Answer ``question`` over each group of rows (one group without ``keys``): one call when the
    group's records fit ``context_tokens``, else leaves over chunks combined hierarchically."""

    keys: tuple[str, ...]
    output: str
    question: str
    record_template: str
    context_tokens: int
    input_columns: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        keys = ", ".join(self.keys) or "all rows"
        return (
            f"SemAgg[{self.task.tier}] by {keys}: {self.question!r} "
            f"(map-reduce over chunks of at most {self.context_tokens} tokens)"
        )


@dataclass(frozen=True, slots=True)
class SearchStage(Stage):
    """The ``k`` rows whose ``column`` best matches ``query`` in a run-scoped LanceDB table."""

    column: str
    query: str
    k: int
    mode: Literal["vector", "fts", "hybrid"]
    output: str
    operator_key: str
    index_root: Path
    """Where the index lives when the run has no folder of its own (full-text search alone)."""
    input_columns: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"Search[{self.mode}] {self.column} ~ {self.query!r} k={self.k} (run-scoped LanceDB table)"


@dataclass(frozen=True, slots=True)
class CatalogSearchStage(SearchStage):
    """A SemSearch ranked by the catalog's segments of ``pin.dataset`` at ``pin.version``: its input is not embedded.

    ``route.key_column`` is the input column holding each row's ``document_id``; ``catalog_path`` is the
    catalog folder of the settings the plan was lowered with.
    """

    pin: CatalogPin
    route: CatalogRoute
    catalog_path: Path

    def describe(self) -> str:
        embedded = "nothing embedded" if self.mode == "fts" else "only the query embedded"
        return (
            f"Search[{self.mode}] {self.column} ~ {self.query!r} k={self.k} (the catalog's {self.route.level} "
            f"segments of {self.pin.dataset!r} at version {self.pin.version}, by {self.route.key_column}; {embedded})"
        )

    def model_tiers(self) -> frozenset[str]:
        """The tiers this stage calls: the embedding tier for the query of a vector or hybrid search."""
        return frozenset() if self.mode == "fts" else frozenset({"embedding"})
