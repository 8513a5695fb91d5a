"""semray.demo."""
