"""One frozen settings object, read from ``SEMRAY_*`` environment variables.

Build it once at the edge (CLI, ``semray.connect``) and pass it down.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from semray.errors import StateDirError

STATE_DIR_ENV = "SEMRAY_STATE_DIR"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
"""``s3://b/x``, and ``s3:/b/x`` (what ``Path("s3://b/x")`` keeps of it)."""


def posix_state_dir(value: object) -> object:
    """The state folder ``value`` names: a ``file:`` URI becomes its local path; any other URI
    (``s3://``, ``gs://``, ``abfs://``: pyarrow's object-store filesystems) raises ``StateDirError``,
    as the state needs a POSIX file system (``cluster/shared_state.py`` says why).

    >>> posix_state_dir("file:///mnt/shared/semray")
    PosixPath('/mnt/shared/semray')
    """
    text = str(value)
    if not (isinstance(value, str | Path) and _URI.match(text)):
        return value
    parts = urlsplit(text)
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost") and not parts.query + parts.fragment:
        return Path(unquote(parts.path))  # file:///x, file://localhost/x, and Path's file:/x
    raise StateDirError(
        f"state folder {text!r} is a URI: semray's state (run journals under flock, fsync'd renames, "
        "hard-linked outputs, the SQLite response cache) needs a POSIX file system, and object stores are not "
        f"supported as the state folder itself. Set {STATE_DIR_ENV} (or --state-dir) to a path every node sees, "
        "e.g. an NFS mount or a bucket mounted with a POSIX-compliant FUSE driver (a file:// URI of such a path is "
        "accepted), or keep a local state folder and copy the runs to the bucket with SEMRAY_STATE_URI"
    )


def with_endpoint(uri: str, endpoint: str) -> str:
    """``uri`` with ``endpoint`` (``http(s)://host:port``) as the query options pyarrow's ``from_uri`` reads for
    ``s3://`` and ``gs://``; ``StateDirError`` for another scheme, which pyarrow takes no endpoint for."""
    parts = urlsplit(uri)
    if parts.scheme not in ("s3", "gs", "gcs"):
        raise StateDirError(
            f"state endpoint {endpoint!r}: only s3:// and gs:// state URIs take one (the state URI is {uri!r}); "
            "unset SEMRAY_STATE_ENDPOINT"
        )
    target = urlsplit(endpoint)
    options = [pair for pair in parse_qsl(parts.query) if pair[0] not in ("endpoint_override", "scheme")]
    query = urlencode([*options, ("endpoint_override", target.netloc), ("scheme", target.scheme)])
    return urlunsplit(parts._replace(query=query))


