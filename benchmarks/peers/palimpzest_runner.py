"""Palimpzest's side of a workload, run by benchmarks/.venvs/palimpzest/bin/python: read a spec, print JSON.

    benchmarks/.venvs/palimpzest/bin/python benchmarks/peers/palimpzest_runner.py SPEC.json

Self-contained (Palimpzest's environment has neither semray nor the benchmark harness).

How its model traffic reaches the simulator on 127.0.0.1: Palimpzest 0.9.0's custom-endpoint
path (``hosted_vllm/...``) raises a TypeError that it swallows, so every answer would be
empty. Instead its built-in OpenAI slots are used: litellm's ``model_alias_map`` renames
``openai/gpt-4o-2024-08-06`` and ``openai/gpt-4o-mini-2024-07-18`` to the simulator's
``gpt-4o`` / ``gpt-4o-mini`` and ``OPENAI_BASE_URL`` points litellm at the simulator; the
API key is a dummy. No OpenAI host is ever contacted.

Configs: ``plain`` — only the large model available, ``MaxQuality`` policy. ``cheap`` — both
models available and ``MinCostAtFixedQuality(min_quality=0.8)``. RAG reduction is off in both:
it calls an OpenAI embedding model, which the simulator does not serve.
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from peer_common import Step, match_label, run_steps


def import_palimpzest() -> Any:
    """Import Palimpzest 0.9.0 on Python 3.11, where it needs ``typing.TypeAliasType`` (3.12+).

    The name is lent from typing_extensions to palimpzest's own modules only, through a
    module ``__getattr__`` on ``typing``: set as a plain attribute, it makes typing_extensions
    take 3.12 code paths for every library (pydantic's and jsonschema's TypeVars then fail).
    """
    import typing_extensions

    if not hasattr(typing, "TypeAliasType"):

        def lend(name: str) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if name == "TypeAliasType" and caller.startswith("palimpzest"):
                return typing_extensions.TypeAliasType
            raise AttributeError(f"module 'typing' has no attribute {name!r}")

        typing.__getattr__ = lend  # type: ignore[attr-defined]
    import palimpzest

    return palimpzest


def configure(spec: dict[str, Any]) -> Callable[[], Any]:
    """A factory of fresh configs: Palimpzest mutates a config it runs with (a second run then fails)."""
    os.environ["OPENAI_API_KEY"] = "unused-simulator-key"
    os.environ["OPENAI_BASE_URL"] = spec["base_url"]
    os.environ["OPENAI_API_BASE"] = spec["base_url"]
    import litellm

    pz = import_palimpzest()
    litellm.api_base = spec["base_url"]
    litellm.model_alias_map = {
        pz.Model.GPT_4o.value: "openai/" + spec["models"]["large"],
        pz.Model.GPT_4o_MINI.value: "openai/" + spec["models"]["small"],
    }
    common: dict[str, Any] = {
        "allow_rag_reduction": False,
        "progress": False,
        "verbose": False,
        "max_workers": 16,
        "join_parallelism": 16,
    }
    accept_bare_single_field_answers(pz)
    if spec["config"] == "cheap":
        return lambda: pz.QueryProcessorConfig(
            available_models=[pz.Model.GPT_4o, pz.Model.GPT_4o_MINI],
            policy=pz.MinCostAtFixedQuality(min_quality=0.8),
            **common,
        )
    return lambda: pz.QueryProcessorConfig(available_models=[pz.Model.GPT_4o], policy=pz.MaxQuality(), **common)


def accept_bare_single_field_answers(pz: Any) -> None:
    """Read ``ANSWER: malaria`` as ``{"diagnosis": "malaria"}`` when one field is asked for.

    Palimpzest asks for a JSON object after ``ANSWER:``; the simulator writes a label task's
    answer bare (only extraction tasks come back as JSON), so without this every classification
    would parse to None. A real model would follow the JSON instruction: this adapts to the
    simulator, it does not help Palimpzest over a model.
    """
    from palimpzest.query.generators.generators import Generator

    original = Generator._check_convert_answer_text

    def check(self: Any, answer_text: str, fields: dict[str, Any], throw_exception: bool = False) -> Any:
        parsed = original(self, answer_text, fields, throw_exception)
        if parsed is None and len(fields) == 1:
            value = answer_text.strip().strip("`").strip()
            return self._prepare_field_answers({next(iter(fields)): value}, fields)
        return parsed

    Generator._check_convert_answer_text = check


def _records(result: Any) -> list[dict[str, Any]]:
    frame = result.to_df()
    return frame.to_dict("records")


def _dataset(name: str, rows: list[dict[str, Any]]) -> Any:
    import palimpzest as pz
    import pandas as pd

    return pz.MemoryDataset(id=name, vals=pd.DataFrame(rows))


def _read(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


# enron ---------------------------------------------------------------------------------------
def enron_steps(spec: dict[str, Any], config: Any) -> dict[str, Step]:
    text = spec["instructions"]

    def pipeline() -> dict[str, Any]:
        emails = _dataset("enron", _read(spec["inputs"]["emails"]))
        plan = emails.sem_filter(text["fraud"], depends_on=["text"])
        plan = plan.sem_filter(text["not_news"], depends_on=["text"])
        plan = plan.sem_map(
            [
                {"name": "sender", "type": str, "desc": text["sender"]},
                {"name": "subject", "type": str, "desc": text["subject"]},
            ],
            depends_on=["text"],
        )
        rows = _records(plan.run(config()))
        return {
            "kept": [row["filename"] for row in rows],
            "extracted": {r["filename"]: {"sender": r.get("sender"), "subject": r.get("subject")} for r in rows},
        }

    return {"pipeline": pipeline}


# medical -------------------------------------------------------------------------------------


def medical_steps(spec: dict[str, Any], config: Any) -> dict[str, Step]:
    import palimpzest as pz
    import pandas as pd

    text, labels = spec["instructions"], spec["labels"]
    field = {
        "name": "diagnosis",
        "type": str,
        "desc": text["classify"] + ". Exactly one of these diagnoses: " + ", ".join(labels),
    }

    def classify() -> dict[str, Any]:
        plan = _dataset("symptoms", _read(spec["inputs"]["symptoms"])).sem_map([field], depends_on=["symptoms"])
        rows = _records(plan.run(config()))
        return {"diagnosis": {str(r["symptom_id"]): match_label(r.get("diagnosis"), labels) for r in rows}}

    def infection() -> dict[str, Any]:
        plan = _dataset("symptoms", _read(spec["inputs"]["symptoms"])).sem_filter(
            text["infection"], depends_on=["symptoms"]
        )
        return {"infection": [str(r["symptom_id"]) for r in _records(plan.run(config()))]}

    def groupby() -> dict[str, Any]:
        # Palimpzest has no relational join: the patient table is joined in pandas first; the
        # classification and the group-by count/average run in Palimpzest.
        symptoms = pd.DataFrame(_read(spec["inputs"]["symptoms"]))
        patients = pd.DataFrame(_read(spec["inputs"]["patients"]))
        joined = symptoms.merge(patients, on="patient_id")[["symptom_id", "symptoms", "age"]]
        plan = pz.MemoryDataset(id="joined", vals=joined).sem_map([field], depends_on=["symptoms"])
        classified = _records(plan.run(config()))
        for row in classified:
            row["diagnosis"] = match_label(row.get("diagnosis"), labels) or "unknown"
        grouped = pz.MemoryDataset(
            id="classified", vals=pd.DataFrame(classified)[["symptom_id", "age", "diagnosis"]]
        ).groupby(GroupBySig(["diagnosis"], ["count", "average"], ["symptom_id", "age"]))
        rows = _records(grouped.run(config()))
        count_key = next(k for k in rows[0] if k.startswith("count")) if rows else "count(symptom_id)"
        avg_key = next(k for k in rows[0] if k.startswith("average")) if rows else "average(age)"
        return {
            "groups": {str(r["diagnosis"]): int(r[count_key]) for r in rows},
            "avg_age": {str(r["diagnosis"]): float(r[avg_key]) for r in rows},
        }

    def self_join() -> dict[str, Any]:
        sample = _read(spec["inputs"]["join_sample"])
        left = _dataset("left", [{"id_left": r["symptom_id"], "symptoms_left": r["symptoms"]} for r in sample])
        right = _dataset("right", [{"id_right": r["symptom_id"], "symptoms_right": r["symptoms"]} for r in sample])
        plan = left.sem_join(right, text["same"])
        try:
            rows = _records(plan.run(config()))
        except Exception as error:
            if "404" not in str(error):
                raise
            raise RuntimeError(
                "Palimpzest's chosen join plan embeds rows with OpenAI's text-embedding-3-small; "
                "the simulator serves no embeddings (HTTP 404 from 127.0.0.1)"
            ) from error
        return {"same_pairs": [[int(r["id_left"]), int(r["id_right"])] for r in rows]}

    from palimpzest import GroupBySig

    return {"classify": classify, "infection": infection, "groupby": groupby, "self_join": self_join}


def scaling_steps(spec: dict[str, Any], config: Any) -> dict[str, Step]:
    def scan_filter() -> dict[str, Any]:
        plan = _dataset("tickets", _read(spec["inputs"]["tickets"])).sem_filter(
            spec["instructions"]["filter"], depends_on=["text"]
        )
        return {"kept": [str(r["ticket_id"]) for r in _records(plan.run(config()))]}

    return {"filter": scan_filter}


WORKLOADS = {"enron": enron_steps, "medical": medical_steps, "scaling": scaling_steps}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    started = time.perf_counter()
    config = configure(spec)
    notes = {}
    if spec["workload"] == "medical":
        notes["groupby"] = "no relational join in Palimpzest: patients joined in pandas before PZ reads them"
        notes["classify"] = "bare single-field answers accepted (the simulator writes labels bare, not JSON)"
    steps = WORKLOADS[spec["workload"]](spec, config)
    return run_steps(spec, steps, "palimpzest " + metadata.version("palimpzest"), started, notes)


if __name__ == "__main__":
    sys.exit(main())
