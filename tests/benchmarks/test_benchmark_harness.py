"""The benchmark harness: memory sampling, results files, RESULTS.md, skipping without shared data."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.harness import (
    BenchmarkResult,
    MemorySampler,
    MissingData,
    benchmark_parser,
    command_line,
    machine,
    package_versions,
    processes_matching,
    regenerate_report,
    repeat,
    require_shared_data,
    run_benchmark,
    write_result,
)


def make_result(name: str, markdown: str) -> BenchmarkResult:
    return BenchmarkResult(
        name=name,
        title=f"Title of {name}",
        command=f"python -m benchmarks.{name}",
        parameters={"rows": 10},
        figures={"seconds": 1.5},
        markdown=markdown,
        started_at="2026-01-01T00:00:00+00:00",
        load_before=[0.5, 0.4, 0.3],
    )


def test_sampler_sees_memory_allocated_in_a_phase() -> None:
    with MemorySampler(interval=0.01, object_store=False) as sampler:
        with sampler.phase("small"):
            pass
        with sampler.phase("large"):
            block = bytearray(64 << 20)
            block[::4096] = b"x" * len(block[::4096])  # touch every page so it counts
            sampler.sample()
            del block
    small, large = sampler.peak("small"), sampler.peak("large")
    assert large.pss_bytes - small.pss_bytes > 48 << 20
    assert sampler.peak().pss_bytes >= large.pss_bytes
    assert large.object_store_bytes is None
    assert set(sampler.phase_peaks()) == {"small", "large"}
    assert large.processes >= 1


def test_sampler_counts_children_and_marked_processes(tmp_path: Path) -> None:
    marker = tmp_path / "marker-file"
    marker.write_text("")
    child = subprocess.Popen(["tail", "-f", str(marker)], stdout=subprocess.DEVNULL)
    try:
        assert child.pid in processes_matching([str(marker)])
        sampler = MemorySampler(object_store=False)
        assert sampler.sample().processes >= 2  # this process and its child
    finally:
        child.kill()
        child.wait()


def test_machine_and_packages_are_recorded() -> None:
    facts = machine()
    assert facts["logical_cores"] >= 1 and facts["memory_bytes"] > 0 and facts["cpu_model"]
    versions = package_versions(("pyarrow", "surely-not-installed-package"))
    assert versions["pyarrow"] and versions["surely-not-installed-package"] is None


def test_each_benchmark_owns_its_section(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_result(make_result("alpha", "alpha table"), results)
    write_result(make_result("beta", "beta table v1"), results)
    write_result(make_result("beta", "beta table v2"), results)
    report = (tmp_path / "RESULTS.md").read_text()
    assert "## Title of alpha (`alpha`)" in report and "alpha table" in report
    assert "beta table v2" in report and "beta table v1" not in report
    assert report.index("alpha table") < report.index("beta table")
    assert "command: `python -m benchmarks.beta`" in report and "load average" in report
    data = json.loads((results / "beta.json").read_text())
    assert data["figures"] == {"seconds": 1.5} and data["machine"]["logical_cores"] >= 1
    (results / "alpha.json").unlink()
    assert "alpha" not in regenerate_report(results).read_text()


def test_hand_written_notes_survive_regeneration(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "alpha.md").write_text("### Re-measured by hand\n\nalpha note\n")
    write_result(make_result("alpha", "alpha table v1"), results)
    write_result(make_result("beta", "beta table"), results)
    write_result(make_result("alpha", "alpha table v2"), results)
    report = (tmp_path / "RESULTS.md").read_text()
    assert "alpha table v2" in report and "alpha note" in report
    assert report.index("alpha table v2") < report.index("alpha note") < report.index("beta table")


def test_missing_shared_data_skips_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEMRAY_SHARED_DATA", str(tmp_path / "absent"))
    parser = benchmark_parser("needsdata", "test")

    def body(args: object, command: str) -> BenchmarkResult:
        require_shared_data("enron")
        raise AssertionError("unreachable")

    results = ["--results-dir", str(tmp_path / "results")]
    assert run_benchmark("needsdata", parser, body, ["--skip-if-missing", *results]) == 0
    assert "skipped" in capsys.readouterr().err
    assert run_benchmark("needsdata", parser, body, results) == 2
    assert "absent" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_shared_data_found_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "enron").mkdir()
    monkeypatch.setenv("SEMRAY_SHARED_DATA", str(tmp_path))
    assert require_shared_data("enron") == tmp_path / "enron"
    with pytest.raises(MissingData, match="medical"):
        require_shared_data("medical")


def test_command_line_reproduces_arguments() -> None:
    assert (
        command_line("relational", ["--rows", "10", "--note", "a b"])
        == "python -m benchmarks.relational --rows 10 --note 'a b'"
    )


def test_repeat_returns_every_duration() -> None:
    value, seconds = repeat(lambda: 7, 3)
    assert value == 7 and len(seconds) == 3 and all(s >= 0 for s in seconds)


def test_a_sampler_without_pss_reads_no_process() -> None:
    # A process measured from outside (run_measured) samples only the object store itself.
    reading = MemorySampler(object_store=False, pss=False).sample()
    assert (reading.pss_bytes, reading.processes) == (0, 0)
