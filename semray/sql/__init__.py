"""semray.sql."""
