"""Errors of the serving layer: whole-batch failures (per-row problems are error values, not these)."""

from __future__ import annotations

from semray.errors import SemrayError


class ServingError(SemrayError):
    """A model tier cannot serve (misconfigured, unreachable, not deployed)."""


class ServingConfigError(ServingError):
    """A tier's configuration is invalid or names something missing (model path, env var, backend)."""


class EndpointUnavailableError(ServingError):
    """An endpoint did not answer successfully after every retry; the message names the URL."""

    def __init__(self, url: str, attempts: int, last_error: str) -> None:
        super().__init__(
            f"model endpoint {url} did not answer after {attempts} attempts (last error: {last_error}); "
            "check that the server is running and the base_url in the tier config is right"
        )
        self.url = url
        self.attempts = attempts


class UnknownModelError(ServingError):
    """The backend does not serve the configured model."""

    def __init__(self, model: str, where: str, available: tuple[str, ...] = ()) -> None:
        hint = f"; available: {', '.join(available)}" if available else ""
        super().__init__(f"model {model!r} is not served by {where}{hint}; fix 'model' in the tier config")
        self.model = model


class TiersNotRunningError(ServingError):
    """A handle was used before ``start_tiers`` deployed the tiers (or after ``stop_tiers``)."""
