"""The sandbox's hostile-code corpus: every attempt outside it is a typed SandboxError, and the
engine process is unaffected (no file appears, its environment and state stay as they were).

Each case starts a sandbox child (about half a second: it imports pandas and pyarrow).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from semray.errors import (
    SandboxCodeError,
    SandboxError,
    SandboxMemoryError,
    SandboxOutputError,
    SandboxTimeoutError,
    SandboxViolationError,
)
from semray.sandbox import Limits, SandboxWorker

BATCH = pa.table({"raw": ["3 Jan 2024", "2024-02-05", None], "other": [1, 2, 3]})
LENGTHS = "import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'n': batch['raw'].str.len()})\n"
LIMITS = Limits(cpu_s=2.0, memory_mb=256, wall_s=8.0)


def run(code: str, batch: pa.Table = BATCH, outputs: tuple[tuple[str, str], ...] = (("n", "int"),)) -> pa.Table:
    with SandboxWorker(code, ("raw",), outputs, LIMITS) as worker:
        return worker.run(batch)


def test_a_function_runs_over_its_input_columns_only() -> None:
    code = (
        "import pandas as pd\n"
        "def transform(batch):\n"
        "    assert list(batch.columns) == ['raw']\n"
        "    return pd.DataFrame({'n': batch['raw'].str.len()})\n"
    )
    assert run(code).to_pylist() == [{"n": 10}, {"n": 10}, {"n": None}]


def test_a_long_lived_worker_serves_many_batches() -> None:
    with SandboxWorker(LENGTHS, ("raw",), (("n", "int"),), LIMITS) as worker:
        first = worker.run(BATCH)
        started = time.perf_counter()
        again = worker.run(pa.table({"raw": ["abc"]}))
        assert time.perf_counter() - started < 1.0  # no new process per batch
    assert first.num_rows == 3 and again.to_pylist() == [{"n": 3}]


def test_dates_and_every_value_type_come_back_typed() -> None:
    code = (
        "import datetime, pandas as pd\n"
        "def transform(batch):\n"
        "    n = len(batch)\n"
        "    return pd.DataFrame({'t': ['x'] * n, 'i': [1.0] * n, 'f': [2] * n, 'b': [True] * n,\n"
        "                         'd': [datetime.date(2024, 1, 3)] * (n - 1) + ['2024-01-04']})\n"
    )
    outputs = (("t", "text"), ("i", "int"), ("f", "float"), ("b", "bool"), ("d", "date"))
    table = run(code, outputs=outputs)
    assert [str(field.type) for field in table.schema] == ["string", "int64", "double", "bool", "date32[day]"]
    assert str(table["d"][2]) == "2024-01-04"


def test_code_that_loops_forever_is_stopped_by_its_cpu_limit() -> None:
    started = time.perf_counter()
    with pytest.raises(SandboxTimeoutError, match="CPU limit of 2s"):
        run("def transform(batch):\n    while True:\n        pass\n")
    assert time.perf_counter() - started < LIMITS.wall_s + 5


def test_code_that_sleeps_past_the_wall_clock_is_killed() -> None:
    # No CPU used, so only the parent's wall-clock timeout can stop it.
    code = "import itertools\ndef transform(batch):\n    import time\n"
    with pytest.raises(SandboxViolationError, match="import 'time'"):
        run(code)
    waiting = "def transform(batch):\n    import pyarrow\n    pyarrow.lib.time.sleep(60)\n"
    with SandboxWorker(waiting, ("raw",), (("n", "int"),), Limits(cpu_s=5.0, memory_mb=256, wall_s=1.5)) as worker:
        started = time.perf_counter()
        with pytest.raises(SandboxTimeoutError, match=r"wall-clock limit of 1\.5s"):
            worker.run(BATCH)
        assert time.perf_counter() - started < 6


def test_unbounded_allocation_hits_the_memory_limit() -> None:
    with pytest.raises(SandboxMemoryError, match="256 MB"):
        run("def transform(batch):\n    hoard = []\n    while True:\n        hoard.append(bytearray(10**7))\n")


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        ("import socket\ndef transform(batch):\n    pass\n", "import 'socket'"),
        ("def transform(batch):\n    __import__('_socket').socket()\n", "import '_socket'"),
        ("import os\ndef transform(batch):\n    pass\n", "import 'os'"),
        ("import subprocess\ndef transform(batch):\n    pass\n", "import 'subprocess'"),
        ("from os import environ\ndef transform(batch):\n    pass\n", "import 'os'"),
        ("def transform(batch):\n    open('/etc/passwd').read()\n", "NameError"),
    ],
)
def test_imports_outside_the_allow_list_are_violations(code: str, refused: str) -> None:
    with pytest.raises(SandboxError, match=refused):
        run(code)


def test_opening_a_socket_through_a_loaded_module_is_refused() -> None:
    code = "def transform(batch):\n    import pandas\n    pandas.io.common.os.system('true')\n"
    with pytest.raises(SandboxViolationError, match=r"os\.system"):
        run(code)


ESCAPE = (
    "def transform(batch):\n"
    "    for cls in ().__class__.__base__.__subclasses__():\n"
    "        if cls.__name__ == '_wrap_close':\n"
    "            cls.__init__.__globals__[{name!r}]('touch /tmp/semray-sandbox-pwned')\n"
)


def test_escaping_through_object_subclasses_is_refused() -> None:
    with pytest.raises(SandboxViolationError, match=r"os\.system"):
        run(ESCAPE.format(name="system"))
    # os.popen needs new pipe fds, which RLIMIT_NOFILE refuses before the audit hook sees Popen:
    # the OS limit carries the weight here.
    with pytest.raises(SandboxError, match=r"Too many open files|subprocess"):
        run(ESCAPE.format(name="popen"))
    assert not Path("/tmp/semray-sandbox-pwned").exists()


def test_writing_files_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    target = tmp_path / "leak.csv"
    code = f"import pandas as pd\ndef transform(batch):\n    batch.to_csv({str(target)!r})\n"
    with pytest.raises(SandboxViolationError, match="open"):
        run(code)
    assert not target.exists()


def test_a_violation_swallowed_by_the_code_is_still_reported() -> None:
    code = (
        "import pandas as pd\n"
        "def transform(batch):\n"
        "    try:\n"
        "        pd.io.common.os.system('true')\n"
        "    except Exception:\n"
        "        pass\n"
        "    return pd.DataFrame({'n': [1] * len(batch)})\n"
    )
    with pytest.raises(SandboxViolationError, match=r"os\.system"):
        run(code)


def test_the_engine_environment_is_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMRAY_TEST_SECRET", "hunter2")
    code = (
        "import pandas as pd\n"
        "def transform(batch):\n"
        "    env = pd.io.common.os.environ\n"
        "    return pd.DataFrame({'t': [env.get('SEMRAY_TEST_SECRET', 'absent')] * len(batch)})\n"
    )
    assert run(code, outputs=(("t", "text"),))["t"].to_pylist() == ["absent"] * 3
    assert os.environ["SEMRAY_TEST_SECRET"] == "hunter2"


def test_reading_the_environment_by_import_is_refused() -> None:
    with pytest.raises(SandboxViolationError, match="import 'os'"):
        run("def transform(batch):\n    import os\n    return os.environ['HOME']\n")


def test_the_code_raising_is_a_code_error_with_its_line() -> None:
    with pytest.raises(SandboxCodeError, match=r"ValueError: no date here \(line 2: raise ValueError"):
        run("def transform(batch):\n    raise ValueError('no date here')\n")


def test_code_without_transform_is_a_code_error() -> None:
    with pytest.raises(SandboxCodeError, match="no function 'transform'"):
        run("def convert(batch):\n    return batch\n")


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("def transform(batch):\n    return 3\n", "returned int"),
        ("import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'n': [1]})\n", "1 rows for 3"),
        ("import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'m': [1] * 3})\n", "missing"),
        ("import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'n': ['x'] * 3})\n", "not a int"),
        ("import pandas as pd\ndef transform(batch):\n    return pd.DataFrame({'n': [1.5] * 3})\n", "fractional"),
    ],
)
def test_wrong_results_are_output_errors(code: str, problem: str) -> None:
    with pytest.raises(SandboxOutputError, match=problem):
        run(code)


def test_a_worker_recovers_after_its_child_died() -> None:
    code = (
        "import pandas as pd\n"
        "def transform(batch):\n"
        "    if batch['raw'].iloc[0] == 'spin':\n"
        "        while True:\n"
        "            pass\n"
        "    return pd.DataFrame({'n': batch['raw'].str.len()})\n"
    )
    with SandboxWorker(code, ("raw",), (("n", "int"),), Limits(cpu_s=1.0, memory_mb=256, wall_s=8.0)) as worker:
        with pytest.raises(SandboxTimeoutError):
            worker.run(pa.table({"raw": ["spin"]}))
        assert worker.run(pa.table({"raw": ["ab"]})).to_pylist() == [{"n": 2}]
