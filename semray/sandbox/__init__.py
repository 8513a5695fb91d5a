"""Running model-written code in a separate, limited process (docs/sandbox.md)."""

from semray.sandbox.worker import ALLOWED_MODULES, FUNCTION_NAME, Limits, SandboxWorker

__all__ = ["ALLOWED_MODULES", "FUNCTION_NAME", "Limits", "SandboxWorker"]
