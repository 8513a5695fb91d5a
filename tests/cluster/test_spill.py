"""Sort, join and group-by complete when the data exceeds the object store (spilling)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import sys
    import pyarrow as pa, pyarrow.parquet as pq
    import semray
    from semray.settings import Settings
    folder = sys.argv[1]
    rows = 1_000_000
    pad = "x" * 64
    table = pa.table({"k": pa.array(range(rows), pa.int64()),
                      "g": pa.array([i % 1000 for i in range(rows)], pa.int64()),
                      "s": pa.array([pad] * rows)})
    pq.write_table(table, folder + "/big.parquet", row_group_size=100_000)
    # 80 MB of object store for ~100 MB of data; gather_rows=0 forces shuffles.
    settings = Settings(state_dir=folder, object_store_bytes=80 * 1024 * 1024, gather_rows=0, batch_size=50_000)
    big = semray.read_parquet(folder + "/big.parquet", settings=settings)
    grouped = big.aggregate(by="g", n="count(*)").collect()
    assert grouped.num_rows == 1000 and set(grouped.column("n").to_pylist()) == {1000}, "group-by"
    top = big.sort("k", descending=True).limit(3).collect()
    assert top.column("k").to_pylist() == [rows - 1, rows - 2, rows - 3], "sort"
    joined = big.join(big.select("k", t="s || '!'"), "l.k = r.k").aggregate(n="count(*)").collect()
    assert joined.column("n").to_pylist() == [rows], "join"
    print("SPILL-OK")
    """
)


def test_shuffles_complete_beyond_object_store(tmp_path: Path) -> None:
    folder = Path("/tmp") / f"sr-spill-{tmp_path.name[-8:]}"
    folder.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(folder)], capture_output=True, text=True, timeout=900)
    assert "SPILL-OK" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
