"""``semray up|down``, ``semray submit -- <command>``, ``semray jobs ls|status|logs|stop``.

Registered on the ``semray`` parser by ``add_cluster_commands(commands)``; ``attach_local_cluster``
is the hook ``semray.cli.main`` calls before a command runs: with no Ray address given, a command
that runs on Ray joins the cluster of ``semray up`` under the same state folder when it answers,
and says so on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from semray.settings import Settings

ATTACHING_COMMANDS = frozenset(
    {
        "run_demo",
        "run_plan",
        "explain_plan",
        "run_sql",
        "run_ask",
        "serve_tiers_up",
        "serve_tiers_down",
        "serve_tiers_status",
        "check_command",
        "resume_command",
    }
)
"""The commands (by function name) that start Ray, and so attach to ``semray up``'s cluster instead."""


def add_cluster_commands(subparsers: Any) -> None:
    """Add ``up``, ``down``, ``submit`` and ``jobs`` to the ``semray`` command's subparsers."""
    up = subparsers.add_parser("up", help="start a long-lived local Ray on 127.0.0.1 with the tiers deployed")
    up.add_argument(
        "--num-cpus", type=int, default=None, help="CPUs of the local cluster (default: $SEMRAY_NUM_CPUS, 2)"
    )
    up.add_argument("--tier", action="append", choices=("embedding", "small", "large"), help="deploy only these")
    up.set_defaults(command=up_command)
    down = subparsers.add_parser("down", help="stop the local cluster of `semray up`")
    down.set_defaults(command=down_command)

    submit = subparsers.add_parser("submit", help="run a semray command as a Ray job: semray submit -- sql '...'")
    submit.add_argument(
        "--address",
        help="the cluster's job API, e.g. http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS, "
        "$RAY_ADDRESS, else the cluster of `semray up`)",
    )
    submit.add_argument("--models", dest="job_models", type=Path, help="model profile for the job (default: --models)")
    submit.add_argument(
        "--state-dir",
        dest="job_state_dir",
        type=Path,
        help="state folder on shared storage every node sees (default: --state-dir / $SEMRAY_STATE_DIR, absolute)",
    )
    submit.add_argument("--extras", action="append", default=[], help="semray extras to pip-install (no checkout)")
    submit.add_argument("--pip", action="append", default=[], help="another package for the job's environment")
    submit.add_argument(
        "--wait", action="store_true", help="follow the job's logs until it ends; exit 0 if it succeeded"
    )
    submit.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the semray command")
    submit.set_defaults(command=submit_command)

    jobs = subparsers.add_parser("jobs", help="semray's Ray jobs: ls, status ID, logs ID [--follow], stop ID")
    actions = jobs.add_subparsers(title="actions", required=True, metavar="ACTION")
    listing = actions.add_parser("ls", help="jobs, newest first")
    listing.add_argument("--all", action="store_true", help="every job of the cluster, not only semray's")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.set_defaults(command=jobs_ls_command)
    status = actions.add_parser("status", help="one job, as JSON")
    status.add_argument("job_id", metavar="ID")
    status.set_defaults(command=jobs_status_command)
    logs = actions.add_parser("logs", help="a job's output")
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    logs.set_defaults(command=jobs_logs_command)
    stop = actions.add_parser("stop", help="stop a job (its runs stay resumable)")
    stop.add_argument("job_id", metavar="ID")
    stop.set_defaults(command=jobs_stop_command)
    for parser in (listing, status, logs, stop):
        parser.add_argument("--address", help="the cluster's job API (default as for submit)")


