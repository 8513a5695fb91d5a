"""semray.planner."""
