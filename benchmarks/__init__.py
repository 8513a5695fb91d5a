"""Reproducible benchmarks: ``python -m benchmarks.NAME`` writes ``results/NAME.json`` and regenerates RESULTS.md.

The shared machinery (timing, memory sampling, machine facts, results files) lives in
:mod:`benchmarks.harness`; see ``benchmarks/README.md``.
"""
