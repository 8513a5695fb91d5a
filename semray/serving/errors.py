"""Errors of the serving layer: whole-batch failures (per-row problems are error values, not these).

Every failure of an OpenAI-compatible endpoint is an ``EndpointError`` (or a subclass kept for
the older names: ``EndpointUnavailableError``, ``EndpointAuthError``, ``EndpointModelError``,
``EndpointResponseError``). Its fields are attributes, its message names the URL, the model,
the HTTP status, the attempts and what to do, and it pickles (it crosses Ray process
boundaries inside Ray's own error wrapper).

>>> error = EndpointUnavailableError("http://127.0.0.1:9/v1/chat/completions", "m", "unreachable",
...     "ConnectError: connection refused", attempts=3)
>>> (error.reason, error.attempts, error.status)
('unreachable', 3, None)
>>> "is the server running at http://127.0.0.1:9/v1" in str(error)
True
"""

from __future__ import annotations

from typing import Any, Literal

from semray.errors import SemrayError

EndpointReason = Literal[
    "unreachable",
    "timeout",
    "rate_limited",
    "server_error",
    "unauthorized",
    "unknown_model",
    "not_found",
    "invalid_json",
    "malformed_body",
    "rejected",
    "no_prompt_logprobs",
]
"""Why an endpoint failed a whole batch (``EndpointError.reason``)."""

_SUMMARY: dict[str, str] = {
    "unreachable": "could not be reached",
    "timeout": "did not answer in time",
    "rate_limited": "kept refusing with HTTP 429 (rate limited)",
    "server_error": "kept failing with a server error",
    "unauthorized": "refused the API key",
    "unknown_model": "does not serve the model",
    "not_found": "has no such route",
    "invalid_json": "answered with a body that is not JSON",
    "malformed_body": "answered with a body that is not an OpenAI chat completion",
    "rejected": "rejected the request",
    "no_prompt_logprobs": "answered without the prompt's token logprobs",
}


class ServingError(SemrayError):
    """A model tier cannot serve (misconfigured, unreachable, not deployed)."""


class ServingConfigError(ServingError):
    """A tier's configuration is invalid or names something missing (model path, env var, backend)."""


class UnknownModelError(ServingError):
    """The backend does not serve the configured model."""

    def __init__(self, model: str, where: str, available: tuple[str, ...] = ()) -> None:
        hint = f"; available: {', '.join(available)}" if available else ""
        super().__init__(f"model {model!r} is not served by {where}{hint}; fix 'model' in the tier config")
        self.model = model
        self.available = available


class EndpointError(ServingError):
    """An OpenAI-compatible endpoint could not answer a batch.

    Attributes: ``url`` (the URL requested), ``model``, ``reason`` (an ``EndpointReason``),
    ``detail`` (what went wrong, e.g. the last transport error), ``status`` (the last HTTP
    status, None when no response came), ``attempts`` (requests made), ``hint`` (what to do),
    ``available`` (models the server lists, for ``unknown_model``).
    """

    def __init__(
        self,
        url: str,
        model: str,
        reason: EndpointReason,
        detail: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        hint: str = "",
        available: tuple[str, ...] = (),
    ) -> None:
        self.url = url
        self.model = model
        self.reason: EndpointReason = reason
        self.detail = detail
        self.status = status
        self.attempts = attempts
        self.available = tuple(available)
        self.hint = hint or default_hint(reason, url, model, self.available)
        status_text = f"HTTP {status}" if status is not None else "no HTTP response"
        plural = "attempt" if attempts == 1 else "attempts"
        message = (
            f"model endpoint {url} (model {model!r}) {_SUMMARY.get(reason, reason)} "
            f"[{reason}, {status_text}] after {attempts} {plural}: {detail}; {self.hint}"
        )
        # Not super().__init__: a subclass may also derive from UnknownModelError, whose
        # constructor takes other arguments; the message is all Exception needs.
        ServingError.__init__(self, message)

    def fields(self) -> dict[str, Any]:
        """The constructor's arguments, e.g. for a log event or to rebuild the error."""
        return {
            "url": self.url,
            "model": self.model,
            "reason": self.reason,
            "detail": self.detail,
            "status": self.status,
            "attempts": self.attempts,
            "hint": self.hint,
            "available": self.available,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_endpoint_error, (type(self), self.fields()))


def _rebuild_endpoint_error(cls: type[EndpointError], fields: dict[str, Any]) -> EndpointError:
    fields = dict(fields)
    url, model, reason, detail = fields.pop("url"), fields.pop("model"), fields.pop("reason"), fields.pop("detail")
    return cls(url, model, reason, detail, **fields)


