"""semray.transactions."""
