"""LOTUS's side of a workload, run by benchmarks/.venvs/lotus/bin/python: read a spec, print JSON.

    benchmarks/.venvs/lotus/bin/python benchmarks/peers/lotus_runner.py SPEC.json

Self-contained (LOTUS's environment has neither semray nor the benchmark harness). All
model traffic goes through litellm to ``spec["base_url"]`` (the simulator on 127.0.0.1).

Configs: ``plain`` — every operator on the large model. ``cheap`` — the small model as LOTUS's
helper LM with ``CascadeArgs`` (recall and precision targets 0.9) on every ``sem_filter`` and
``sem_join``; ``sem_map`` / ``sem_extract`` have no cascade in LOTUS, so they stay on the large
model. LOTUS has no classify operator: classification is a ``sem_map`` asking for one of the
labels, whose answer is matched to a label.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import lotus
import pandas as pd
from lotus.models import LM, SentenceTransformersRM
from lotus.types import CascadeArgs
from peer_common import Step, Unsupported, first_number, match_label, run_steps, without_answer_format


def configure(spec: dict[str, Any]) -> CascadeArgs | None:
    common = {"api_base": spec["base_url"], "api_key": "unused-simulator-key", "max_batch_size": 16, "max_tokens": 256}
    large = LM(model="openai/" + spec["models"]["large"], **common)
    settings: dict[str, Any] = {"lm": large, "enable_cache": False}
    cascade = None
    if spec["config"] == "cheap":
        settings["helper_lm"] = LM(model="openai/" + spec["models"]["small"], **common)
        settings["rm"] = SentenceTransformersRM(model=spec["embedding_model_path"], device="cpu")
        try:
            from lotus.vector_store import FaissVS

            settings["vs"] = FaissVS()
        except ImportError:
            pass
        cascade = CascadeArgs(recall_target=0.9, precision_target=0.9, sampling_percentage=0.5, failure_probability=0.2)
    lotus.settings.configure(**settings)
    return cascade


def _filter(frame: pd.DataFrame, instruction: str, cascade: CascadeArgs | None) -> pd.DataFrame:
    # LOTUS's cascade samples rows with .loc on positions: an index with gaps (after an earlier
    # filter) raises KeyError, so every filter gets a fresh 0..n-1 index.
    frame = frame.reset_index(drop=True)
    if cascade is None:
        return frame.sem_filter(instruction)
    return frame.sem_filter(instruction, cascade_args=cascade)


# enron ---------------------------------------------------------------------------------------
def enron_steps(spec: dict[str, Any], cascade: CascadeArgs | None) -> dict[str, Step]:
    text = spec["instructions"]

    def pipeline() -> dict[str, Any]:
        emails = pd.read_json(spec["inputs"]["emails"], lines=True)
        kept = _filter(emails, "{text}\n" + text["fraud"], cascade)
        kept = _filter(kept, "{text}\n" + text["not_news"], cascade)
        extracted = kept.sem_extract(["text"], {"sender": text["sender"], "subject": text["subject"]})
        rows = extracted.to_dict("records")
        return {
            "kept": [row["filename"] for row in rows],
            "extracted": {
                row["filename"]: {"sender": row.get("sender"), "subject": row.get("subject")} for row in rows
            },
        }

    return {"pipeline": pipeline}


# medical -------------------------------------------------------------------------------------


def medical_steps(spec: dict[str, Any], cascade: CascadeArgs | None) -> dict[str, Step]:
    text, labels = spec["instructions"], spec["labels"]
    instruction = (
        "{symptoms}\n" + text["classify"] + ". Answer with exactly one of these diagnoses: " + ", ".join(labels) + "."
    )

    def classified(frame: pd.DataFrame) -> pd.DataFrame:
        out = frame.sem_map(instruction, suffix="raw_diagnosis")
        out["diagnosis"] = [match_label(value, labels) for value in out["raw_diagnosis"]]
        return out

    def classify() -> dict[str, Any]:
        out = classified(pd.read_json(spec["inputs"]["symptoms"], lines=True))
        return {"diagnosis": {str(k): v for k, v in zip(out["symptom_id"], out["diagnosis"], strict=False)}}

    def infection() -> dict[str, Any]:
        symptoms = pd.read_json(spec["inputs"]["symptoms"], lines=True)
        kept = _filter(symptoms, "{symptoms}\n" + text["infection"], cascade)
        return {"infection": [str(v) for v in kept["symptom_id"]]}

    def groupby() -> dict[str, Any]:
        symptoms = pd.read_json(spec["inputs"]["symptoms"], lines=True)
        patients = pd.read_json(spec["inputs"]["patients"], lines=True)
        joined = symptoms.merge(patients, on="patient_id")
        grouped = classified(joined).groupby("diagnosis").agg(n=("symptom_id", "count"), avg_age=("age", "mean"))
        return {
            "groups": {str(k): int(v) for k, v in grouped["n"].items()},
            "avg_age": {str(k): float(v) for k, v in grouped["avg_age"].items()},
        }

    def self_join() -> dict[str, Any]:
        sample = pd.read_json(spec["inputs"]["join_sample"], lines=True)[["symptom_id", "symptoms"]]
        left = sample.rename(columns={"symptom_id": "id_left", "symptoms": "symptoms_left"})
        right = sample.rename(columns={"symptom_id": "id_right", "symptoms": "symptoms_right"})
        join_instruction = "Patient 1: {symptoms_left}\nPatient 2: {symptoms_right}\n" + text["same"]
        if cascade is None:
            joined = left.sem_join(right, join_instruction)
        else:
            joined = left.sem_join(right, join_instruction, cascade_args=cascade)
        return {"same_pairs": [[int(a), int(b)] for a, b in zip(joined["id_left"], joined["id_right"], strict=False)]}

    return {"classify": classify, "infection": infection, "groupby": groupby, "self_join": self_join}


def scaling_steps(spec: dict[str, Any], cascade: CascadeArgs | None) -> dict[str, Step]:
    def scan_filter() -> dict[str, Any]:
        frame = pd.read_json(spec["inputs"]["tickets"], lines=True)
        kept = _filter(frame, "{text}\n" + spec["instructions"]["filter"], cascade)
        return {"kept": [str(v) for v in kept["ticket_id"]]}

    return {"filter": scan_filter}


def reviews_steps(spec: dict[str, Any], cascade: CascadeArgs | None) -> dict[str, Step]:
    """The reviews workload as a LOTUS user writes it. LOTUS has no LIMIT operator and no SQL: a
    LIMIT query filters (or joins) every row and keeps the first k (``head``); the SQL queries are
    pandas over ``sem_filter`` / ``sem_map`` columns. Its cascade is the ``cheap`` config's
    ``CascadeArgs`` on the helper model; the ``plain`` config has no helper model and so no
    cascade. The self-join is ``sem_join``, which asks every pair (n x n)."""
    text, limits = spec["instructions"], spec["limits"]
    complaint = "{text}\n" + without_answer_format(text["complaint"])
    shipping = "{text}\n" + without_answer_format(text["shipping"])

    def read(name: str) -> pd.DataFrame:
        return pd.read_json(spec["inputs"][name], lines=True)

    def kept(frame: pd.DataFrame, k: int) -> dict[str, Any]:
        return {"kept": [str(v) for v in frame.head(k)["review_id"]]}

    def join(left: pd.DataFrame, right: pd.DataFrame, instruction: str) -> pd.DataFrame:
        if cascade is None:
            return left.sem_join(right, instruction)
        return left.sem_join(right, instruction, cascade_args=cascade)

    def filter_limit() -> dict[str, Any]:
        return kept(_filter(read("reviews"), complaint, cascade), limits["filter_limit"])

    def cascade_limit() -> dict[str, Any]:
        if cascade is None:
            raise Unsupported("the plain config has no helper model; lotus (cheap) runs this query as LOTUS's cascade")
        return kept(_filter(read("reviews"), complaint, cascade), limits["cascade_limit"])

    def chain_limit() -> dict[str, Any]:
        first = _filter(read("reviews"), complaint, cascade)
        return kept(_filter(first, shipping, cascade), limits["chain_limit"])

    def family_join(k: int | None) -> dict[str, Any]:
        sample = read("join_sample")
        left = sample.rename(columns={"review_id": "id_left", "text": "text_left"})[["id_left", "text_left"]]
        right = sample.rename(columns={"review_id": "id_right", "text": "text_right"})[["id_right", "text_right"]]
        instruction = text["same_family"].replace("{l.text}", "{text_left}").replace("{r.text}", "{text_right}")
        joined = join(left, right, instruction)
        if k is not None:
            joined = joined.head(k)
        return {"pairs": [[str(a), str(b)] for a, b in zip(joined["id_left"], joined["id_right"], strict=False)]}

    def self_join() -> dict[str, Any]:
        return family_join(None)

    def self_join_limit() -> dict[str, Any]:
        return family_join(limits["self_join_limit"])

    def category_join() -> dict[str, Any]:
        left = read("category_sample")[["review_id", "text"]]
        right = read("categories")[["description"]]
        instruction = text["category"].replace("{l.text}", "{text}").replace("{r.description}", "{description}")
        joined = join(left, right, instruction)
        return {"pairs": [[str(a), str(b)] for a, b in zip(joined["review_id"], joined["description"], strict=False)]}

    def sql_aggregate() -> dict[str, Any]:
        frame = read("sql_sample")
        complained = set(_filter(frame, complaint, cascade)["review_id"])
        frame["complaint"] = [1.0 if v in complained else 0.0 for v in frame["review_id"]]
        stars = frame.sem_map("{text}\n" + text["stars"] + "? Answer with one whole number from 1 to 5.", suffix="raw")
        frame["stars"] = [first_number(v) for v in stars["raw"]]
        grouped = frame.groupby("brand").agg(share=("complaint", "mean"), stars=("stars", "mean"))
        return {
            "complaint_share": {str(k): float(v) for k, v in grouped["share"].items()},
            "stars": {str(k): float(v) for k, v in grouped["stars"].items()},
        }

    def sql_group_by() -> dict[str, Any]:
        moods = spec["moods"]
        frame = read("sql_sample")
        instruction = "{text}\n" + text["mood"] + ". Answer with exactly one of: " + ", ".join(moods) + "."
        out = frame.sem_map(instruction, suffix="raw")
        out["mood"] = [match_label(v, moods) for v in out["raw"]]
        return {"mood_counts": {str(k): int(v) for k, v in out.groupby("mood").size().items()}}

    return {
        "filter_limit": filter_limit,
        "cascade_limit": cascade_limit,
        "chain_limit": chain_limit,
        "self_join": self_join,
        "self_join_limit": self_join_limit,
        "category_join": category_join,
        "sql_aggregate": sql_aggregate,
        "sql_group_by": sql_group_by,
    }


WORKLOADS = {"enron": enron_steps, "medical": medical_steps, "scaling": scaling_steps, "reviews": reviews_steps}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    started = time.perf_counter()
    cascade = configure(spec)
    notes = {}
    if spec["config"] == "cheap":
        notes["cascade"] = "sem_filter/sem_join cascade on the helper (small) model; map/extract on large"
    if spec["workload"] == "reviews":
        notes["limits"] = "no LIMIT operator: a LIMIT query filters (or joins) every row, then keeps the first k"
        notes["sql"] = "no SQL: the aggregates are pandas over sem_filter / sem_map columns"
        notes["wording"] = (
            "the complaint filter's closing 'Answer yes or no.' is left out: LOTUS asks for True or False "
            "and keeps every row whose Yes/No reply it cannot parse (with it, every row passed)"
        )
    steps = WORKLOADS[spec["workload"]](spec, cascade)
    return run_steps(spec, steps, "lotus-ai " + metadata.version("lotus-ai"), started, notes)


if __name__ == "__main__":
    sys.exit(main())
