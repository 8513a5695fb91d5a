"""semray.sources."""
