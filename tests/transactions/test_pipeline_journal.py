"""What the pipeline journals about a query and how a resume rebuilds it (no Ray, no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from semray.api import Query, from_arrow, read_csv
from semray.demo import corpus
from semray.demo.models import demo_serving
from semray.pipeline.runs.resume_record import Job, job_to_resume
from semray.pipeline.stages.base import Stage
from semray.pipeline.stages.semantic import SemanticStage
from semray.serving.config import ServingConfig, TierConfig
from semray.settings import Settings
from semray.transactions import RunStateError, begin_run, show_run


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    return corpus.write(tmp_path / "data", rows=20)["reviews"]


def semantic(reviews: Path, settings: Settings) -> Query:
    return read_csv(reviews, settings=settings).sem_filter("{review} is positive").sem_map("{review}", "summary")


def operator_keys(stage: Stage) -> list[str]:
    keys = [stage.operator_key] if isinstance(stage, SemanticStage) else []
    for child in stage.inputs:
        keys += operator_keys(child)
    return keys


def journal(settings: Settings, job: Job, **config: object) -> str:
    run = begin_run(settings, job.document, None, config={**job.journal_config(), **config})
    run.close()
    return run.run_id


def test_a_relational_job_calls_no_tier(reviews: Path, settings: Settings) -> None:
    job = Job.prepare(read_csv(reviews, settings=settings).filter("rating > 3").plan, settings, None)
    assert (job.tiers, job.serving, job.simulated) == ((), None, False)
    assert job.journal_config()["tiers"] == [] and job.journal_config()["serving"] is None


def test_journal_config_holds_what_a_resume_needs(reviews: Path, settings: Settings) -> None:
    job = Job.prepare(semantic(reviews, settings).plan, settings, None)
    config = job.journal_config()
    assert job.tiers == ("large",) and job.simulated
    assert config["physical_plan"].startswith("Semantic[map on large]")
    assert config["settings"]["semantic_batch_size"] == settings.semantic_batch_size
    assert ServingConfig.model_validate(config["serving"]) == ServingConfig()
    assert config["memory_sources"] is False
    json.dumps(config)  # journaled as JSON


def test_the_fingerprint_covers_the_model_behind_each_tier(reviews: Path, settings: Settings) -> None:
    plan = semantic(reviews, settings).plan
    other = ServingConfig(large=TierConfig(backend="simulated", model="sim-small"))
    same = Job.prepare(plan, settings, None).fingerprint()
    assert Job.prepare(plan, settings, ServingConfig()).fingerprint() == same
    assert Job.prepare(plan, settings, other).fingerprint() != same
    assert Job.prepare(plan.input, settings, None).fingerprint() != same  # type: ignore[attr-defined]


def test_operator_keys_are_the_same_in_another_process(reviews: Path, settings: Settings, tmp_path: Path) -> None:
    query = semantic(reviews, settings)
    here = operator_keys(Job.prepare(query.plan, settings, None).stages)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(query.to_json(), encoding="utf-8")
    script = (
        "import json, sys\n"
        "from semray.api import load_plan\n"
        "from semray.pipeline.lowering.driver import lower\n"
        "from semray.settings import Settings\n"
        "from semray.pipeline.stages.semantic import SemanticStage\n"
        "stage, keys = lower(load_plan(sys.argv[1]).plan, Settings()), []\n"
        "while stage.inputs:\n"
        "    keys += [stage.operator_key] if isinstance(stage, SemanticStage) else []\n"
        "    stage = stage.inputs[0]\n"
        "print(json.dumps(keys))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(plan_file)], capture_output=True, text=True, check=True)
    assert len(here) == 2 and json.loads(done.stdout) == here


def test_resume_uses_the_journaled_settings_and_serving(reviews: Path, settings: Settings) -> None:
    journaled = settings.model_copy(update={"semantic_batch_size": 5})
    serving = ServingConfig(large=TierConfig(backend="simulated", model="sim-small"))
    run_id = journal(settings, Job.prepare(semantic(reviews, journaled).plan, journaled, serving))
    job = job_to_resume(show_run(settings, run_id), settings, None)
    assert job.settings.semantic_batch_size == 5 and job.settings.state_dir == settings.state_dir
    assert job.serving == serving and job.tiers == ("large",)


def test_resume_refuses_in_memory_tables_of_another_process(settings: Settings) -> None:
    query = from_arrow(pa.table({"text": ["a", "b"]}), settings=settings).sem_filter("{text} is positive")
    job = Job.prepare(query.plan, settings, None)
    assert job.reads_memory and job.journal_config()["memory_sources"]
    run_id = journal(settings, job, pid=os.getpid() + 1)
    with pytest.raises(RunStateError, match="in-memory table"):
        job_to_resume(show_run(settings, run_id), settings, None)
    same_process = journal(settings, job)
    assert job_to_resume(show_run(settings, same_process), settings, None).reads_memory


def test_resume_says_when_the_serving_config_cannot_be_rebuilt(reviews: Path, settings: Settings) -> None:
    in_memory = demo_serving(corpus.generate(10))  # simulator datasets as Arrow tables
    run_id = journal(settings, Job.prepare(semantic(reviews, settings).plan, settings, in_memory))
    with pytest.raises(RunStateError, match="serving configuration cannot be rebuilt"):
        job_to_resume(show_run(settings, run_id), settings, None)
    assert job_to_resume(show_run(settings, run_id), settings, in_memory).serving == in_memory


def test_resume_refuses_a_plan_that_now_lowers_differently(reviews: Path, settings: Settings) -> None:
    job = Job.prepare(semantic(reviews, settings).plan, settings, None)
    run_id = journal(settings, job, physical_plan="Semantic[something else]")
    with pytest.raises(RunStateError, match="another physical plan"):
        job_to_resume(show_run(settings, run_id), settings, None)
