"""semray.cost_model."""
