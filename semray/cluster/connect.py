"""Connect to Ray: an embedded local cluster on 127.0.0.1 by default, or a given address."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import ray

from semray.cluster.loopback import LOOPBACK_ENV
from semray.cluster.shared_state import check_state_dir
from semray.errors import ClusterError, SemrayError
from semray.log import get_logger
from semray.settings import Settings

log = get_logger(__name__)

PREFLIGHT_TIMEOUT_S = 3.0
"""How long the TCP check of a ``host:port`` address waits before saying nothing answers there."""
SOCKET_PATH_LIMIT = 107
"""Unix socket paths longer than this fail; Ray's temp dir must stay short."""

_DATA_CONTEXT = {"configured": False}
"""Whether this process's Ray Data context has semray's options (``_configure_data_context``)."""
EXCEPTIONS_LOGGER = "ray.data.exceptions"
"""The logger on which Ray Data narrates a failed execution (a preface, then the stack trace) as it
re-raises the error to the driver."""
EXECUTOR_LOGGER = "ray.data._internal.execution.streaming_executor_state"
"""The logger on which Ray Data's executor says that a task failed and the execution aborts, with
the failure's whole stack trace (a Ray task's, with ANSI colour codes) on the console."""
PROGRESS_LOGGER = "ray.data._internal.progress"
"""The logger of Ray Data's 'Progress bars disabled' warning: a filter on ``ray.data`` does not
see it (a logger's filters apply only to records logged on that logger itself)."""

_TERMINAL_BARS = {"semray": False}
"""Whether semray draws its own progress bar on this process's terminal (``leave_terminal_to_semray``).
Process-wide, as Ray Data's ``DataContext`` it decides about is."""


def leave_terminal_to_semray() -> None:
    """semray draws its run's progress bar on standard error (the CLI's ``BarReporter``): Ray
    Data's own tqdm bars, otherwise on wherever standard error is a terminal, are turned off so
    the two do not overwrite each other. Call before the run starts; later connects keep it."""
    _TERMINAL_BARS["semray"] = True
    if "ray.data" in sys.modules:  # already configured by an earlier connect
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False


def ray_data_progress_bars(terminal: bool) -> bool:
    """Whether Ray Data draws its bars: on a terminal, unless semray draws its own there.

    >>> ray_data_progress_bars(terminal=False)
    False
    """
    return terminal and not _TERMINAL_BARS["semray"]


