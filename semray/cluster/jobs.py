"""Ray Jobs: ``semray submit -- <semray command>`` and ``semray jobs ls|status|logs|stop``.

A job runs ``python -m semray.cli <command>`` on the cluster through ``JobSubmissionClient``
(the dashboard's job API). Its runtime_env carries:

- the code: the source checkout as ``working_dir`` when semray runs from one (its ``semray/``
  package then shadows any installed copy), else ``pip: ["semray==<version>"]`` (plus extras);
- the settings: ``SEMRAY_STATE_DIR``, an absolute path every node sees (so runs, journals and the
  cache outlive the job and ``semray runs ls`` sees them), and ``SEMRAY_MODELS`` when a profile
  is given (a path inside the checkout travels with it, relative; any other must be visible on
  the cluster's nodes).

Nothing secret goes into the runtime_env: anyone who can list jobs reads it. Token
authentication comes from the submitting process (``RAY_AUTH_MODE=token`` with
``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``), which Ray's client turns into a bearer header;
the job's driver inherits the cluster's own.

>>> job_id = submit_job(JobRequest(command=("sql", "SELECT 1"), state_dir=Path("/shared/s")))  # doctest: +SKIP
>>> job_status(None, job_id)  # doctest: +SKIP
'SUCCEEDED'
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from semray.cluster.connect import auth_hint
from semray.errors import JobError
from semray.log import get_logger
from semray.settings import STATE_DIR_ENV

log = get_logger(__name__)

JOB_METADATA_KEY = "semray"
"""Metadata every semray job carries (the command), so ``jobs ls`` can tell them apart."""
WORKING_DIR_EXCLUDES = (
    ".git",
    ".venv",
    ".semray",
    "**/__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "benchmarks/out",
)
"""Left out of the uploaded checkout (Ray caps a working_dir package at a few hundred MB)."""
FINISHED = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One ``semray submit``: the semray command to run and where its settings point."""

    command: tuple[str, ...]
    state_dir: Path
    models: Path | None = None
    state_uri: str | None = None
    """The object store the job's runs are copied to (``Settings.state_uri``), passed as ``SEMRAY_STATE_URI``."""
    address: str | None = None
    extras: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    source_root: Path | None = field(default=None)
    """The checkout to upload; None finds it (``source_checkout()``); installed copies use pip."""
    python: str = "python"
    """The interpreter the job's shell finds semray with (a local cluster: this process's)."""


def source_checkout() -> Path | None:
    """The checkout semray runs from (a folder with ``pyproject.toml`` naming semray), or None."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "semray"' in project.read_text(encoding="utf-8"):
        return root
    return None


def runtime_env(request: JobRequest) -> dict[str, Any]:
    """The job's runtime_env: code (working_dir or pip) and the settings as ``SEMRAY_*`` variables."""
    if not request.state_dir.is_absolute():
        raise JobError(
            f"a job's state folder must be an absolute path every node of the cluster sees, got "
            f"{str(request.state_dir)!r}: pass --state-dir /shared/semray (or set {STATE_DIR_ENV})"
        )
    root = request.source_root or source_checkout()
    env_vars = {STATE_DIR_ENV: str(request.state_dir)}
    if request.state_uri:
        env_vars["SEMRAY_STATE_URI"] = request.state_uri
    environment: dict[str, Any] = {"env_vars": env_vars}
    if root is not None:
        environment["working_dir"] = str(root)
        environment["excludes"] = list(WORKING_DIR_EXCLUDES)
    else:
        version = metadata.version("semray")
        extras = f"[{','.join(request.extras)}]" if request.extras else ""
        environment["pip"] = [f"semray{extras}=={version}", *request.pip]
    if root is not None and request.pip:
        environment["pip"] = list(request.pip)
    if request.models is not None:
        env_vars["SEMRAY_MODELS"] = _models_path(request.models, root)
    return environment


def _models_path(models: Path, root: Path | None) -> str:
    """A profile inside the uploaded checkout goes relative (the job's cwd is its copy)."""
    resolved = models.expanduser().resolve()
    if not resolved.is_file():
        raise JobError(f"model profile {str(models)!r} not found; `semray models schema` shows the format")
    if root is not None and resolved.is_relative_to(root):
        return str(resolved.relative_to(root))
    log.warning("job_models_path_outside_checkout", path=str(resolved), hint="it must exist on the cluster's nodes")
    return str(resolved)


def entrypoint(command: Sequence[str], python: str = "python") -> str:
    """The job's shell command: ``python -m semray.cli ...``, each argument quoted."""
    if not command:
        raise JobError("nothing to submit: give a semray command after --, e.g. `semray submit -- sql 'SELECT 1'`")
    if command[0] in ("submit", "jobs", "up", "down"):
        raise JobError(f"`semray {command[0]}` runs on the submitting machine, not inside a job")
    return shlex.join([python, "-m", "semray.cli", *command])


