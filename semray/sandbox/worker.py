"""The parent side of the sandbox: a long-lived child process that runs one function over batches.

Each ``SandboxWorker`` starts ``python -I -c <child.py>`` with an empty environment (only
thread-count variables), an empty temporary working directory it cannot write to, no inherited
file descriptors besides its two protocol pipes, in its own session. Batches go over the pipes as
Arrow IPC; the parent waits at most ``wall_s`` per batch and kills the child's process group past
it. A child that died (its CPU limit, memory, a crash) or broke a rule is replaced before the next
batch; the engine process never runs the code.

>>> worker = SandboxWorker(code, inputs=("raw",), outputs=(("iso", "date"),))  # doctest: +SKIP
>>> worker.run(pa.table({"raw": ["3 Jan 2024"]}))  # doctest: +SKIP
>>> worker.close()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from semray.errors import (
    SandboxCodeError,
    SandboxCrashError,
    SandboxError,
    SandboxMemoryError,
    SandboxOutputError,
    SandboxTimeoutError,
    SandboxViolationError,
)
from semray.log import get_logger

log = get_logger(__name__)

ALLOWED_MODULES = (
    "collections",
    "datetime",
    "decimal",
    "fractions",
    "functools",
    "itertools",
    "json",
    "math",
    "numpy",
    "pandas",
    "pyarrow",
    "re",
    "statistics",
    "string",
    "unicodedata",
)
"""What the code may import (top-level names; their submodules too)."""
FUNCTION_NAME = "transform"
"""The function the code defines: ``def transform(batch: pandas.DataFrame) -> pandas.DataFrame``."""
STARTUP_S = 120.0
"""How long the child may take to start (it imports pandas and pyarrow)."""
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
"""The child's whole environment: nothing of the engine's (no keys, no paths)."""
ARROW_TYPES = {
    "text": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "date": pa.date32(),
}
_CHILD_SOURCE = (Path(__file__).with_name("child.py")).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-batch limits: CPU seconds, memory the code may add, wall-clock seconds."""

    cpu_s: float = 10.0
    memory_mb: int = 1024
    wall_s: float = 30.0


