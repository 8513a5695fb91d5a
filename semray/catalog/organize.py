"""Semantic organization of a documents dataset: the model proposes topics, a classifier assigns them.

``organize_dataset(settings, name, sample=200)``:

1. samples ``sample`` documents (hash-seeded, so the same catalog gives the same sample) from the
   dataset's ``document`` segments;
2. asks the LLM tier (the first non-simulated of ``small``, ``large``: ``summaries.llm_tier_name``)
   for a topic hierarchy from excerpts of the sample (``prompts/topics.py``, strict JSON,
   ``topics.parse_hierarchy``), then to label every sampled document with one topic path (a choice
   constraint, ``topics.parse_label``); a label that fails to parse leaves its document unlabelled;
3. trains a logistic regression on the embeddings already in the catalog (the documents' segment
   vectors) on the model's labels, holding out every ``HOLD_OUT_EVERY``-th labelled document to
   measure the classifier's *agreement* with the model, then refits on every label and assigns
   each document of the dataset (sampled documents keep the model's label);
4. publishes one catalog version: every segment of the dataset with its document's topic in the
   ``topic`` column, and the organization (hierarchy, counts, agreement) in ``organizations``.

With only simulated tiers it refuses (``OrganizationNeedsModelError``): the simulator answers
labelled tasks, it cannot invent topics. ``replies=recorded_replies(...)`` answers from a
recording instead (tests, replays); the recording maps request ids (``propose``, ``label:<doc>``)
to reply texts.

>>> organization = organize_dataset(settings, "notes", sample=200)  # doctest: +SKIP
>>> organization.agreement, topics(Catalog.open(settings), "notes")  # doctest: +SKIP
(0.87, {'Cardiology/Arrhythmia': 412, ...})
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semray.catalog.store import Catalog, ChangeSet, TableChange
from semray.catalog.summaries import llm_tier_name
from semray.catalog.tables import ORGANIZATIONS, ORGANIZATIONS_SCHEMA, SEGMENTS
from semray.catalog.tier_calls import generate_with_tier
from semray.catalog.topics import TopicHierarchy, TopicReplyError, parse_hierarchy, parse_label
from semray.errors import CatalogError, OrganizationNeedsModelError
from semray.log import get_logger
from semray.serving.config import ServingConfig
from semray.serving.contract import ModelRequest, ModelResponse, OutputConstraint
from semray.serving.profiles import resolve_serving
from semray.serving.prompts.topics import (
    LABEL_EXCERPT_CHARS,
    LABEL_MAX_TOKENS,
    LABEL_SYSTEM,
    LABEL_TEMPLATE,
    PROPOSE_EXCERPT_CHARS,
    PROPOSE_MAX_TOKENS,
    PROPOSE_OUTPUT,
    PROPOSE_SYSTEM,
    PROPOSE_TEMPLATE,
    TOPICS_PROMPT_VERSION,
)
from semray.settings import Settings
from semray.sql_quoting import quote_literal

log = get_logger(__name__)

Generate = Callable[[Sequence[ModelRequest]], list[ModelResponse]]
"""Answers requests in order: the LLM tier, or a recording."""

DEFAULT_SAMPLE = 200
PROPOSE_DOCUMENTS = 40
"""Sampled documents whose excerpts the proposal prompt shows (all are labelled)."""
MAX_TOPICS_ASKED = 12
MAX_SUBTOPICS_ASKED = 6
HOLD_OUT_EVERY = 5
MIN_DOCUMENTS = 4
CLASSIFIER = "logistic regression over document vectors (scikit-learn, C=1.0)"
PROPOSE_ID = "propose"


@dataclass(frozen=True, slots=True)
class Organization:
    """A dataset's published organization (``organizations`` row), at catalog ``version``."""

    dataset: str
    version: int
    hierarchy: TopicHierarchy
    topic_counts: Mapping[str, int]
    labelled_by: str
    sample_documents: int
    labelled_documents: int
    held_out_documents: int
    agreement: float | None
    documents: int
    content_hash: str
    organized_at: datetime.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any], version: int) -> Organization:
        return cls(
            dataset=row["dataset"],
            version=version,
            hierarchy=TopicHierarchy.from_json(json.loads(row["hierarchy_json"])),
            topic_counts=json.loads(row["topic_counts_json"]),
            labelled_by=row["labelled_by"],
            sample_documents=row["sample_documents"],
            labelled_documents=row["labelled_documents"],
            held_out_documents=row["held_out_documents"],
            agreement=row["agreement"],
            documents=row["documents"],
            content_hash=row["content_hash"],
            organized_at=row["organized_at"],
        )