def client(address: str | None) -> Any:
    """A ``JobSubmissionClient`` for ``address`` (the dashboard URL, e.g. http://127.0.0.1:8265;
    None: ``RAY_API_SERVER_ADDRESS`` / ``RAY_ADDRESS``); raises ``JobError`` with what to fix."""
    from ray.job_submission import JobSubmissionClient

    where = address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not where:
        raise JobError(
            "no cluster to submit to: pass --address http://HEAD:8265 (the dashboard's job API), set "
            "RAY_API_SERVER_ADDRESS, or start one here with `semray up`"
        )
    try:
        return JobSubmissionClient(where)
    except (ConnectionError, RuntimeError, ValueError) as error:
        reason = str(error).splitlines()[0][:300]
        raise JobError(f"cannot reach the Ray job API at {where}: {reason}{auth_hint()}") from None


AGENT_WAIT_S = 120.0
"""How long a submission waits for a newly started head's job agent."""
NO_AGENT = "No available agent to submit job"


def submit_job(request: JobRequest) -> str:
    """Submit ``request``; returns the submission id."""
    jobs = client(request.address)
    environment = runtime_env(request)
    line = entrypoint(request.command, request.python)
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            job_id: str = jobs.submit_job(
                entrypoint=line, runtime_env=environment, metadata={JOB_METADATA_KEY: shlex.join(request.command)}
            )
            break
        except RuntimeError as error:
            # A head that just started answers 500 "No available agent" until its dashboard agent is up.
            if NO_AGENT in str(error) and time.monotonic() < deadline:
                log.info("job_agent_not_ready", retry_in_s=1.0)
                time.sleep(1.0)
                continue
            raise JobError(f"the cluster refused the job: {str(error)[:500]}{auth_hint()}") from None
    log.info("job_submitted", job_id=job_id, entrypoint=line, state_dir=str(request.state_dir))
    return job_id


def list_jobs(address: str | None, every: bool = False) -> list[dict[str, Any]]:
    """The cluster's jobs (semray's only unless ``every``), newest first, as plain dicts."""
    rows = []
    for job in client(address).list_jobs():
        job_metadata = job.metadata or {}
        if not every and JOB_METADATA_KEY not in job_metadata:
            continue
        rows.append(
            {
                "job_id": job.submission_id or job.job_id,
                "status": str(job.status.value if hasattr(job.status, "value") else job.status),
                "command": job_metadata.get(JOB_METADATA_KEY, job.entrypoint),
                "start_time": job.start_time,
                "end_time": job.end_time,
                "message": job.message,
            }
        )
    return sorted(rows, key=lambda row: row["start_time"] or 0, reverse=True)


def job_info(address: str | None, job_id: str) -> dict[str, Any]:
    """One job: status, command, times, message (e.g. why it failed)."""
    jobs = client(address)
    try:
        job = jobs.get_job_info(job_id)
    except RuntimeError as error:
        raise JobError(f"no job {job_id!r} on the cluster ({str(error)[:200]}); `semray jobs ls` lists them") from None
    return {
        "job_id": job.submission_id or job_id,
        "status": str(job.status.value if hasattr(job.status, "value") else job.status),
        "entrypoint": job.entrypoint,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "message": job.message,
    }


def job_logs(address: str | None, job_id: str) -> str:
    try:
        logs: str = client(address).get_job_logs(job_id)
    except RuntimeError as error:
        raise JobError(f"cannot read the logs of job {job_id!r}: {str(error)[:200]}") from None
    return logs


def follow_logs(address: str | None, job_id: str) -> Iterator[str]:
    """The job's logs as they are written, until it finishes."""
    jobs = client(address)
    stream = jobs.tail_job_logs(job_id)
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(stream.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.close()


def stop_job(address: str | None, job_id: str) -> bool:
    """Ask the job to stop (SIGTERM, then SIGKILL); True when it was running."""
    try:
        stopped: bool = client(address).stop_job(job_id)
    except RuntimeError as error:
        raise JobError(f"cannot stop job {job_id!r}: {str(error)[:200]}") from None
    log.info("job_stop_requested", job_id=job_id, was_running=stopped)
    return stopped


def wait_job(address: str | None, job_id: str, timeout_s: float, poll_s: float = 1.0) -> str:
    """Wait until the job finishes; returns its final status (raises ``JobError`` on timeout)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        status = job_info(address, job_id)["status"]
        if status in FINISHED:
            return str(status)
        if time.monotonic() > deadline:
            raise JobError(f"job {job_id} is still {status} after {timeout_s:.0f} s; `semray jobs logs {job_id}`")
        time.sleep(poll_s)
