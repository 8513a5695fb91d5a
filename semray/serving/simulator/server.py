"""The simulator as an OpenAI-compatible HTTP endpoint on loopback (FastAPI + uvicorn).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``GET /stats``, ``GET /health``. Errors use OpenAI's shape:
``{"error": {"message", "type", "param", "code"}}`` (400 for over-long prompts, 404 for unknown models,
422 with code ``no_label`` for a prompt the labels do not answer: nothing is charged for it).

>>> app = build_app(Simulator(config))  # doctest: +SKIP
>>> serve(Path("sim.json"), port=8765)  # doctest: +SKIP  (blocks)
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from semray.log import get_logger
from semray.serving.simulator.config import SimulatorConfig
from semray.serving.simulator.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    NoLabelError,
    SimulatorError,
    UnknownModelError,
)
from semray.serving.simulator.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelList,
)
from semray.serving.simulator.simulator import Simulator
from semray.serving.simulator.stats import SimulatorStats

log = get_logger(__name__)


def _error(status: int, message: str, kind: str, code: str | None, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(status_code=status, content=body)


def build_app(simulator: Simulator) -> FastAPI:
    """A FastAPI app serving ``simulator``; every route runs the same code as in-process calls."""
    app = FastAPI(title="semray simulated model tier", description="Simulated: answers come from labels.")

    @app.exception_handler(ContextLengthExceededError)
    async def _too_long(_: Request, error: ContextLengthExceededError) -> JSONResponse:
        return _error(400, str(error), "invalid_request_error", "context_length_exceeded", "messages")

    @app.exception_handler(UnknownModelError)
    async def _unknown_model(_: Request, error: UnknownModelError) -> JSONResponse:
        return _error(404, str(error), "invalid_request_error", "model_not_found", "model")

    @app.exception_handler(NoLabelError)
    async def _no_label(_: Request, error: NoLabelError) -> JSONResponse:
        return _error(422, str(error), "invalid_request_error", "no_label", error.reason)

    @app.exception_handler(InvalidRequestError)
    async def _invalid(_: Request, error: InvalidRequestError) -> JSONResponse:
        return _error(400, str(error), "invalid_request_error", None, error.param)

    @app.exception_handler(SimulatorError)
    async def _simulator_error(_: Request, error: SimulatorError) -> JSONResponse:
        return _error(500, str(error), "server_error", None)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(400, f"invalid request body: {error.errors()}", "invalid_request_error", None)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatCompletionRequest) -> ChatCompletionResponse:
        return await simulator.complete(request)

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> CompletionResponse:
        return await simulator.complete_text(request)

    @app.get("/v1/models")
    async def models() -> ModelList:
        return simulator.models()

    @app.get("/stats")
    async def stats() -> SimulatorStats:
        return simulator.stats()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "simulated": True}

    return app


def _require_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SimulatorError(f"the simulator binds loopback only; got host {host!r} (use 127.0.0.1)")


def serve(config_path: Path | None, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the simulator endpoint until interrupted (blocking).

    Without ``config_path`` the simulator has its default models and no datasets, so every
    prompt is a no-match, refused with HTTP 422 ``no_label`` (and ``/stats`` says so).
    """
    import uvicorn

    _require_loopback(host)
    config = SimulatorConfig.from_file(config_path) if config_path is not None else SimulatorConfig()
    if config_path is None:
        log.warning("simulator_without_labels", message="no config given: every prompt will match no row")
    simulator = Simulator(config)
    log.info("simulator_serving", url=f"http://{host}:{port}/v1", models=sorted(config.models))
    uvicorn.run(build_app(simulator), host=host, port=port, log_level="warning")