def attach_local_cluster(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` joined to the running cluster of ``semray up`` when the command runs on Ray
    and no address was given; otherwise ``settings`` unchanged."""
    command = getattr(args, "command", None)
    if getattr(command, "__name__", "") not in ATTACHING_COMMANDS:
        return settings
    if settings.ray_address or os.environ.get("RAY_ADDRESS"):
        return settings
    from semray.cluster.local_cluster import find_local_cluster, use_token_auth

    cluster = find_local_cluster(settings)
    if cluster is None:
        return settings
    use_token_auth(cluster)
    _say(f"semray: attached to the local cluster of `semray up` at {cluster.address} (`semray down` stops it)\n")
    return settings.model_copy(update={"ray_address": cluster.address})


def up_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.local_cluster import start_local_cluster, stop_local_cluster, use_token_auth
    from semray.serving.lifecycle import serve_up
    from semray.serving.profiles import resolve_serving

    config = resolve_serving(settings.models)
    tiers = tuple(args.tier or ("embedding", "small", "large"))
    num_cpus = args.num_cpus or settings.num_cpus
    _say(f"starting a local Ray on 127.0.0.1 with {num_cpus} CPUs under {settings.state_path}\n")
    cluster = start_local_cluster(settings, num_cpus)
    use_token_auth(cluster)
    attached = settings.model_copy(update={"ray_address": cluster.address})
    try:
        handles = serve_up(attached, config, tiers)
    except BaseException:
        stop_local_cluster(settings)
        raise
    simulated = [tier for tier in tiers if config.tier(tier).backend == "simulated"]
    _say(
        f"up: Ray at {cluster.address}, dashboard and job API at {cluster.dashboard_url} (token in "
        f"{cluster.token_path}); tiers {', '.join(handles.apps.values())} answered a probe"
        + (f" ({', '.join(simulated)} SIMULATED)" if simulated else "")
        + ".\nsemray commands with this state folder attach to it; `semray down` stops it\n"
    )
    return 0


def down_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.local_cluster import read_record, stop_local_cluster

    cluster = read_record(settings)
    if cluster is None:
        _say(f"no local cluster recorded under {settings.state_path}; nothing to stop\n")
        return 0
    stopped = stop_local_cluster(settings)
    _say(f"stopped the local cluster at {cluster.address} ({stopped} processes)\n")
    return 0


def submit_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.jobs import JobRequest, follow_logs, job_info, submit_job

    command = list(args.job_command)
    if command[:1] == ["--"]:
        command = command[1:]
    address, python = _job_address(args, settings)
    state_dir = (args.job_state_dir or settings.state_dir).expanduser()
    request = JobRequest(
        command=tuple(command),
        state_dir=state_dir,
        models=args.job_models or settings.models,
        state_uri=settings.state_store_uri,
        address=address,
        extras=tuple(args.extras),
        pip=tuple(args.pip),
        python=python,
    )
    job_id = submit_job(request)
    sys.stdout.write(job_id + "\n")
    _say(f"submitted {job_id}; `semray jobs logs {job_id} --follow` shows its output, its runs land in {state_dir}\n")
    if not args.wait:
        return 0
    for chunk in follow_logs(address, job_id):
        sys.stdout.write(chunk)
    status = job_info(address, job_id)["status"]
    _say(f"job {job_id} {status}\n")
    return 0 if status == "SUCCEEDED" else 1


def jobs_ls_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.jobs import list_jobs

    rows = list_jobs(_job_address(args, settings)[0], every=args.all)
    if args.format == "json":
        sys.stdout.write("".join(json.dumps(row) + "\n" for row in rows))
        return 0
    if not rows:
        sys.stdout.write("no semray jobs on this cluster (--all lists every job)\n")
        return 0
    lines = [f"{'job':<30} {'status':<10} {'started':<20} command"]
    for row in rows:
        started = _when(row["start_time"])
        lines.append(f"{row['job_id']:<30} {row['status']:<10} {started:<20} {row['command'][:80]}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def jobs_status_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.jobs import job_info

    sys.stdout.write(json.dumps(job_info(_job_address(args, settings)[0], args.job_id), indent=2) + "\n")
    return 0


def jobs_logs_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.jobs import follow_logs, job_logs

    address = _job_address(args, settings)[0]
    if args.follow:
        for chunk in follow_logs(address, args.job_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()
        return 0
    sys.stdout.write(job_logs(address, args.job_id))
    return 0


def jobs_stop_command(args: argparse.Namespace, settings: Settings) -> int:
    from semray.cluster.jobs import stop_job

    running = stop_job(_job_address(args, settings)[0], args.job_id)
    _say(f"{args.job_id}: {'stop requested' if running else 'was not running'}\n")
    return 0


def _job_address(args: argparse.Namespace, settings: Settings) -> tuple[str | None, str]:
    """The job API to use and the interpreter jobs run with: ``--address`` or the environment
    (``python`` on the cluster's PATH), else the cluster of ``semray up`` (this interpreter)."""
    if args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS"):
        return args.address, "python"
    from semray.cluster.local_cluster import find_local_cluster, use_token_auth

    cluster = find_local_cluster(settings)
    if cluster is None:
        return None, "python"  # jobs.client says what to pass
    use_token_auth(cluster)
    return cluster.dashboard_url, sys.executable


def _when(timestamp_ms: int | None) -> str:
    if not timestamp_ms:
        return "-"
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _say(text: str) -> None:
    sys.stderr.write(text)
