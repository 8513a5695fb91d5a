"""``semray up`` / ``down``, attaching, ``semray submit`` and ``jobs``, loopback and keys, end to end.

One module-wide ``semray up`` (2 CPUs, the small and large tiers; large is an OpenAI-compatible
tier on ``semray sim serve`` on loopback, reached with a fake API key from the environment, small
the simulator), then: every listening socket of the cluster is on 127.0.0.1; a cached ``sql``
query attaches (no new Ray: no embedded temp dir, still one GCS) and its wall time is printed; a
submitted job's run is listed by ``semray runs ls`` on this side and a relative state folder is
refused inside the job; the fake key appears nowhere in the state folder, the journals, the Ray
logs or the job's logs. ``semray down`` then leaves none of the cluster's processes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from semray.cluster.local_cluster import LocalCluster, cluster_processes, read_record
from semray.demo import corpus
from semray.demo.models import DEMO_TASKS
from semray.serving.config import ServingConfig, TierConfig
from semray.serving.simulator.config import DatasetSpec, SimulatorConfig

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

FAKE_KEY = f"sk-fake-{secrets.token_hex(20)}"
"""Made here, never written in a source file (the job's working_dir uploads the checkout, tests included)."""
KEY_ENV = "SEMRAY_TEST_FAKE_API_KEY"
QUERY = "SELECT count(*) AS n FROM reviews WHERE SEM_FILTER('{review} is positive')"
LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


@dataclass(frozen=True)
class Up:
    root: Path
    state: Path
    data: Path
    models: Path
    env: dict[str, str]
    cluster: LocalCluster
    up_stderr: str


def _semray(up: Up | Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, str]:
    state = up.state if isinstance(up, Up) else up
    environment = env if env is not None else (up.env if isinstance(up, Up) else dict(os.environ))
    done = subprocess.run(
        [sys.executable, "-m", "semray.cli", "--state-dir", str(state), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


RAY_AGENT_PORT = 52365


def _hold(port: int) -> socket.socket | None:
    """Listen on ``port`` on loopback (None when something already does)."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
    except OSError:
        holder.close()
        return None
    holder.listen()
    return holder


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    root = Path(f"/tmp/sru-{os.getpid()}")  # short: Ray's Unix sockets live under the state folder
    root.mkdir()
    data, state = root / "data", root / "s"
    corpus.write(data, rows=120)
    reviews = DatasetSpec(
        key_column="review_id", text_columns=("review",), path=data / "reviews.csv", labels_path=data / "labels.csv"
    )
    simulator = SimulatorConfig.model_validate({"datasets": {"reviews": reviews}, "tasks": DEMO_TASKS})
    (root / "sim.json").write_text(simulator.model_dump_json(), encoding="utf-8")
    port = _free_port()
    env = {**os.environ, KEY_ENV: FAKE_KEY, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "SEMRAY_STATE_DIR", "SEMRAY_MODELS"):
        env.pop(name, None)
    sim_log = (root / "sim.log").open("wb")
    sim = subprocess.Popen(
        [sys.executable, "-m", "semray.cli", "sim", "serve", "--config", str(root / "sim.json"), "--port", str(port)],
        env=env,
        stdout=sim_log,
        stderr=sim_log,
    )
    large = TierConfig(backend="openai", model="sim-large", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV)
    profile = ServingConfig(simulator=simulator, large=large)
    models = root / "models.json"
    models.write_text(profile.model_dump_json(), encoding="utf-8")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.3)
    base = Up(root, state, data, models, env, LocalCluster("", "", "", "", 0, 0, 0.0), "")
    # Another Ray on the machine holds Ray's default agent port (as this session's own Ray does
    # when an earlier test started it): the head must still get a job agent.
    agent_port = _hold(RAY_AGENT_PORT)
    try:
        started = time.perf_counter()
        code, _, stderr = _semray(
            base, "--models", str(models), "up", "--num-cpus", "2", "--tier", "small", "--tier", "large"
        )
        assert code == 0, stderr[-4000:]
        sys.stdout.write(f"semray up took {time.perf_counter() - started:.1f} s\n")
        record = read_record(base_settings(state))
        assert record is not None
        yield Up(root, state, data, models, env, record, stderr)
    finally:
        if agent_port is not None:
            agent_port.close()
        record = read_record(base_settings(state))
        code, _, stderr = _semray(base, "down")
        assert code == 0, stderr
        sim.terminate()
        sim.wait(timeout=30)
        sim_log.close()
        if record is not None:
            assert not cluster_processes(record), "semray down left processes of the cluster running"
        assert read_record(base_settings(state)) is None
        shutil.rmtree(root, ignore_errors=True)


def base_settings(state: Path) -> object:
    from semray.settings import Settings

    return Settings(state_dir=state)


def test_every_listening_socket_of_the_cluster_is_on_loopback(up: Up) -> None:
    assert up.cluster.address.startswith("127.0.0.1:") and up.cluster.dashboard_url.startswith("http://127.0.0.1:")
    pids = {process.pid for process in cluster_processes(up.cluster)}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert len(listening) >= 5, "expected the GCS, raylet, dashboard, agents and replicas to listen"
    exposed = [(c.laddr.ip, c.laddr.port, c.pid) for c in listening if c.laddr.ip not in LOOPBACK]
    assert not exposed, subprocess.run(["ss", "-tlnp"], capture_output=True, text=True).stdout


def test_a_cached_query_attaches_instead_of_starting_ray(up: Up) -> None:
    table = ["-t", f"reviews={up.data / 'reviews.csv'}"]
    first = _semray(up, "--models", str(up.models), "sql", QUERY, *table)
    assert first[0] == 0, first[2][-3000:]
    started = time.perf_counter()
    code, out, err = _semray(up, "--models", str(up.models), "sql", QUERY, *table)
    seconds = time.perf_counter() - started
    assert code == 0, err[-3000:]
    assert f"attached to the local cluster of `semray up` at {up.cluster.address}" in err
    assert out == first[1] and any(line.strip("│ ").isdigit() for line in out.splitlines())
    assert not (up.state / "ray").exists(), "an embedded Ray was started under the state folder"
    gcs = [p for p in cluster_processes(up.cluster) if p.name() == "gcs_server"]
    assert len(gcs) == 1
    sys.stdout.write(f"cached sql attached to `semray up`: {seconds:.1f} s wall\n")


def test_a_submitted_job_journals_into_the_shared_state_folder(up: Up) -> None:
    command = ["--models", str(up.models), "sql", QUERY, "-t", f"reviews={up.data / 'reviews.csv'}"]
    code, out, err = _semray(up, "submit", "--state-dir", str(up.state), "--wait", "--", *command)
    assert code == 0, (out + err)[-4000:]
    job_id = out.splitlines()[0].strip()
    listed = _semray(up, "jobs", "ls", "--format", "json")
    jobs = [json.loads(line) for line in listed[1].splitlines()]
    assert any(job["job_id"] == job_id and job["status"] == "SUCCEEDED" for job in jobs), listed
    runs = _semray(up, "runs", "ls", "--format", "json")
    assert runs[0] == 0
    run_ids = {json.loads(line)["run_id"] for line in runs[1].splitlines()}
    logs = _semray(up, "jobs", "logs", job_id)[1]
    assert any(run_id in logs for run_id in run_ids), "the job's run is not in the submitting side's `runs ls`"

    relative = ["--state-dir", "rel", *command]
    code, out, err = _semray(up, "submit", "--state-dir", str(up.state), "--wait", "--", *relative)
    assert code == 1
    assert "SEMRAY_STATE_DIR" in out and "temporary working directory" in out, out[-3000:]


def test_the_api_key_is_nowhere_in_logs_journals_or_state(up: Up) -> None:
    code, _, err = _semray(up, "--models", str(up.models), "sql", QUERY, "-t", f"reviews={up.data / 'reviews.csv'}")
    assert code == 0, err[-3000:]
    assert FAKE_KEY not in err and FAKE_KEY not in up.up_stderr
    files = 0
    needle = FAKE_KEY.encode()
    for path in up.state.rglob("*"):
        if path.is_file() and not path.is_symlink() and not path.is_socket():
            files += 1
            assert needle not in path.read_bytes(), f"the API key was written to {path}"
    assert files > 20, "expected journals, cache and Ray logs under the state folder"
    jobs = _semray(up, "jobs", "ls", "--format", "json")[1]
    for line in jobs.splitlines():
        assert FAKE_KEY not in _semray(up, "jobs", "logs", json.loads(line)["job_id"])[1]
