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

from peer_common import Step, Unsupported, first_number, match_label, run_steps, without_answer_format


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


def _joined(plan: Any, config: Callable[[], Any]) -> list[dict[str, Any]]:
    """Run a plan holding a ``sem_join``; a 404 means PZ chose an embedding join the simulator cannot serve."""
    try:
        return _records(plan.run(config()))
    except Exception as error:
        if "404" not in str(error):
            raise
        raise RuntimeError(
            "Palimpzest's chosen join plan embeds rows with OpenAI's text-embedding-3-small; "
            "the simulator serves no embeddings (HTTP 404 from 127.0.0.1)"
        ) from error


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
        rows = _joined(left.sem_join(right, text["same"]), config)
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


def reviews_steps(spec: dict[str, Any], config: Any) -> dict[str, Step]:
    """The reviews workload as a Palimpzest user writes it: ``sem_filter`` and ``limit`` (PZ has a
    LIMIT operator), ``sem_join`` (every pair asked; the condition names the fields PZ shows the
    model), and, for the SQL queries, ``sem_filter`` / ``sem_map`` columns with PZ's ``groupby``
    count and pandas for the per-brand shares and means. Only the ``cheap`` config has a
    quality-targeted plan (``MinCostAtFixedQuality``) to stand for a cascade."""
    import palimpzest as pz
    import pandas as pd
    from palimpzest import GroupBySig

    text, limits = dict(spec["instructions"]), spec["limits"]
    text["complaint"] = without_answer_format(text["complaint"])

    def reviews(name: str) -> Any:
        return _dataset(name, _read(spec["inputs"][name]))

    def kept(plan: Any) -> dict[str, Any]:
        return {"kept": [str(r["review_id"]) for r in _records(plan.run(config()))]}

    def filter_limit() -> dict[str, Any]:
        plan = reviews("reviews").sem_filter(text["complaint"], depends_on=["text"])
        return kept(plan.limit(limits["filter_limit"]))

    def cascade_limit() -> dict[str, Any]:
        if spec["config"] != "cheap":
            raise Unsupported(
                "the plain config has only the large model; palimpzest (cheap) runs this query under "
                "MinCostAtFixedQuality, PZ's quality-targeted plan"
            )
        plan = reviews("reviews").sem_filter(text["complaint"], depends_on=["text"])
        return kept(plan.limit(limits["cascade_limit"]))

    def chain_limit() -> dict[str, Any]:
        plan = reviews("reviews").sem_filter(text["complaint"], depends_on=["text"])
        plan = plan.sem_filter(text["shipping"], depends_on=["text"])
        return kept(plan.limit(limits["chain_limit"]))

    def family_join(k: int | None) -> dict[str, Any]:
        sample = _read(spec["inputs"]["join_sample"])
        left = _dataset("left", [{"id_left": r["review_id"], "text_left": r["text"]} for r in sample])
        right = _dataset("right", [{"id_right": r["review_id"], "text_right": r["text"]} for r in sample])
        condition = text["same_family"].replace("{l.text}", "text_left").replace("{r.text}", "text_right")
        plan = left.sem_join(right, condition)
        rows = _joined(plan if k is None else plan.limit(k), config)
        return {"pairs": [[str(r["id_left"]), str(r["id_right"])] for r in rows]}

    def self_join() -> dict[str, Any]:
        return family_join(None)

    def self_join_limit() -> dict[str, Any]:
        return family_join(limits["self_join_limit"])

    def category_join() -> dict[str, Any]:
        condition = text["category"].replace("{l.text}", "text").replace("{r.description}", "description")
        plan = reviews("category_sample").sem_join(reviews("categories"), condition)
        return {"pairs": [[str(r["review_id"]), str(r["description"])] for r in _joined(plan, config)]}

    def sql_aggregate() -> dict[str, Any]:
        frame = pd.DataFrame(_read(spec["inputs"]["sql_sample"]))
        complained = reviews("sql_sample").sem_filter(text["complaint"], depends_on=["text"])
        ids = {r["review_id"] for r in _records(complained.run(config()))}
        stars = reviews("sql_sample").sem_map(
            [{"name": "stars", "type": int, "desc": text["stars"] + " (a whole number from 1 to 5)"}],
            depends_on=["text"],
        )
        scored = {r["review_id"]: first_number(r.get("stars")) for r in _records(stars.run(config()))}
        frame["complaint"] = [1.0 if v in ids else 0.0 for v in frame["review_id"]]
        frame["stars"] = [scored.get(v) for v in frame["review_id"]]
        grouped = frame.groupby("brand").agg(share=("complaint", "mean"), stars=("stars", "mean"))
        return {
            "complaint_share": {str(k): float(v) for k, v in grouped["share"].items()},
            "stars": {str(k): float(v) for k, v in grouped["stars"].items()},
        }

    def sql_group_by() -> dict[str, Any]:
        moods = spec["moods"]
        field = {"name": "mood", "type": str, "desc": text["mood"] + ". Exactly one of: " + ", ".join(moods)}
        classified = _records(reviews("sql_sample").sem_map([field], depends_on=["text"]).run(config()))
        for row in classified:
            row["mood"] = match_label(row.get("mood"), moods) or "unknown"
        counted = pz.MemoryDataset(id="moods", vals=pd.DataFrame(classified)[["review_id", "mood"]]).groupby(
            GroupBySig(["mood"], ["count"], ["review_id"])
        )
        rows = _records(counted.run(config()))
        count_key = next(k for k in rows[0] if k.startswith("count")) if rows else "count(review_id)"
        return {"mood_counts": {str(r["mood"]): int(r[count_key]) for r in rows}}

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
    config = configure(spec)
    notes = {}
    if spec["workload"] == "medical":
        notes["groupby"] = "no relational join in Palimpzest: patients joined in pandas before PZ reads them"
        notes["classify"] = "bare single-field answers accepted (the simulator writes labels bare, not JSON)"
    if spec["workload"] == "reviews":
        notes["sql"] = "no SQL: PZ's groupby counts the moods; the per-brand shares and means are pandas"
        notes["answers"] = "bare single-field answers accepted (the simulator writes labels bare, not JSON)"
        notes["wording"] = (
            "the complaint filter's closing 'Answer yes or no.' is left out: PZ asks for TRUE or FALSE and "
            "reads a Yes reply as false (with it, no row passed)"
        )
    steps = WORKLOADS[spec["workload"]](spec, config)
    return run_steps(spec, steps, "palimpzest " + metadata.version("palimpzest"), started, notes)


if __name__ == "__main__":
    sys.exit(main())
