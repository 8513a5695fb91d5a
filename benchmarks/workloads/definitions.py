"""The workloads: inputs written for every system, instructions, simulator tasks and the truth.

A workload is prepared once into a scratch folder: its inputs as JSON Lines (read by semray,
pandas and Palimpzest alike), a simulator config whose tasks recognise the workload's
instructions, and the truth the answers are scored against. The instruction texts are the
same for every system; each system wraps them in its own prompt.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.serving.simulator.config import ModelProfile, SimulatorConfig, TaskSpec

SMALL_MODEL = "gpt-4o-mini"
LARGE_MODEL = "gpt-4o"
"""The simulated tiers are served under these names so that every peer's built-in model slots
(Palimpzest's in particular) reach them unchanged; no real OpenAI model is called."""

FRAUD_SCHEMES = ("raptor", "deathstar", "chewco", "fat boy")
INFECTIONS = (
    "urinary tract infection",
    "impetigo",
    "pneumonia",
    "malaria",
    "fungal infection",
    "common cold",
    "dengue",
    "chicken pox",
    "typhoid",
)

ENRON_INSTRUCTIONS = {
    "fraud": 'The email refers to a fraudulent scheme (i.e., "Raptor", "Deathstar", "Chewco", and/or "Fat Boy")',
    "not_news": "The email is not quoting from a news article or an article written by someone outside of Enron",
    "sender": "The email address of the sender",
    "subject": "The subject of the email",
}
MEDICAL_INSTRUCTIONS = {
    "classify": "The most likely diagnosis of the patient given these symptoms",
    "infection": "The symptoms suggest an infection",
    "same": "Both patients' symptoms point to the same diagnosis",
}


def model_profiles(latency_scale: float = 1.0) -> dict[str, ModelProfile]:
    """The two simulated tiers: a cheap, less accurate small model and an expensive accurate large one.

    Prices are those of the models whose names they carry (USD per 1M tokens); latencies are
    a fixed part plus a per-token part, scaled by ``latency_scale`` (0: answer at once).
    """
    return {
        SMALL_MODEL: ModelProfile(
            error_rate=0.12,
            context_length=16384,
            latency_base_s=0.02 * latency_scale,
            latency_per_token_s=0.00002 * latency_scale,
            max_concurrency=16,
            price_in_per_million=0.15,
            price_out_per_million=0.6,
            description="simulated small tier",
        ),
        LARGE_MODEL: ModelProfile(
            error_rate=0.03,
            context_length=16384,
            latency_base_s=0.08 * latency_scale,
            latency_per_token_s=0.00005 * latency_scale,
            max_concurrency=16,
            price_in_per_million=2.5,
            price_out_per_million=10.0,
            description="simulated large tier",
        ),
    }


@dataclass(frozen=True)
class PreparedWorkload:
    """Everything a run needs: the spec every runner reads (less system fields) and the truth."""

    name: str
    simulator_config: Path
    spec: dict[str, Any]
    truth: dict[str, Any] = field(default_factory=dict)


# enron ---------------------------------------------------------------------------------------
def enron_truth(labels: Mapping[str, list[dict[str, str]]]) -> dict[str, Any]:
    positives = {name: answers for name, answers in labels.items() if answers}
    return {"positives": sorted(positives), "extractions": positives}


def enron_filter_labels(text: str, positive: bool) -> tuple[bool, bool]:
    """Per-filter truths consistent with the one label the data has (their conjunction).

    The data marks only emails that mention a scheme AND do not quote outside news. Filter 1's
    truth is "names a scheme, or is a positive"; filter 2's is "a positive, or names no scheme":
    their conjunction is exactly the positive label, and each filter alone has a plausible truth.

    >>> enron_filter_labels("about Raptor, from the WSJ", positive=False)
    (True, False)
    """
    lowered = text.casefold()
    mentions = positive or any(re.search(rf"\b{scheme}\b", lowered) for scheme in FRAUD_SCHEMES)
    return mentions, positive or not mentions


def prepare_enron(data: Path, out: Path, seed: int, latency_scale: float) -> PreparedWorkload:
    labels: dict[str, list[dict[str, str]]] = json.loads((data / "labels.json").read_text(encoding="utf-8"))
    rows = []
    for path in sorted((data / "emails").glob("*.txt")):
        rows.append({"filename": path.name, "text": path.read_text(encoding="utf-8", errors="replace")})
    out.mkdir(parents=True, exist_ok=True)
    inputs = out / "emails.jsonl"
    _write_jsonl(inputs, rows)
    label_rows = []
    for row in rows:
        answers = labels.get(row["filename"], [])
        fraud, not_news = enron_filter_labels(row["text"], bool(answers))
        first = answers[0] if answers else {}
        label_rows.append(
            {
                "filename": row["filename"],
                "text": row["text"],
                "fraud": "true" if fraud else "false",
                "not_news": "true" if not_news else "false",
                "sender": first.get("sender"),
                "subject": first.get("subject"),
            }
        )
    tasks = (
        TaskSpec(
            name="fraud",
            kind="filter",
            label_column="fraud",
            true_values=("true",),
            keywords=("fraudulent scheme", "raptor", "deathstar", "chewco", "fat boy"),
        ),
        TaskSpec(
            name="not_news",
            kind="filter",
            label_column="not_news",
            true_values=("true",),
            keywords=("quoting", "news article", "outside of enron"),
        ),
        TaskSpec(
            name="sender_subject",
            kind="extract",
            fields={"sender": "sender", "subject": "subject"},
            keywords=("sender", "subject"),
        ),
    )
    config = SimulatorConfig.from_labels(
        pa.Table.from_pylist(label_rows),
        key_column="filename",
        text_columns=["text"],
        tasks=tasks,
        dataset="enron",
        models=model_profiles(latency_scale),
        seed=seed,
    )
    config_path = out / "simulator.json"
    config.save(config_path)
    spec = {"workload": "enron", "inputs": {"emails": str(inputs)}, "instructions": ENRON_INSTRUCTIONS}
    return PreparedWorkload("enron", config_path, spec, enron_truth(labels))


# scaling -------------------------------------------------------------------------------------
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo", "gu", "hi", "jo", "be", "xa")
SCALING_INSTRUCTIONS = {"filter": "The ticket is urgent"}


def generated_tickets(rows: int, seed: int) -> list[dict[str, Any]]:
    """``rows`` unique nonsense ticket texts (so the simulator tells every row apart), 30% urgent.

    >>> [sorted(row) for row in generated_tickets(2, seed=1)]
    [['text', 'ticket_id', 'urgent'], ['text', 'ticket_id', 'urgent']]
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    tickets: list[dict[str, Any]] = []
    while len(tickets) < rows:
        text = " ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(16))
        if text in seen:
            continue
        seen.add(text)
        urgent = "true" if rng.random() < 0.3 else "false"
        tickets.append({"ticket_id": f"T{len(tickets):07d}", "text": text, "urgent": urgent})
    return tickets


def prepare_scaling(rows: int, out: Path, seed: int) -> PreparedWorkload:
    """A generated corpus of ``rows`` tickets and a zero-latency simulator whose truth is their label."""
    tickets = generated_tickets(rows, seed)
    out.mkdir(parents=True, exist_ok=True)
    inputs = out / "tickets.jsonl"
    _write_jsonl(inputs, [{"ticket_id": t["ticket_id"], "text": t["text"]} for t in tickets])
    tasks = (
        TaskSpec(name="urgent", kind="filter", label_column="urgent", true_values=("true",), keywords=("urgent",)),
    )
    config = SimulatorConfig.from_labels(
        pa.Table.from_pylist(tickets),
        key_column="ticket_id",
        text_columns=["text"],
        tasks=tasks,
        dataset="tickets",
        models=model_profiles(latency_scale=0.0),
        seed=seed,
    )
    config_path = out / "simulator.json"
    config.save(config_path)
    truth = {"urgent": [t["ticket_id"] for t in tickets if t["urgent"] == "true"], "rows": rows}
    spec = {"workload": "scaling", "inputs": {"tickets": str(inputs)}, "instructions": SCALING_INSTRUCTIONS}
    return PreparedWorkload(f"scaling-{rows}", config_path, spec, truth)


# medical -------------------------------------------------------------------------------------
def prepare_medical(
    data: Path, out: Path, seed: int, latency_scale: float, join_rows: int, rows: int | None = None
) -> PreparedWorkload:
    """The medical workload over the first ``rows`` symptom texts (all by default)."""
    symptoms = _read_csv(data / "text_symptoms_data.csv")[:rows]
    patients = _read_csv(data / "patient_data_with_labels.csv")
    by_patient = {row["patient_id"]: row for row in patients}
    diagnoses = sorted({row["text_diagnosis"] for row in patients if row["text_diagnosis"] != "none"})
    out.mkdir(parents=True, exist_ok=True)
    texts: list[dict[str, Any]] = [
        {"symptom_id": int(r["symptom_id"]), "patient_id": int(r["patient_id"]), "symptoms": r["symptoms"]}
        for r in symptoms
    ]
    patient_rows = [
        {
            "patient_id": int(r["patient_id"]),
            "age": int(r["age"]),
            "gender": r["gender"],
            "smoking_history": r["smoking_history"],
        }
        for r in patients
    ]
    _write_jsonl(out / "symptoms.jsonl", texts)
    _write_jsonl(out / "patients.jsonl", patient_rows)
    diagnosis: dict[int, str] = {
        int(row["symptom_id"]): by_patient[str(row["patient_id"])]["text_diagnosis"] for row in texts
    }
    sample = join_sample(diagnosis, join_rows, seed)
    _write_jsonl(out / "join_sample.jsonl", [row for row in texts if row["symptom_id"] in set(sample)])
    label_rows = [
        {"symptom_id": row["symptom_id"], "symptoms": row["symptoms"], "text_diagnosis": diagnosis[row["symptom_id"]]}
        for row in texts
    ]
    tasks = (
        TaskSpec(
            name="diagnosis",
            kind="label",
            label_column="text_diagnosis",
            choices=tuple(diagnoses),
            keywords=("most likely diagnosis", "diagnoses"),
        ),
        TaskSpec(
            name="infection",
            kind="filter",
            label_column="text_diagnosis",
            true_values=INFECTIONS,
            keywords=("suggest an infection",),
        ),
        TaskSpec(
            name="same_diagnosis",
            kind="pair",
            label_column="text_diagnosis",
            keywords=("same diagnosis", "point to"),
            null_values=("none",),
        ),
    )
    config = SimulatorConfig.from_labels(
        pa.Table.from_pylist(label_rows),
        key_column="symptom_id",
        text_columns=["symptoms"],
        tasks=tasks,
        dataset="symptoms",
        models=model_profiles(latency_scale),
        seed=seed,
    )
    config_path = out / "simulator.json"
    config.save(config_path)
    ages = {int(r["patient_id"]): int(r["age"]) for r in patients}
    truth = {
        "diagnosis": {str(k): v for k, v in diagnosis.items()},
        "infection": sorted(str(k) for k, v in diagnosis.items() if v in INFECTIONS),
        "groups": dict(Counter(diagnosis.values())),
        "avg_age": _average_age(texts, diagnosis, ages),
        "same_pairs": sorted(same_pairs({k: diagnosis[k] for k in sample})),
    }
    spec = {
        "workload": "medical",
        "inputs": {
            "symptoms": str(out / "symptoms.jsonl"),
            "patients": str(out / "patients.jsonl"),
            "join_sample": str(out / "join_sample.jsonl"),
        },
        "instructions": MEDICAL_INSTRUCTIONS,
        "labels": diagnoses,
    }
    return PreparedWorkload("medical", config_path, spec, truth)


def join_sample(diagnosis: Mapping[int, str], rows: int, seed: int) -> list[int]:
    """``rows`` symptom ids, two from each of ``rows // 2`` seeded-random diagnoses (so the self-join has positives)."""
    rng = random.Random(seed)
    by_class: dict[str, list[int]] = {}
    for key in sorted(diagnosis):
        by_class.setdefault(diagnosis[key], []).append(key)
    classes = sorted(by_class)
    rng.shuffle(classes)
    chosen: list[int] = []
    for name in classes:
        members = list(by_class[name])
        rng.shuffle(members)
        chosen += members[: min(2, rows - len(chosen))]
        if len(chosen) >= rows:
            break
    return sorted(chosen)


def same_pairs(diagnosis: Mapping[int, str]) -> set[tuple[str, str]]:
    """Unordered pairs of distinct rows with the same (non-null) diagnosis."""
    keys = sorted(diagnosis)
    found = set()
    for i, left in enumerate(keys):
        for right in keys[i + 1 :]:
            if diagnosis[left] == diagnosis[right] and diagnosis[left] != "none":
                a, b = str(left), str(right)
                found.add((a, b) if a <= b else (b, a))
    return found


def _average_age(
    texts: list[dict[str, Any]], diagnosis: Mapping[int, str], ages: Mapping[int, int]
) -> dict[str, float]:
    sums: dict[str, list[int]] = {}
    for row in texts:
        sums.setdefault(diagnosis[row["symptom_id"]], []).append(ages[row["patient_id"]])
    return {name: round(sum(values) / len(values), 2) for name, values in sums.items()}


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