def base_of(url: str) -> str:
    """The endpoint's base URL from a request URL (``.../v1/chat/completions`` -> ``.../v1``)."""
    for suffix in ("/chat/completions", "/completions", "/models"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def default_hint(reason: str, url: str, model: str, available: tuple[str, ...] = ()) -> str:
    """What to do about an endpoint failure of this kind."""
    base = base_of(url)
    if reason == "unreachable":
        return f"is the server running at {base}? check base_url in the tier config"
    if reason == "timeout":
        return f"the server at {base} is too slow or stuck; raise timeout_s in the tier config or check its load"
    if reason == "rate_limited":
        return "lower max_concurrency, or raise max_retries / backoff_s in the tier config"
    if reason == "server_error":
        return f"the server at {base} fails on every attempt; check its logs"
    if reason == "unauthorized":
        return "check the API key in the environment variable named by api_key_env in the tier config"
    if reason == "unknown_model":
        listed = f"; it serves: {', '.join(available)}" if available else ""
        return f"model {model!r} is not served there{listed}; fix 'model' in the tier config"
    if reason == "not_found":
        return f"check base_url (it usually ends in /v1): {url} does not exist"
    if reason == "rejected":
        return f"check the request against what the server at {base} accepts (its message is above)"
    if reason == "no_prompt_logprobs":
        return (
            "score with an endpoint whose /v1/completions echoes the prompt with token logprobs (echo: true, "
            'logprobs: 1; vLLM\'s OpenAI server does), or with a local transformers model (backend = "hf")'
        )
    return f"check that base_url {base} points at an OpenAI-compatible /v1 endpoint"


class EndpointUnavailableError(EndpointError):
    """The endpoint did not answer successfully after every retry (connection errors, timeouts,
    429, 5xx) or has no such route (404)."""


class EndpointAuthError(EndpointError, ServingConfigError):
    """The endpoint refused the API key (HTTP 401/403); a configuration problem, not retried."""


class EndpointModelError(EndpointError, UnknownModelError):
    """The endpoint does not serve the configured model (HTTP 404 naming the model)."""


class EndpointResponseError(EndpointError):
    """The endpoint answered, but not with a chat completion (invalid JSON, missing ``choices``,
    content of the wrong type, no ``usage``): it is not speaking the OpenAI protocol."""


class PromptLogprobsError(EndpointResponseError):
    """A scorer endpoint rejected a prompt-scoring request or answered without the prompt's token logprobs
    (``serving/prompt_logprobs.py``): it cannot score text, so the confidence signals cannot run on it."""


class TiersNotRunningError(ServingError):
    """A handle was used before ``start_tiers`` deployed the tiers (or after ``stop_tiers``)."""


class TierDeployError(ServingError):
    """A tier's Serve application did not come up: its replicas failed to start, or it was not
    RUNNING within ``ServingConfig.deploy_timeout_s``. ``app``, ``status`` and ``serve_message``
    (what Serve says about it) are attributes."""

    def __init__(self, message: str, *, app: str, status: str, serve_message: str) -> None:
        super().__init__(message)
        self.app = app
        self.status = status
        self.serve_message = serve_message


class TierResourcesError(TierDeployError):
    """The replicas of the tiers to deploy ask for more CPUs or GPUs than the cluster has free,
    so Serve would wait for them forever; nothing was deployed. ``resource``, ``needed``,
    ``free``, ``total`` and ``tiers`` (the apps that would not fit) are attributes."""

    def __init__(
        self, message: str, *, resource: str, needed: float, free: float, total: float, tiers: tuple[str, ...]
    ) -> None:
        super().__init__(message, app=", ".join(tiers), status="NOT_STARTED", serve_message="")
        self.resource = resource
        self.needed = needed
        self.free = free
        self.total = total
        self.tiers = tiers


class TierConfigMismatchError(ServingError):
    """A Serve app with a tier's name already runs that tier with another configuration (another
    model profile, simulator tables or cache path) and was not deployed by this run, so it is left
    alone. ``app``, ``tier``, ``deployed`` and ``wanted`` (digest and backend:model) are attributes."""

    def __init__(self, message: str, *, app: str, tier: str, deployed: str, wanted: str) -> None:
        super().__init__(message)
        self.app = app
        self.tier = tier
        self.deployed = deployed
        self.wanted = wanted