def tier_replies(config: ServingConfig) -> tuple[Generate, str]:
    """The configured LLM tier as a ``Generate``, and who labels; ``OrganizationNeedsModelError`` when simulated."""
    tier_name = llm_tier_name(config)
    if tier_name is None:
        raise OrganizationNeedsModelError(
            "semantic organization needs a real LLM tier: the small and large tiers are simulated, and the "
            "simulator answers labelled tasks, it cannot propose topics. Configure one with --models FILE "
            '(e.g. [small] backend = "openai"), or replay recorded replies with --replay FILE'
        )

    def generate(requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        return asyncio.run(generate_with_tier(config, tier_name, list(requests)))

    return generate, f"the {tier_name} tier ({config.tier(tier_name).model})"


def recorded_replies(recording: Mapping[str, str] | Path) -> Generate:
    """Answers from a recording: request id -> reply text (a JSON object file when a path); a request
    with no recorded reply gets an ``empty`` error, as a tier's failed call would."""
    replies: Mapping[str, str] = (
        json.loads(recording.read_text(encoding="utf-8")) if isinstance(recording, Path) else recording
    )

    def generate(requests: Sequence[ModelRequest]) -> list[ModelResponse]:
        answered: list[ModelResponse] = []
        for request in requests:
            text = replies.get(request.request_id)
            answered.append(
                ModelResponse(
                    text=text or "",
                    value=text or "",
                    confidence=None,
                    tier="recorded",
                    model="recorded",
                    error=None if text is not None else f"empty: no recorded reply for {request.request_id!r}",
                    request_id=request.request_id,
                    calls=0,
                )
            )
        return answered

    return generate


def organize_dataset(
    settings: Settings,
    name: str,
    *,
    sample: int = DEFAULT_SAMPLE,
    replies: Generate | None = None,
    labelled_by: str = "recorded replies",
    seed: int = 0,
) -> Organization:
    """Propose, label, classify and publish the topics of the documents dataset ``name`` (module doc)."""
    if sample < MIN_DOCUMENTS:
        raise CatalogError(f"--sample {sample} is too small; at least {MIN_DOCUMENTS} documents are needed")
    if replies is None:
        replies, labelled_by = tier_replies(resolve_serving(settings.models))
    catalog = Catalog.open(settings)
    record = catalog.dataset(name)
    if record.kind != "documents":
        raise CatalogError(f"dataset {name!r} is {record.kind}, not documents; only documents are organised by topic")
    documents = catalog.rows(
        SEGMENTS,
        where=f"dataset = {quote_literal(name)} AND level = 'document'",
        columns=["document_id", "text", "vector"],
    ).sort_by("document_id")
    if documents.num_rows < MIN_DOCUMENTS:
        raise CatalogError(f"dataset {name!r} has {documents.num_rows} documents; organizing needs {MIN_DOCUMENTS}")
    ids: list[str] = documents.column("document_id").to_pylist()
    texts: list[str] = documents.column("text").to_pylist()
    chosen = sorted(range(len(ids)), key=lambda i: _draw(seed, ids[i]))[:sample]

    hierarchy = _propose(replies, name, [texts[i] for i in chosen[:PROPOSE_DOCUMENTS]], len(ids))
    labels = _label(replies, name, hierarchy, [(ids[i], texts[i]) for i in chosen])
    labelled = [i for i in chosen if ids[i] in labels]
    if len(labelled) < MIN_DOCUMENTS:
        raise CatalogError(
            f"only {len(labelled)} of {len(chosen)} sampled documents of {name!r} got a topic label that parsed; "
            "see the catalog_topic_label_failed events"
        )
    flat = documents.column("vector").combine_chunks().flatten()
    vectors = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(len(ids), -1)
    held_out = labelled[HOLD_OUT_EVERY - 1 :: HOLD_OUT_EVERY]
    kept = set(held_out)
    training = [i for i in labelled if i not in kept]
    agreement = _agreement(vectors, [labels[ids[i]] for i in training], training, held_out, labels, ids)
    assigned = _assign(vectors, [labels[ids[i]] for i in labelled], labelled)
    topic_of = {ids[i]: labels.get(ids[i], assigned[i]) for i in range(len(ids))}
    counts = dict(sorted(Counter(topic_of.values()).items()))

    organized_at = datetime.datetime.now(datetime.UTC)
    row = {
        "dataset": name,
        "hierarchy_json": json.dumps(hierarchy.to_json(), ensure_ascii=False),
        "topic_counts_json": json.dumps(counts, ensure_ascii=False),
        "labelled_by": labelled_by,
        "prompt_version": TOPICS_PROMPT_VERSION,
        "sample_documents": len(chosen),
        "labelled_documents": len(labelled),
        "held_out_documents": len(held_out),
        "agreement": agreement,
        "classifier": CLASSIFIER,
        "documents": len(ids),
        "content_hash": record.content_hash,
        "organized_at": organized_at,
    }
    segments = _labelled_segments(catalog, name, topic_of)
    version = catalog.publish(
        ChangeSet(
            catalog.version(),
            f"organize {name}",
            (
                TableChange(
                    SEGMENTS, delete_where=f"dataset = {quote_literal(name)}", rows=segments, after_write=_index
                ),
                TableChange(
                    ORGANIZATIONS,
                    delete_where=f"dataset = {quote_literal(name)}",
                    rows=pa.Table.from_pylist([row], schema=ORGANIZATIONS_SCHEMA),
                ),
            ),
        )
    )
    log.info(
        "catalog_organized",
        dataset=name,
        version=version,
        topics=len(hierarchy.labels),
        labelled=len(labelled),
        held_out=len(held_out),
        agreement=agreement,
    )
    return Organization.from_row(row, version)


def organization(catalog: Catalog, dataset: str) -> Organization | None:
    """The organization of ``dataset`` at the catalog's version, or None when it was never organised."""
    catalog.dataset(dataset)
    rows = catalog.rows(ORGANIZATIONS, where=f"dataset = {quote_literal(dataset)}")
    if not rows.num_rows:
        return None
    return Organization.from_row(rows.to_pylist()[0], catalog.version())


def topics(catalog: Catalog, dataset: str) -> dict[str, int]:
    """Documents per topic path of ``dataset`` at the catalog's version, read from the segments; {} when
    unorganised (or re-ingested since: an ingest writes its segments without topics)."""
    catalog.dataset(dataset)
    rows = catalog.rows(
        SEGMENTS,
        where=f"dataset = {quote_literal(dataset)} AND level = 'document' AND topic IS NOT NULL",
        columns=["topic"],
    )
    if not rows.num_rows:
        return {}
    return dict(sorted(Counter(rows.column("topic").to_pylist()).items()))


def _propose(replies: Generate, name: str, excerpts: Sequence[str], documents: int) -> TopicHierarchy:
    shown = "\n\n".join(
        f"[{number}] {text[:PROPOSE_EXCERPT_CHARS].strip()}" for number, text in enumerate(excerpts, start=1)
    )
    prompt = PROPOSE_TEMPLATE.format(
        shown=len(excerpts),
        name=name,
        documents=documents,
        excerpts=shown,
        max_topics=MAX_TOPICS_ASKED,
        max_subtopics=MAX_SUBTOPICS_ASKED,
    )
    request = ModelRequest(
        prompt=prompt,
        system=PROPOSE_SYSTEM,
        constraint=OutputConstraint.schema(PROPOSE_OUTPUT),
        max_tokens=PROPOSE_MAX_TOKENS,
        logprobs=False,
        request_id=PROPOSE_ID,
    )
    (reply,) = replies([request])
    if not reply.ok:
        raise TopicReplyError(f"the model proposed no topic hierarchy for {name!r}: {reply.error}")
    return parse_hierarchy(reply.value)


def _label(
    replies: Generate, name: str, hierarchy: TopicHierarchy, documents: Sequence[tuple[str, str]]
) -> dict[str, str]:
    listing = "\n".join(f"- {label}" for label in hierarchy.labels)
    requests = [
        ModelRequest(
            prompt=LABEL_TEMPLATE.format(name=name, topics=listing, text=text[:LABEL_EXCERPT_CHARS]),
            system=LABEL_SYSTEM,
            constraint=OutputConstraint.choice(*hierarchy.labels),
            max_tokens=LABEL_MAX_TOKENS,
            logprobs=False,
            request_id=f"label:{document_id}",
        )
        for document_id, text in documents
    ]
    labels: dict[str, str] = {}
    for (document_id, _text), reply in zip(documents, replies(requests), strict=True):
        try:
            if not reply.ok:
                raise TopicReplyError(str(reply.error))
            labels[document_id] = parse_label(reply.value, hierarchy)
        except TopicReplyError as error:
            log.warning("catalog_topic_label_failed", dataset=name, document=document_id, error=str(error))
    return labels


def _agreement(
    vectors: np.ndarray,
    training_labels: list[str],
    training: list[int],
    held_out: list[int],
    labels: Mapping[str, str],
    ids: Sequence[str],
) -> float | None:
    """Share of held-out documents the classifier (trained without them) labels as the model did."""
    if not held_out or not training:
        return None
    predicted = _assign(vectors, training_labels, training)
    agreed = sum(predicted[i] == labels[ids[i]] for i in held_out)
    return round(agreed / len(held_out), 4)


def _assign(vectors: np.ndarray, training_labels: list[str], training: list[int]) -> list[str]:
    """A topic for every row of ``vectors`` from a classifier fitted on the ``training`` rows."""
    classes = sorted(set(training_labels))
    if len(classes) == 1:  # nothing to separate: every document gets the one topic the model used
        return [classes[0]] * len(vectors)
    from sklearn.linear_model import LogisticRegression

    classifier = LogisticRegression(C=1.0, max_iter=1000)
    classifier.fit(vectors[training], training_labels)
    return [str(label) for label in classifier.predict(vectors)]


def _labelled_segments(catalog: Catalog, name: str, topic_of: Mapping[str, str]) -> pa.Table:
    """Every segment of ``name`` with its document's topic in ``topic``."""
    segments = catalog.rows(SEGMENTS, where=f"dataset = {quote_literal(name)}")
    topic = pa.array([topic_of.get(document) for document in segments.column("document_id").to_pylist()], pa.string())
    position = segments.schema.get_field_index("topic")
    labelled: pa.Table = segments.set_column(position, segments.schema.field("topic"), topic)
    missing = pc.sum(pc.is_null(labelled.column("topic"))).as_py()
    if missing:
        raise CatalogError(f"{missing} segments of {name!r} belong to no document of the dataset; refresh it first")
    return labelled


def _index(table: Any) -> None:
    from lancedb.index import Bitmap

    from semray.catalog.search import create_segment_indexes

    create_segment_indexes(table)
    table.create_index("topic", config=Bitmap(), replace=True)


def _draw(seed: int, document_id: str) -> str:
    return hashlib.sha256(f"{seed}:{document_id}".encode()).hexdigest()