class Settings(BaseSettings):
    """Runtime configuration, e.g. ``Settings(state_dir=Path("/tmp/s"), num_cpus=2)``."""

    model_config = SettingsConfigDict(env_prefix="SEMRAY_", frozen=True, extra="forbid")

    state_dir: Path = Field(default=Path(".semray"), description="runs, journals, caches, Ray temp files")
    state_uri: str | None = Field(
        default=None,
        description="an object store (s3://, gs://, abfs://: pyarrow's filesystems) each run's journal and batch "
        "files are copied to as write-once objects, so `semray runs ls|show|resume` see them from any machine; runs "
        "still work in state_dir (docs/cluster.md, semray/transactions/remote.py)",
    )
    state_endpoint: str | None = Field(
        default=None,
        description="the object store's endpoint when it is not the provider's own (MinIO, a local S3 such as "
        "moto's), e.g. http://127.0.0.1:9000; folded into the store's URI as pyarrow's endpoint_override, so "
        "workers on every node open the same store. Unset: AWS_ENDPOINT_URL, which pyarrow >= 26 honours "
        "(docs/cluster.md)",
    )
    state_sync_s: float = Field(
        default=5.0, gt=0.0, description="seconds between copies of a live run's new commits to state_uri"
    )
    cache_sync_s: float = Field(
        default=60.0,
        gt=0.0,
        description="seconds between copies of a live run's new response-cache entries to state_uri (and once at "
        "its end); each copy that has new entries is one object (semray/serving/cache_store.py)",
    )
    ray_address: str | None = Field(default=None, description="connect to this Ray cluster instead of starting one")
    models: Path | None = Field(
        default=None,
        description="model profile (TOML) naming the tiers; default ./semray.toml when present, else the packaged "
        "embedder and the simulated small and large tiers (serving/profiles.py)",
    )
    num_cpus: int = Field(default=2, ge=1, description="CPUs of the embedded local Ray")
    object_store_bytes: int | None = Field(default=None, description="object store size of the embedded Ray")
    batch_size: int = Field(default=65_536, ge=1, description="rows per batch for relational operators")
    gather_rows: int = Field(
        default=2_000_000,
        ge=0,
        description=(
            "joins, sorts, aggregates over at most this many (estimated) rows run without a shuffle; 0 always shuffles"
        ),
    )
    semantic_batch_size: int = Field(
        default=32,
        ge=1,
        description="rows per model round trip for semantic operators under a LIMIT or on small inputs",
    )
    semantic_batch_max: int = Field(
        default=256,
        ge=1,
        description="rows per model round trip a semantic operator grows to over a large input with no LIMIT above it",
    )
    semantic_actors: int = Field(default=2, ge=1, description="actors per semantic operator (each holds Serve handles)")
    max_error_rate: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="a run fails when more than this share of a semantic operator's rows got no answer (a model "
        "error, an off-format or empty reply, a simulator row without a label), whatever its on_error; 1.0 never "
        "fails for it. Below it the run succeeds and says how many rows failed",
    )
    count_rows: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="count the rows each operator passes on, for EXPLAIN after a run: auto counts plans that call "
        "models (a line written per batch, beside at least one model call per batch), on counts every plan, "
        "off none",
    )
    max_cost: float | None = Field(
        default=None,
        gt=0.0,
        description="budget in dollars for a run's model calls (CLI --max-cost): a plan estimated to cost more is "
        "refused before it starts, and a run whose projected cost would pass it stops between batches, cancelled "
        "and resumable (`semray runs resume ID --max-cost HIGHER`); None: no budget",
    )
    join_factorization: float | None = Field(
        default=0.9,
        gt=0.0,
        le=1.0,
        description="the agreement target of the checked join factorization every optimized run applies first "
        "(SQL, JSON plans and the CLI too; SEMRAY_JOIN_FACTORIZATION=0.95, or off): each semantic join still on "
        "implementation auto, large enough that its pairs cost more than the check's worst case and the "
        "factorized join, whose pair predicate compares one per-row property is factorized when a sampled check "
        "against its pairwise answers meets it (Query.with_join_factorization); None (off): never checked",
    )
    cascade_max_slowdown: float = Field(
        default=1.0,
        gt=0.0,
        description="how much slower in projected wall time than the large tier alone a cascade may be and still "
        "run (SEMRAY_CASCADE_MAX_SLOWDOWN): a tier-auto operator with a quality target, or a cascade model "
        "selection chose, projected slower than this times the large tier's time (its proxy pass embeds every row "
        "first, docs/cost_model.md) runs on the large tier instead, dearer but faster; EXPLAIN shows both "
        "projections. 1.0: never slower; inf: keep every cascade, dollars first. A tier='cascade' operator is "
        "pinned and kept",
    )
    code_choice: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="the agreement target of the optimizer's code choice every optimized run makes first (SQL, JSON "
        "plans and the CLI reach it through SEMRAY_CODE_CHOICE=0.9 or --code-choice 0.9; Query.with_code_choice): "
        "each tier-auto SemMap without a score range or SemExtract whose per-row calls would cost more than a "
        "function gets one written by the large tier, which replaces the per-row calls when the 95% lower bound of "
        "its agreement with the model's own per-row answers reaches this (an operator's own quality target instead, "
        "where it has one). None: off, because the trials cost generation and validation calls before the run (1 to "
        "3 code calls and 20 to 200 per-row answers per candidate, on the large tier), the values then hold only "
        "within the measured agreement, and a one-off query over a modest input may not win them back",
    )
    topic_pruning: bool = Field(
        default=False,
        description="prune each semantic filter that names one topic of an organised, catalogued documents dataset "
        "(`semray catalog organize`) to the documents the catalog's classifier labelled with it, before any model "
        "call (Query.with_topic_pruning, `semray ask --topic-pruning`, SEMRAY_TOPIC_PRUNING=1): fewer calls, but a "
        "relevant document labelled with another topic is dropped unseen, so recall is bounded by the classifier's "
        "agreement with the model (`semray catalog show`); off: no answer depends on the labels",
    )
    progress_interval_s: float = Field(
        default=10.0,
        ge=0.0,
        description="a run with model calls logs a run_progress line (rows done of the estimate, calls, dollars of the "
        "estimate, ETA) every this many seconds while it runs, unless the caller shows progress itself (the CLI's "
        "bar on a terminal); 0: no lines",
    )
    log_format: str = Field(default="auto", description="auto | console | json")
    log_level: str = Field(default="info")

    catalog_dir: Path | None = Field(
        default=None, description="the LanceDB catalog of datasets, segments and memory; default <state_dir>/catalog"
    )
    catalog_stream_bytes: int = Field(
        default=64 << 20,
        ge=1,
        description="a text or Markdown document larger than this is read, segmented and embedded in parts of about "
        "64k characters (catalog/streamed_documents.py), never whole; an HTML or PDF document larger than this is "
        "skipped with its size",
    )
    catalog_publish_rows: int = Field(
        default=4_096,
        ge=1,
        description="a catalog publish streams each table's new rows to LanceDB in batches of at most this many rows "
        "(one add per table, so one Lance version; catalog/store.py batch_stream): its memory holds about one batch "
        "of vectors whatever the collection's size",
    )
    catalog_mmap_threshold: int = Field(
        default=1 << 20,
        ge=0,
        description="while an ingest publishes, glibc's malloc serves every block of at least this many bytes from a "
        "mapping of its own, returned to the system when freed (catalog/native_memory.py): LanceDB's writes and index "
        "builds otherwise leave hundreds of MiB in malloc's arenas; 0 leaves malloc alone",
    )
    catalog_shard_rows: int = Field(
        default=100_000,
        ge=1,
        description="the catalog's segments are stored as LanceDB tables of at most this many rows, each with its own "
        "indexes (catalog/shards.py): a publish rebuilds the indexes of the shards it adds rows to, so its time and "
        "memory follow the rows it adds, not the catalog's size; a search asks every shard",
    )

    agent_max_retries: int = Field(
        default=2, ge=0, description="retries of an agent unit of `semray ask` whose attempt fails validation"
    )
    agent_max_units: int = Field(default=20, ge=1, description="commit-or-retry units an ask may run")
    agent_decision_margin: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="retry a critical choice of an ask (its datasets) whose decision confidence divergence, the "
        "chosen option's normalised confidence margin over the best alternative under the scorer tier, is below this",
    )
    agent_scorer_model: Path | None = Field(
        default=None,
        description="the scorer tier of `semray ask`: a local transformers causal LM folder that scores decisions by "
        "token logprobs (confidence signals); None: the model profile's [scorer] table (an endpoint's prompt "
        "logprobs, or a local model), else no confidence signals",
    )
    agent_reflection: bool | None = Field(
        default=None,
        description="after a plan of `semray ask` ran, the planner model reads the answer and says whether it answers "
        "the question; an implausible answer is planned again within the retry limit, and one kept after the last "
        "draft is reported as failing reflection. None: on when the planner is a real LLM tier of the model profile "
        "(the simulator cannot reflect; recorded answers reflect only when this is true); False: off",
    )
    agent_span_divergence: float | None = Field(
        default=0.50,
        ge=-1.0,
        le=1.0,
        description="with a scorer model, retry a drafted plan whose largest span divergence is below this: each "
        "decision-relevant span (predicates, filter values, keys, join conditions, instructions' key terms) scored "
        "with the exploration evidence in context minus without it; None: spans are not checked",
    )
    agent_stop_divergence: float | None = Field(
        default=0.45,
        ge=-1.0,
        le=1.0,
        description="with a scorer model, stop exploring candidate datasets once a new one's description is this "
        "much more confident after the earlier descriptions than without them (it adds little); None: explore all",
    )
    agent_candidates: int = Field(
        default=1,
        ge=1,
        description="competitive sub-agents of `semray ask`: candidate drafts per attempt of the plan unit, each "
        "from an isolated context and validated alone, drafted at once; the cheapest valid one by the cost model "
        "wins (1: one draft)",
    )
    agent_collaborators: int = Field(
        default=1,
        ge=1,
        description="collaborative sub-agents of `semray ask`: a repair of a draft whose problems lie at two or more "
        "places is shared among up to this many collaborators, each on its own branch of the draft, merged (a place "
        "two change differently keeps the change of the one given the earlier problem) (1: one repair draft)",
    )
    agent_dataset_agents: int = Field(
        default=0,
        ge=0,
        description="independent sub-agents of `semray ask`: the best this many candidate datasets are each read by a "
        "profiling sub-agent of its own, at once, which says whether the question needs it, which columns, and "
        "notes for the planner (0: one model call chooses among all candidates)",
    )
    agent_parallelism: int = Field(
        default=4,
        ge=1,
        description="sub-agents of `semray ask` (candidates, collaborators, dataset sub-agents) running at once",
    )
    agent_skill_similarity: float = Field(
        default=0.75,
        ge=0.0,
        le=1.0,
        description="how alike (cosine under the memory's embedding tier, else of content words) a question of "
        "other words must be to a stored skill's question for `semray ask` to re-fill and validate that skill",
    )
    agent_context_units: int = Field(
        default=15,
        ge=1,
        description="failed unit attempts of an ask whose verdicts later prompts show in full; older ones are "
        "summarised in one line",
    )

    allow_job_local_state: bool = Field(
        default=False,
        description="inside a Ray job, accept a state folder in the job's temporary working directory (its runs, "
        "journals and cache are lost when the job ends; see docs/cluster.md)",
    )

    @field_validator("join_factorization", mode="before")
    @classmethod
    def _factorization_off(cls, value: object) -> object:
        """``SEMRAY_JOIN_FACTORIZATION=off`` (or none, empty) turns the checked factorization off."""
        if isinstance(value, str) and value.strip().lower() in ("", "off", "none"):
            return None
        return value

    @field_validator("state_uri", mode="before")
    @classmethod
    def _state_uri(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not (isinstance(value, str) and _URI.match(value)):
            raise StateDirError(f"state URI {value!r} is not a URI; name an object store, e.g. s3://bucket/semray")
        return value

    @field_validator("state_endpoint", mode="before")
    @classmethod
    def _state_endpoint(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not (isinstance(value, str) and re.match(r"^https?://[^/?#]+/?$", value.strip())):
            raise StateDirError(
                f"state endpoint {value!r} is not an endpoint URL; name one as http(s)://host:port, "
                "e.g. http://127.0.0.1:9000"
            )
        return value.strip().rstrip("/")

    @model_validator(mode="after")
    def _endpoint_fits_state_uri(self) -> Settings:
        _ = self.state_store_uri  # an endpoint for a scheme that takes none is refused now, not at the first run
        return self

    @property
    def state_store_uri(self) -> str | None:
        """``state_uri`` as the store is opened everywhere, ``state_endpoint`` folded in as pyarrow's URI options.

        ``Settings(state_uri="s3://b/p", state_endpoint="http://127.0.0.1:9000").state_store_uri`` is
        ``"s3://b/p?endpoint_override=127.0.0.1%3A9000&scheme=http"``: one string that ledgers on
        other nodes carry, so they open the same store without the driver's settings.
        """
        if self.state_uri is None or self.state_endpoint is None:
            return self.state_uri
        return with_endpoint(self.state_uri, self.state_endpoint)

    @field_validator("state_dir", mode="before")
    @classmethod
    def _local_state_dir(cls, value: object) -> object:
        return posix_state_dir(value)

    @property
    def state_path(self) -> Path:
        return self.state_dir.expanduser().resolve()

    @property
    def catalog_path(self) -> Path:
        return (self.catalog_dir or self.state_dir / "catalog").expanduser().resolve()
