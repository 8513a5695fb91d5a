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
import re
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import lotus
import pandas as pd
from lotus.models import LM, SentenceTransformersRM
from lotus.types import CascadeArgs

Step = Callable[[], dict[str, Any]]


def read_stats(base_url: str) -> dict[str, Any]:
    """The simulator's /stats now (its counters are cumulative; the benchmark takes differences per step)."""
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/stats", timeout=30) as response:  # 127.0.0.1 only
        return json.loads(response.read())


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
def match_label(answer: Any, labels: list[str]) -> str | None:
    """The label an answer names: exact (normalised), else the longest label it contains."""
    norm = " ".join(re.findall(r"[a-z0-9]+", str(answer).casefold()))
    by_norm = {" ".join(re.findall(r"[a-z0-9]+", label.casefold())): label for label in labels}
    if norm in by_norm:
        return by_norm[norm]
    found = [label for key, label in by_norm.items() if key and key in norm]
    return max(found, key=len) if found else None


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


WORKLOADS = {"enron": enron_steps, "medical": medical_steps, "scaling": scaling_steps}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    answer: dict[str, Any] = {"steps": {}, "seconds": {}, "unsupported": {}, "errors": {}, "notes": {}}
    started = time.perf_counter()
    cascade = configure(spec)
    answer["seconds"]["startup"] = round(time.perf_counter() - started, 2)
    answer["version"] = "lotus-ai " + metadata.version("lotus-ai")
    if spec["config"] == "cheap":
        answer["notes"]["cascade"] = "sem_filter/sem_join cascade on the helper (small) model; map/extract on large"
    for name, step in WORKLOADS[spec["workload"]](spec, cascade).items():
        if name in spec.get("skip_steps", ()):
            continue
        began = time.perf_counter()
        try:
            answer["steps"][name] = step()
        except Exception as error:  # a failed step is a result to report; the next step still runs
            traceback.print_exc()
            answer["errors"][name] = f"{type(error).__name__}: {error}"
        answer["seconds"][name] = round(time.perf_counter() - began, 2)
        answer.setdefault("stats_after", {})[name] = read_stats(spec["base_url"])
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
