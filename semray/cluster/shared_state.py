"""The state folder on a cluster: a shared POSIX path, never a Ray job's temporary directory.

A Ray job runs its driver in a temporary working directory (``.../runtime_resources/
working_dir_files/...``) that is deleted with the job. The default state folder, ``.semray``,
is relative, so inside a job its runs, journals and response cache would land there and vanish:
``semray runs ls`` on the submitting machine would never see them. ``check_state_dir`` refuses
that unless ``Settings.allow_job_local_state`` says otherwise.

Object-store URIs (``s3://``, ``gs://``, ...) as the state folder are refused too, by ``Settings`` itself
(``settings.posix_state_dir``): the journal appends under
``flock``, commits are fsync'd files renamed into place, publishing swaps a hard link or a
symlink with ``os.replace``, the fence is an fsync'd rename checked under the journal lock, and
the response cache is SQLite in WAL mode. None of that has an equivalent through pyarrow's
filesystems (no locks, no atomic rename on S3/GCS), so the state folder must be a POSIX path
every node sees (NFS, a mounted volume). What an object store can hold is a copy of the runs,
made by each run's driver as write-once objects (``Settings.state_uri``,
``semray.transactions.remote``).

>>> in_job = {"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}
>>> check_state_dir(Settings(state_dir=Path("/shared/semray")), environ=in_job)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from semray.errors import StateDirError
from semray.settings import STATE_DIR_ENV

if TYPE_CHECKING:
    from semray.settings import Settings

JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Set by Ray's job supervisor in the environment of every submitted job's driver."""


def in_ray_job(environ: Mapping[str, str] | None = None) -> bool:
    """True in the driver of a job submitted to Ray (``ray job submit``, ``semray submit``)."""
    return JOB_CONFIG_ENV in (os.environ if environ is None else environ)


def check_state_dir(settings: Settings, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
    """Inside a Ray job, refuse a state folder that is relative or under the job's working directory.

    Outside a job this does nothing; ``Settings.allow_job_local_state`` turns the check off, and so
    does ``Settings.state_uri``: its runs are copied to the object store, which outlives the job
    (commits after its last copy, at most ``state_sync_s`` of them, are lost with the job's folder).
    """
    if settings.allow_job_local_state or settings.state_uri or not in_ray_job(environ):
        return
    working = (cwd or Path.cwd()).resolve()
    state = settings.state_path
    relative = not settings.state_dir.expanduser().is_absolute()
    if not relative and not state.is_relative_to(working):
        return
    why = "is relative, so it lies" if relative else "lies"
    raise StateDirError(
        f"this Ray job's state folder {str(settings.state_dir)!r} {why} in the job's temporary working "
        f"directory ({state}): its runs, journals and response cache would be deleted with the job and "
        f"`semray runs ls` would never see them. Set {STATE_DIR_ENV} to shared storage every node sees (`semray "
        "submit --state-dir /shared/semray ...` does), or set SEMRAY_ALLOW_JOB_LOCAL_STATE=1 to accept losing them"
    )
