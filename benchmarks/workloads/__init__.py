"""Workload benchmarks: semray and its peers (LOTUS, Palimpzest) on the same simulated models.

Each workload module (``enron``, ``medical``, ``reviews``, ``scaling``) is one command,
``python -m benchmarks.workloads.NAME``. It builds a simulator config from the labels, serves
it over HTTP on 127.0.0.1, runs every system in a fresh process against it (semray with
``benchmarks.workloads.semray_runner``, the peers with ``benchmarks/peers/*_runner.py`` in their
own virtual environments), scores the answers against the labels (``scoring``) and writes
``benchmarks/results/NAME.json`` and its section of ``benchmarks/RESULTS.md``. ``cli`` holds
the options, run and result code they share; ``report`` the tables.
"""
