"""semray.serving."""
