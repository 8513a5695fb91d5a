"""semray.cluster."""
