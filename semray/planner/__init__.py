"""The optimizer: rewrite rules, join ordering and model selection over logical plans.

>>> from semray.planner import optimize
>>> optimized = optimize(plan)  # doctest: +SKIP
"""

from semray.planner.optimize import Optimization, optimize, optimize_plan
from semray.planner.rules import RULES, apply_rules

__all__ = ["RULES", "Optimization", "apply_rules", "optimize", "optimize_plan"]