def connect(settings: Settings) -> None:
    """Start (or join) Ray once per process; later calls are no-ops.

    The embedded cluster binds loopback only, keeps its temp dir under the state folder
    (or a short /tmp link to it when the path is too long for Unix sockets) and is sized
    to ``settings.num_cpus``.
    """
    if ray.is_initialized():
        if not _DATA_CONTEXT["configured"]:  # Ray was started by the caller (ray.init) before semray
            _configure_data_context()
        return
    check_state_dir(settings)  # inside a Ray job: refuse a state folder that dies with the job
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0":
        log.warning(
            "ray_may_bind_all_interfaces", hint="import semray before ray, or set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"
        )
    address = settings.ray_address or os.environ.get("RAY_ADDRESS") or None
    if address:
        refuse_ray_client(address)
        # An existing cluster (given, or the one a Ray job runs in: Ray sets RAY_ADDRESS there)
        # owns its resources: no num_cpus, temp dir or object store size may be passed.
        log.info("ray_connect", address=address)
        check_cluster_address(address)
        try:
            ray.init(address=address, log_to_driver=True, configure_logging=False)
        except (ConnectionError, RuntimeError, ray.exceptions.AuthenticationError) as error:
            reason = str(error).split(". ")[0]
            raise ClusterError(f"cannot reach the Ray cluster at {address}: {reason}{auth_hint()}") from None
        _configure_data_context()
        return
    # Worker processes inherit this; Serve replicas then bind their gRPC server to loopback.
    os.environ[LOOPBACK_ENV] = "1"
    temp_dir = ray_temp_dir(settings)
    log.info("ray_start_local", num_cpus=settings.num_cpus, temp_dir=str(temp_dir))
    auth_logger = logging.getLogger(AUTH_LOGGER)
    if quiet_default_auth_notice not in auth_logger.filters:
        auth_logger.addFilter(quiet_default_auth_notice)
    try:
        ray.init(
            num_cpus=settings.num_cpus,
            include_dashboard=False,
            _temp_dir=str(temp_dir),
            object_store_memory=settings.object_store_bytes,
            log_to_driver=True,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise ClusterError(f"cannot start a local Ray cluster: {error}") from None
    _configure_data_context()


def refuse_ray_client(address: str) -> None:
    """``ClusterError`` for a Ray Client address (``ray://host:10001``), saying what to do instead.

    A Ray Client driver runs here while its Ray calls run in a proxy on the head node: the run's
    journal and state folder would be on this machine, but its actors take the driver's node to be
    the head's (``ray.get_runtime_context()`` there) and would commit to a folder of that path on
    the head node, and the progress, cancel and lease threads would go through the proxy. A job
    runs the same command as a driver on the cluster, where all of that holds.

    >>> refuse_ray_client("ray://head.example:10001")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    semray.errors.ClusterError: ray://head.example:10001 is a Ray Client address: semray does not run as ...
    """
    parts = urlsplit(address)
    if parts.scheme != "ray":
        return
    head = parts.hostname or "HEAD"
    raise ClusterError(
        f"{address} is a Ray Client address: semray does not run as a Ray Client driver (its journal would be on "
        "this machine, its actors would commit on the head node). Submit the command as a Ray job instead: "
        f"`semray submit --address http://{head}:8265 -- <semray command>` (the head's job API, port 8265 by "
        "default), or run semray on a node of the cluster with RAY_ADDRESS=auto or the head's GCS address "
        f"({head}:6379 by default)"
    )


def check_cluster_address(address: str) -> None:
    """Fail at once, saying why, where ``ray.init`` would retry for twenty seconds (a line of
    Ray's own per try) and then say only 'Failed to connect': a ``host:port`` where nothing accepts
    connections, or a cluster that refuses this process's authentication token. Addresses Ray
    resolves itself (``auto``) are left to it; ``ray://`` ones were refused before (``refuse_ray_client``)."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or "://" in address or not port.isdigit():
        return
    try:
        with socket.create_connection((host, int(port)), timeout=PREFLIGHT_TIMEOUT_S):
            pass
    except OSError as error:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address}: nothing accepts connections there ({error}); is its head "
            "node running, and is this its GCS address (`ray status` on the head prints it)?"
        ) from None
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # what ray.init uses (_private/node.py)
    except ImportError:
        return
    try:
        cluster = GcsClient(address=address).cluster_id  # one call, not ray.init's twenty tries
    except ray.exceptions.AuthenticationError as error:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address}: it refused this process's authentication token "
            f"({str(error).split('. ')[0]}){auth_hint()}"
        ) from None
    except (ray.exceptions.RayError, ConnectionError, RuntimeError, OSError) as error:
        log.info("ray_address_check_inconclusive", address=address, error=str(error)[:200])  # ray.init says more
    else:
        log.info("ray_address_checked", address=address, cluster_id=str(cluster))


def auth_hint() -> str:
    """What to set when the failure may be token authentication (on by default since Ray 2.59)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
            return (
                "; RAY_AUTH_MODE=token is set but no token is: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                "cluster's token (`ray get-auth-token` on its head node prints it)"
            )
        return "; if the cluster uses token authentication, check that RAY_AUTH_TOKEN is the cluster's token"
    return (
        "; if the cluster uses token authentication (Ray's default for clusters it starts since 2.59), set "
        "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to its token (`ray get-auth-token` on the "
        "head node prints it)"
    )


def ray_temp_dir(settings: Settings, name: str = "ray") -> Path:
    """A Ray temp dir ``<state>/<name>``, or a short /tmp link to it, short enough for Unix socket paths."""
    wanted = settings.state_path / name
    wanted.mkdir(parents=True, exist_ok=True)
    # Ray appends about 60 characters (session_<date>_<pid>/sockets/plasma_store).
    if len(str(wanted)) <= SOCKET_PATH_LIMIT - 70:
        return wanted
    digest = hashlib.sha1(str(wanted).encode()).hexdigest()[:10]
    link = Path(tempfile.gettempdir()) / f"semray-{digest}"
    if link.is_symlink() and link.resolve() != wanted.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(wanted, target_is_directory=True)
    return link


def _configure_data_context() -> None:
    from ray.data import DataContext  # ray.data outside pipeline/ only for global options (and release.py)

    from semray.cluster.release import KillActorsOnFailure

    # Ray Data narrates every dataset at INFO; keep its warnings, minus the one about
    # progress bars, which are on only where someone watches a terminal and semray draws none.
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    progress_logger = logging.getLogger(PROGRESS_LOGGER)
    if quiet_progress_notice not in progress_logger.filters:
        progress_logger.addFilter(quiet_progress_notice)
    for name in (EXCEPTIONS_LOGGER, EXECUTOR_LOGGER):
        failure_logger = logging.getLogger(name)
        if hide_reported_failure not in failure_logger.filters:
            failure_logger.addFilter(hide_reported_failure)
    context = DataContext.get_current()
    # Deterministic output order makes runs reproducible and ORDER BY ... LIMIT exact.
    context.execution_options.preserve_order = True
    context.enable_progress_bars = ray_data_progress_bars(sys.stderr.isatty())
    context.print_on_execution_start = False
    # A failed (or budget-stopped) execution's actors end at once, not when its last reference goes.
    if KillActorsOnFailure not in context.custom_execution_callback_classes:
        context.custom_execution_callback_classes.append(KillActorsOnFailure)
    _DATA_CONTEXT["configured"] = True


def quiet_progress_notice(record: logging.LogRecord) -> bool:
    """False for Ray Data's notice that its progress bars are off (they are off on purpose).

    >>> quiet_progress_notice(logging.makeLogRecord({"msg": "Progress bars disabled. To enable, ..."}))
    False
    """
    return "Progress bars disabled" not in record.getMessage()


AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def quiet_default_auth_notice(record: logging.LogRecord) -> bool:
    """False for Ray's notice, on every embedded start, that token auth is on by default: it is on
    on purpose (the cluster is semray's own, on loopback), and the notice told every CLI call how to
    turn it off. Ray's warning that token auth is *disabled* still reaches the console.

    >>> on = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    >>> off = "Token authentication is disabled for this Ray cluster. Anyone with network access ..."
    >>> quiet_default_auth_notice(logging.makeLogRecord({"msg": on}))
    False
    >>> quiet_default_auth_notice(logging.makeLogRecord({"msg": off}))
    True
    """
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def hide_reported_failure(record: logging.LogRecord) -> bool:
    """Keep Ray Data's narration of a failed execution (``EXCEPTIONS_LOGGER``, ``EXECUTOR_LOGGER``)
    off the console when the failure is a ``SemrayError``: semray raises it to the caller with a
    message naming the cause (the CLI prints that one line), so Ray's preface and stack trace on
    standard error would only bury it. The record still reaches Ray Data's log file: it is marked
    ``hide``, which only Ray Data's console handler drops (``HiddenRecordFilter``). Other failures
    (a bug in Ray) stay on the console.

    Ray Data logs these inside its ``except`` block, so the error is ``sys.exc_info()``.

    >>> from semray.errors import SourceError
    >>> record = logging.makeLogRecord({"msg": "Exception occurred in user code"})
    >>> try:
    ...     raise RuntimeError("task failed") from SourceError("t.csv: bad row")
    ... except RuntimeError:
    ...     hide_reported_failure(record), record.hide
    (True, True)
    """
    error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
    if names_semray_error(error):
        setattr(record, "hide", True)  # noqa: B010 (LogRecord declares no such attribute)
    return True


def names_semray_error(error: BaseException | None) -> bool:
    """Whether ``error`` is, wraps or was caused by a ``SemrayError`` (through ``__cause__``,
    ``__context__`` and a ``RayTaskError``'s ``cause``)."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, SemrayError):
            return True
        seen.add(id(current))
        cause = getattr(current, "cause", None)
        pending += [current.__cause__, current.__context__, cause if isinstance(cause, BaseException) else None]
    return False


def shutdown() -> None:
    if ray.is_initialized():
        ray.shutdown()
