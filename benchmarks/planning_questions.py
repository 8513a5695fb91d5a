"""The question set of ``benchmarks/planning.py``: questions of our own, each with its gold plan.

Relational and semantic questions over the generated demo corpus, and over the medical and
Enron data of ``../shared/data`` when it is there (``question_set`` skips those without it).

>>> sorted(QuestionSet.__dataclass_fields__)
['catalog', 'cases', 'shared', 'tables']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.data import shared_data_dir
from semray.demo.corpus import write as write_demo
from semray.planner.agents import CatalogView, SourceCatalog
from semray.planner.agents.standin import GoldCase

Raw = dict[str, Any]


def _scan(catalog: CatalogView, name: str) -> Raw:
    profile = catalog.describe(name)
    return {
        "op": "scan",
        "source": {"kind": profile.kind, "path": profile.uri, "options": dict(profile.options)},
        "source_schema": {"columns": [{"name": c.name, "type": c.type} for c in profile.columns]},
    }


def _agg(keys: list[str], source: Raw, **aggs: str) -> Raw:
    return {"op": "aggregate", "keys": keys, "aggs": [{"name": k, "expr": v} for k, v in aggs.items()], "input": source}


def _filter(predicate: str, source: Raw) -> Raw:
    return {"op": "filter", "predicate": predicate, "input": source}


def _project(source: Raw, *columns: str) -> Raw:
    return {"op": "project", "exprs": [{"name": c, "expr": c} for c in columns], "input": source}


def _sort(source: Raw, column: str, descending: bool = False, limit: int | None = None) -> Raw:
    ordered = {"op": "sort", "keys": [{"column": column, "descending": descending}], "input": source}
    return ordered if limit is None else {"op": "limit", "count": limit, "input": ordered}


def _join(left: Raw, right: Raw, on: str) -> Raw:
    return {"op": "join", "left": left, "right": right, "on": on}


def demo_questions(catalog: CatalogView) -> list[tuple[str, tuple[str, ...], Raw]]:
    """Questions over the demo corpus (reviews, products, labels), each with its gold plan."""

    def reviews() -> Raw:
        return _scan(catalog, "reviews")

    def products() -> Raw:
        return _scan(catalog, "products")

    def labels() -> Raw:
        return _scan(catalog, "labels")

    def with_products() -> Raw:
        return _join(reviews(), products(), "l.product = r.product")

    def with_labels() -> Raw:
        return _join(reviews(), labels(), "l.review_id = r.review_id")

    rp, rl = ("reviews", "products"), ("reviews", "labels")
    return [
        (
            "What is the average rating of each product?",
            ("reviews",),
            _agg(["product"], reviews(), avg_rating="avg(rating)"),
        ),
        ("How many reviews does each product category have?", rp, _agg(["category"], with_products(), n="count(*)")),
        (
            "Which five products have the highest list price?",
            ("products",),
            _project(_sort(products(), "list_price", True, 5), "product", "list_price"),
        ),
        (
            "List the verified one-star reviews.",
            ("reviews",),
            _project(_filter("verified AND rating = 1", reviews()), "review_id", "review"),
        ),
        (
            "What is the average list price per brand?",
            ("products",),
            _agg(["brand"], products(), avg_price="avg(list_price)"),
        ),
        ("How many reviews carry each sentiment label?", ("labels",), _agg(["sentiment"], labels(), n="count(*)")),
        (
            "What are the lowest and highest ratings in each category?",
            rp,
            _agg(["category"], with_products(), lowest="min(rating)", highest="max(rating)"),
        ),
        (
            "Which reviews complain about delivery, however they say it?",
            ("reviews",),
            _project(
                {"op": "sem_filter", "instruction": "{review} complains about delivery", "input": reviews()},
                "review_id",
                "review",
            ),
        ),
        (
            "Classify every review by the aspect it discusses and count the reviews per aspect.",
            ("reviews",),
            _agg(
                ["label"],
                {
                    "op": "sem_classify",
                    "instruction": "The aspect this review is about: {review}",
                    "labels": ["quality", "price", "delivery", "support"],
                    "input": reviews(),
                },
                n="count(*)",
            ),
        ),
        (
            "What is the total of the ratings per brand for kitchen products?",
            rp,
            _agg(["brand"], _filter("category = 'kitchen'", with_products()), total="sum(rating)"),
        ),
        (
            "How many reviews labelled as mentioning delivery does each product have?",
            rl,
            _agg(["product"], _filter("mentions_delivery", with_labels()), n="count(*)"),
        ),
        (
            "What is the average rating of the negatively labelled reviews per aspect?",
            rl,
            _agg(["aspect"], _filter("sentiment = 'negative'", with_labels()), avg_rating="avg(rating)"),
        ),
        (
            "Among reviews rated two or less, which sound very angry (anger 4 or 5 on a 1-5 scale)?",
            ("reviews",),
            _filter(
                "anger >= 4",
                {
                    "op": "sem_map",
                    "instruction": "Rate from 1 to 5 how angry {review} sounds",
                    "output": "anger",
                    "output_type": "int",
                    "lo": 1.0,
                    "hi": 5.0,
                    "input": _filter("rating <= 2", reviews()),
                },
            ),
        ),
        (
            "Extract the defect each one-star review mentions.",
            ("reviews",),
            {
                "op": "sem_extract",
                "instruction": "The defect the review mentions: {review}",
                "fields": [{"name": "defect", "type": "text"}],
                "input": _filter("rating = 1", reviews()),
            },
        ),
        (
            "Summarise what reviewers say about each product category.",
            rp,
            {
                "op": "sem_agg",
                "instruction": "Summarise what these reviews say: {review}",
                "keys": ["category"],
                "input": with_products(),
            },
        ),
        (
            "Show the ten most recent reviews.",
            ("reviews",),
            _project(_sort(reviews(), "review_date", True, 10), "review_id", "review_date", "review"),
        ),
        (
            "How many verified reviews does each electronics product have?",
            rp,
            _agg(["product"], _filter("category = 'electronics' AND verified", with_products()), n="count(*)"),
        ),
        (
            "Rank the brands by their average review rating.",
            rp,
            _sort(_agg(["brand"], with_products(), avg_rating="avg(rating)"), "avg_rating", True),
        ),
        (
            "Which products cost less than 50, and in which category are they?",
            ("products",),
            _project(_filter("list_price < 50", products()), "product", "category"),
        ),
        (
            "Which products have more than 30 reviews?",
            ("reviews",),
            _filter("n > 30", _agg(["product"], reviews(), n="count(*)")),
        ),
        (
            "Count the reviews whose text is positive in each category.",
            rp,
            _agg(
                ["category"],
                {"op": "sem_filter", "instruction": "{review} is positive about the product", "input": with_products()},
                n="count(*)",
            ),
        ),
        (
            "What is the highest rating a review about quality got for each product, by the labels?",
            rl,
            _agg(["product"], _filter("aspect = 'quality'", with_labels()), best="max(rating)"),
        ),
    ]


def shared_questions(catalog: CatalogView) -> list[tuple[str, tuple[str, ...], Raw]]:
    """Questions over the medical and Enron data of ``../shared/data``."""
    symptoms, patients, emails = (_scan(catalog, name) for name in ("symptoms", "patients", "emails"))
    joined = _join(symptoms, patients, "l.patient_id = r.patient_id")
    return [
        (
            "How many patients have each text diagnosis?",
            ("patients",),
            _agg(["text_diagnosis"], patients, n="count(*)"),
        ),
        (
            "What is the average age of the patients per smoking history?",
            ("patients",),
            _agg(["smoking_history"], patients, avg_age="avg(age)"),
        ),
        (
            "Which symptom descriptions of current smokers suggest an infection?",
            ("symptoms", "patients"),
            _project(
                {
                    "op": "sem_filter",
                    "instruction": "{symptoms} suggest an infection",
                    "input": _filter("smoking_history = 'Current'", joined),
                },
                "symptom_id",
                "symptoms",
            ),
        ),
        (
            "Classify the symptom texts as respiratory, skin, digestive or other and count each class by gender.",
            ("symptoms", "patients"),
            _agg(
                ["gender", "label"],
                {
                    "op": "sem_classify",
                    "instruction": "The body system these symptoms concern: {symptoms}",
                    "labels": ["respiratory", "skin", "digestive", "other"],
                    "input": joined,
                },
                n="count(*)",
            ),
        ),
        (
            "Which emails refer to a fraudulent scheme such as Raptor or Chewco, and not by quoting the news?",
            ("emails",),
            _project(
                {
                    "op": "sem_filter",
                    "instruction": "{text} does not quote a news article",
                    "input": {
                        "op": "sem_filter",
                        "instruction": "{text} refers to a fraudulent scheme such as Raptor, Deathstar or Chewco",
                        "input": emails,
                    },
                },
                "path",
            ),
        ),
        (
            "Extract the sender and subject of the emails that mention the Raptor entities.",
            ("emails",),
            {
                "op": "sem_extract",
                "instruction": "The sender and subject of this email: {text}",
                "fields": [{"name": "sender", "type": "text"}, {"name": "subject", "type": "text"}],
                "input": {"op": "sem_filter", "instruction": "{text} mentions the Raptor entities", "input": emails},
            },
        ),
    ]


@dataclass(frozen=True, slots=True)
class QuestionSet:
    cases: tuple[GoldCase, ...]
    catalog: SourceCatalog
    shared: bool
    tables: dict[str, str]


def question_set(folder: Path, *, shared: bool = True, limit: int | None = None) -> QuestionSet:
    """The gold cases and the catalog they read (shared data only when present and wanted)."""
    tables = {name: str(path) for name, path in write_demo(folder / "demo", 400).items()}
    data = shared_data_dir()
    extra = {
        "symptoms": data / "medical" / "text_symptoms_data.csv",
        "patients": data / "medical" / "patient_data_with_labels.csv",
        "emails": data / "enron" / "emails",
    }
    use_shared = shared and all(path.exists() for path in extra.values())
    if use_shared:
        tables.update({name: str(path) for name, path in extra.items()})
    catalog = SourceCatalog.from_paths(tables)
    found = demo_questions(catalog) + (shared_questions(catalog) if use_shared else [])
    cases = tuple(GoldCase(q, names, {"version": 1, "plan": plan}) for q, names, plan in found)
    return QuestionSet(cases[:limit] if limit else cases, catalog, use_shared, tables)
