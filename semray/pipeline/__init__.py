"""semray.pipeline."""
