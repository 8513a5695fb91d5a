"""Without Ray: the job's runtime_env and entrypoint, the state-folder checks, and attaching only
to a cluster that answers."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest

from semray.cli_cluster import attach_local_cluster
from semray.cluster.jobs import JobRequest, entrypoint, runtime_env, source_checkout
from semray.cluster.local_cluster import record_path
from semray.cluster.shared_state import JOB_CONFIG_ENV, check_state_dir
from semray.errors import JobError, StateDirError
from semray.settings import Settings

IN_JOB = {JOB_CONFIG_ENV: "{}"}


def test_a_job_from_the_checkout_uploads_it_and_carries_the_state_folder(tmp_path: Path) -> None:
    root = source_checkout()
    assert root is not None and (root / "semray" / "cli.py").is_file()
    models = root / "pyproject.toml"  # any file inside the checkout travels relative
    environment = runtime_env(JobRequest(command=("sql", "x"), state_dir=Path("/shared/s"), models=models))
    assert environment["working_dir"] == str(root)
    assert ".venv" in environment["excludes"] and ".git" in environment["excludes"]
    assert environment["env_vars"] == {"SEMRAY_STATE_DIR": "/shared/s", "SEMRAY_MODELS": "pyproject.toml"}
    assert "pip" not in environment
    copied = runtime_env(JobRequest(command=("sql", "x"), state_dir=Path("/tmp/s"), state_uri="s3://b/semray"))
    assert copied["env_vars"] == {"SEMRAY_STATE_DIR": "/tmp/s", "SEMRAY_STATE_URI": "s3://b/semray"}


def test_a_job_refuses_a_relative_state_folder_and_a_missing_profile(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="absolute path every node"):
        runtime_env(JobRequest(command=("sql", "x"), state_dir=Path(".semray")))
    with pytest.raises(JobError, match="not found"):
        runtime_env(JobRequest(command=("sql", "x"), state_dir=tmp_path, models=tmp_path / "nope.toml"))


def test_entrypoint_quotes_the_command_and_refuses_local_only_commands() -> None:
    line = entrypoint(["sql", "SELECT * FROM t WHERE SEM_FILTER('{a} is b')"], "/venv/bin/python")
    assert line == "/venv/bin/python -m semray.cli sql 'SELECT * FROM t WHERE SEM_FILTER('\"'\"'{a} is b'\"'\"')'"
    with pytest.raises(JobError, match="submitting machine"):
        entrypoint(["up"])
    with pytest.raises(JobError, match="nothing to submit"):
        entrypoint([])


def test_inside_a_job_a_state_folder_in_its_working_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match="SEMRAY_STATE_DIR"):
        check_state_dir(Settings(), environ=IN_JOB, cwd=tmp_path)
    with pytest.raises(StateDirError, match="temporary working directory"):
        check_state_dir(Settings(state_dir=tmp_path / "inside"), environ=IN_JOB, cwd=tmp_path)
    check_state_dir(Settings(state_dir=tmp_path / "shared"), environ=IN_JOB, cwd=tmp_path / "job")
    check_state_dir(Settings(), environ={}, cwd=tmp_path)  # not in a job: the default is fine
    check_state_dir(Settings(allow_job_local_state=True), environ=IN_JOB, cwd=tmp_path)
    check_state_dir(Settings(state_uri="s3://b/semray"), environ=IN_JOB, cwd=tmp_path)  # runs outlive the job there


@pytest.mark.parametrize("uri", ["s3://bucket/semray", "gs://b/x", "abfs://c@a/x"])
def test_an_object_store_uri_is_refused_with_what_to_use(uri: str) -> None:
    with pytest.raises(StateDirError, match="POSIX file system"):
        Settings(state_dir=uri)
    with pytest.raises(StateDirError, match="SEMRAY_STATE_DIR"):
        Settings(state_dir=Path(uri))  # what argparse's type=Path makes of it: 's3:/bucket/semray'


@pytest.mark.parametrize("form", ["file://{path}", "file://localhost{path}", "file:{path}"])
def test_a_file_uri_names_its_local_path(form: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared state"  # a space: percent-encoded in the URI
    uri = form.format(path=str(shared).replace(" ", "%20"))
    assert Settings(state_dir=uri).state_dir == shared
    if "localhost" not in form:  # Path() folds '//' (what argparse's type=Path makes of it): no host left to read
        assert Settings(state_dir=Path(form.format(path=shared))).state_dir == shared
    with pytest.raises(StateDirError, match="POSIX file system"):
        Settings(state_dir=f"file://otherhost{shared}")  # another host's path: not one this node sees


def test_attaching_needs_a_record_of_a_cluster_that_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def run_sql() -> None: ...

    args = argparse.Namespace(command=run_sql)
    settings = Settings(state_dir=tmp_path)
    assert attach_local_cluster(args, settings) is settings  # no record
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        record = {
            "cluster_id": "c1",
            "address": f"127.0.0.1:{port}",
            "dashboard_url": "http://127.0.0.1:1",
            "temp_dir": str(tmp_path / "ray-up"),
            "token_path": str(tmp_path / "token"),
            "num_cpus": 2,
            "started_at": 0.0,
        }
        record_path(settings).parent.mkdir(parents=True)
        record_path(settings).write_text(json.dumps(record), encoding="utf-8")
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "unchanged")  # restored by monkeypatch afterwards
        monkeypatch.setenv("RAY_AUTH_MODE", "unchanged")
        attached = attach_local_cluster(args, settings)
        assert attached.ray_address == f"127.0.0.1:{port}"

        def list_command() -> None: ...

        assert attach_local_cluster(argparse.Namespace(command=list_command), settings) is settings
    assert attach_local_cluster(args, settings) is settings  # the port no longer answers


@pytest.mark.parametrize("where", ["settings", "environment"])
def test_a_ray_client_address_is_refused_before_ray_starts_naming_semray_submit(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from semray.cluster.connect import connect
    from semray.errors import ClusterError

    def never(**_: object) -> None:
        raise AssertionError("ray.init was called for a Ray Client address")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", never)
    address = "ray://head.example:10001"
    if where == "environment":
        monkeypatch.setenv("RAY_ADDRESS", address)
        settings = Settings(state_dir=tmp_path)
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        settings = Settings(state_dir=tmp_path, ray_address=address)
    with pytest.raises(ClusterError, match=r"Ray Client address.*semray submit --address http://head.example:8265"):
        connect(settings)
