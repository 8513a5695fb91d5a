"""semray.catalog."""
