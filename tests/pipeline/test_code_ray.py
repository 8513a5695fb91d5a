"""SemCode end to end on a local Ray: user code runs sandboxed per actor; a failure in the sandbox
is a typed error of the query, and the engine process carries on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import semray
from semray.errors import CodeGenerationUnavailableError, SandboxViolationError
from semray.settings import Settings

pytestmark = pytest.mark.ray

PARSE = (
    "import pandas as pd\n"
    "def transform(batch):\n"
    "    days = pd.to_datetime(batch['raw'], format='mixed', errors='coerce')\n"
    "    return pd.DataFrame({'day': days.dt.date, 'year': days.dt.year})\n"
)
TABLE = pa.table({"raw": ["3 Jan 2024", "2024-02-05", "not a date"], "n": [1, 2, 3]})


def test_user_code_runs_sandboxed_and_explain_shows_it(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", num_cpus=2)
    query = semray.from_arrow(TABLE, "d", settings).sem_code("Parse {raw}", "day: date, year: int", code=PARSE)
    result = query.execute()
    assert [str(day) if day else None for day in result.table["day"].to_pylist()] == ["2024-01-03", "2024-02-05", None]
    assert result.table["year"].to_pylist() == [2024, 2024, None] and result.run_id is None  # no model call
    text = query.explain()
    assert "Code[sha256:" in text and "def transform(batch):" in text and "CPU only" in text


def test_a_violation_fails_the_query_with_a_typed_error(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", num_cpus=2)
    hostile = "import pandas as pd\ndef transform(batch):\n    pd.io.common.os.system('true')\n"
    query = semray.from_arrow(TABLE, "d", settings).sem_code("Parse {raw}", "day: date", code=hostile)
    with pytest.raises(SandboxViolationError, match=r"os\.system"):
        query.collect()
    assert semray.from_arrow(TABLE, "d", settings).filter("n > 1").collect().num_rows == 2  # the engine carries on


def test_generation_on_the_simulated_tier_is_refused_before_any_call(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", num_cpus=2)
    query = semray.from_arrow(TABLE, "d", settings).sem_code("Parse {raw}", "day: date")
    with pytest.raises(CodeGenerationUnavailableError, match="configure a real large tier"):
        query.collect()
    assert not (tmp_path / "state" / "runs").exists() or not any((tmp_path / "state" / "runs").iterdir())
