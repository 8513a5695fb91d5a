"""structlog setup: readable on a terminal, JSON lines otherwise.

The CLI configures the level once; it is also put in the environment so that Ray worker
processes (actors, Serve replicas), which inherit it, log at the same level.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

LEVEL_ENV = "SEMRAY_LOG_LEVEL"
FORMAT_ENV = "SEMRAY_LOG_FORMAT"


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog for this process and the Ray workers it starts later."""
    os.environ[LEVEL_ENV] = level
    os.environ[FORMAT_ENV] = fmt
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=lambda *args: StderrLogger(),
        cache_logger_on_first_use=False,
    )


class StderrLogger:
    """Writes each event line to whatever ``sys.stderr`` is at the time of the call.

    structlog's PrintLogger keeps the stream it was created with; after pytest's output
    capture (or any redirection) closes that stream, logging would raise.
    """

    def msg(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    if not structlog.is_configured():
        # A library user or a Ray worker that never called configure_logging: take the
        # level from the environment (info by default) instead of structlog's "everything".
        configure_logging(os.environ.get(LEVEL_ENV, "info"), os.environ.get(FORMAT_ENV, "auto"))
    return structlog.get_logger(name)  # type: ignore[no-any-return]