class SandboxWorker:
    """Runs ``code``'s ``transform`` over batches in a child process (started on first use)."""

    def __init__(
        self,
        code: str,
        inputs: tuple[str, ...],
        outputs: tuple[tuple[str, str], ...],
        limits: Limits | None = None,
    ) -> None:
        self.code = code
        self.inputs = inputs
        self.outputs = outputs
        self.limits = limits or Limits()
        self._process: subprocess.Popen[bytes] | None = None
        self._cwd: str | None = None
        self._schema = pa.schema([(name, ARROW_TYPES[kind]) for name, kind in outputs])

    def run(self, batch: pa.Table) -> pa.Table:
        """The function's output for ``batch`` (only the input columns are sent), typed as declared.

        Raises a ``SandboxError`` subclass naming what went wrong; the child is replaced after
        any failure but the code's own exception or a bad result.
        """
        missing = [name for name in self.inputs if name not in batch.column_names]
        if missing:
            raise SandboxOutputError(f"the batch lacks the code's input columns {missing}", kind="output")
        table = batch.select(list(self.inputs))
        self._ensure_started()
        header = {"op": "run", "outputs": [list(pair) for pair in self.outputs], "cpu_s": self.limits.cpu_s}
        try:
            reply, payload = self._call(header, _to_ipc(table), self.limits.wall_s)
        except SandboxError:
            self.close()
            raise
        if not reply.get("ok"):
            self._fail(reply)
        result = pa.ipc.open_stream(pa.BufferReader(payload)).read_all()
        if result.num_rows != table.num_rows or result.schema != self._schema:
            self.close()
            raise SandboxOutputError(
                f"the sandbox returned {result.num_rows} rows of {result.schema.names} for {table.num_rows} rows; "
                f"expected {self._schema.names}",
                kind="output",
            )
        return result

    def close(self) -> None:
        """Stop the child (killing its process group) and remove its working directory."""
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                process.wait(timeout=10)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        cwd, self._cwd = self._cwd, None
        if cwd is not None:
            with contextlib.suppress(OSError):
                os.chmod(cwd, 0o700)
            shutil.rmtree(cwd, ignore_errors=True)

    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- the child ----------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        self.close()
        self._cwd = tempfile.mkdtemp(prefix="semray-sandbox-")
        os.chmod(self._cwd, 0o500)  # empty, and the child may not create anything in it
        config = json.dumps({"allowed": ALLOWED_MODULES, "memory_mb": self.limits.memory_mb})
        started = time.perf_counter()
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-c", _CHILD_SOURCE, config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self._cwd,
            env=dict(CHILD_ENV),
            close_fds=True,
            start_new_session=True,
        )
        try:
            ready, _ = self._read(STARTUP_S)
            if not ready.get("ready"):
                raise SandboxCrashError(f"the sandbox did not start: {ready}", kind="crash")
            reply, _ = self._call({"op": "load", "code": self.code, "function": FUNCTION_NAME}, b"", STARTUP_S)
        except SandboxError:
            self.close()
            raise
        if not reply.get("ok"):
            self._fail(reply)
        log.debug("sandbox_started", pid=self._process.pid, seconds=round(time.perf_counter() - started, 3))

    def _call(self, header: dict[str, Any], payload: bytes, timeout_s: float) -> tuple[dict[str, Any], bytes]:
        process = self._process
        assert process is not None and process.stdin is not None
        data = json.dumps(header).encode()
        try:
            process.stdin.write(struct.pack(">I", len(data)) + data + struct.pack(">Q", len(payload)) + payload)
            process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        return self._read(timeout_s)

    def _read(self, timeout_s: float) -> tuple[dict[str, Any], bytes]:
        deadline = time.monotonic() + timeout_s
        (size,) = struct.unpack(">I", self._read_exact(4, deadline, timeout_s))
        header: dict[str, Any] = json.loads(self._read_exact(size, deadline, timeout_s))
        (size,) = struct.unpack(">Q", self._read_exact(8, deadline, timeout_s))
        return header, self._read_exact(size, deadline, timeout_s) if size else b""

    def _read_exact(self, count: int, deadline: float, timeout_s: float) -> bytes:
        process = self._process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        chunks: list[bytes] = []
        while count:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0.0))[0] if left > 0 else []
            if not ready:
                self.close()
                raise SandboxTimeoutError(
                    f"the code ran past its wall-clock limit of {timeout_s:g}s and was stopped; make it faster "
                    "(no per-row Python loops over large inputs) or raise SemCode limits.wall_s",
                    kind="timeout",
                )
            chunk = os.read(fd, min(count, 1 << 20))
            if not chunk:
                raise self._died()
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> SandboxError:
        process = self._process
        code = process.wait(timeout=10) if process is not None else None
        self.close()
        if code == -signal.SIGXCPU or code == -signal.SIGKILL:
            return SandboxTimeoutError(
                f"the code used more than its CPU limit of {self.limits.cpu_s:g}s and was stopped "
                f"(exit {code}); make it faster or raise SemCode limits.cpu_s",
                kind="timeout",
            )
        return SandboxCrashError(
            f"the sandbox process ended unexpectedly (exit {code}); the code may have exhausted memory "
            f"(limit {self.limits.memory_mb} MB: raise SemCode limits.memory_mb) or crashed the interpreter",
            kind="crash",
        )

    def _fail(self, reply: dict[str, Any]) -> None:
        kind = str(reply.get("kind"))
        message = str(reply.get("message"))
        if kind == "violation":
            self.close()  # the child's state is no longer trusted
            raise SandboxViolationError(
                f"the code tried something outside the sandbox: {message}; code may only compute on its input "
                f"batch and import {', '.join(ALLOWED_MODULES)}",
                kind=kind,
            )
        if kind == "memory":
            self.close()
            raise SandboxMemoryError(
                f"{message} ({self.limits.memory_mb} MB); process the batch with less memory or raise "
                "SemCode limits.memory_mb",
                kind=kind,
            )
        if kind == "output":
            raise SandboxOutputError(
                f"{message}; transform(batch) must return a pandas DataFrame with one row per input row and "
                f"exactly the columns {[name for name, _ in self.outputs]} of types "
                f"{[kind_ for _, kind_ in self.outputs]}",
                kind=kind,
            )
        raise SandboxCodeError(
            f"the code failed: {message}; fix the function (or let the model regenerate it)", kind="code"
        )


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data
