"""Run orchestration: connect Ray, start the model tiers, drive a journaled run and deliver its rows
(``execute.py``); resume records, progress, budgets, measuring inside a run; plan-time runs
(``plan_time/``: code generation and choice, join factorization) that happen before a plan lowers."""
