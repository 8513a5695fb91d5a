"""The sandbox's child program: runs one code function over batches sent on its stdin.

This file is not imported by semray: its text is the ``-c`` program of a fresh ``python -I``
process (``worker.py``), so the child holds nothing of the engine, only the standard library
and the allowed packages. Its defences, in the order they are set up:

1. fds 0/1 become private protocol pipes; the standard streams are ``/dev/null``;
2. the allowed modules are imported and exercised once (later loads need files, refused below);
3. OS limits: no new file descriptors (``RLIMIT_NOFILE`` at the highest open fd), no file
   growth (``RLIMIT_FSIZE`` 0), no core files, an address-space cap (``RLIMIT_AS``), and per
   batch a CPU-seconds cap (``RLIMIT_CPU``, SIGXCPU ends the process);
4. an audit hook refusing file opens, sockets, processes, signals, and loading modules that
   are not on the allow-list; the code's ``__import__`` admits allow-listed names only.

Audit hooks and import hooks are not a security boundary in CPython (docs/sandbox.md): the OS
limits, the separate process, the empty environment and the read-only empty cwd carry the weight.

Framing, both ways: a 4-byte big-endian length and a JSON header, then an 8-byte length and a
payload (an Arrow IPC stream, possibly empty).
"""

from __future__ import annotations

import builtins
import collections
import datetime
import decimal
import fractions
import functools
import io
import itertools
import json
import math
import os
import re
import resource
import signal
import statistics
import string
import struct
import sys
import traceback
import unicodedata
from typing import IO, Any, ClassVar, NoReturn

import numpy
import pandas
import pyarrow
import pyarrow.compute
import pyarrow.ipc

BLOCKED_PREFIXES = (
    "open",
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.putenv",
    "os.unsetenv",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chdir",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.listdir",
    "os.scandir",
    "os.walk",
    "os.utime",
    "shutil.",
    "ctypes.",
    "signal.",
    "pty.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "webbrowser.",
    "sqlite3.",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys.addaudithook",
    "sys.settrace",
    "sys.setprofile",
    "sys.remote_exec",
    "resource.setrlimit",
    "mmap.",
    "fcntl.",
    "code.__new__",
    "marshal.",
    "pickle.find_class",
)


class SandboxViolation(RuntimeError):
    """The code tried something outside the sandbox."""


class Guard:
    active = False
    own_rlimit = False
    allowed: ClassVar[frozenset[str]] = frozenset()
    violations: ClassVar[list[str]] = []


GUARD = Guard()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not GUARD.active:
        return
    if event == "resource.setrlimit" and GUARD.own_rlimit:
        return
    if event == "import":
        name = str(args[0]).partition(".")[0]
        if name in GUARD.allowed or name in sys.modules:
            return
        _refuse(f"loading module {args[0]!r} (allowed: {', '.join(sorted(GUARD.allowed))})")
    for prefix in BLOCKED_PREFIXES:
        if event == prefix.rstrip(".") or event.startswith(prefix):
            detail = ", ".join(repr(a)[:80] for a in args[:2]) if args else ""
            _refuse(f"{event}({detail})")


def _refuse(what: str) -> NoReturn:
    message = f"{what} is not allowed in the sandbox"
    GUARD.violations.append(message)
    raise SandboxViolation(message)


def _restricted_import(
    name: str,
    globals: dict[str, Any] | None = None,
    locals: dict[str, Any] | None = None,
    fromlist: tuple[str, ...] = (),
    level: int = 0,
) -> Any:
    top = name.partition(".")[0]
    if level != 0 or top not in GUARD.allowed:
        _refuse(f"import {name!r} (allowed: {', '.join(sorted(GUARD.allowed))})")
    return builtins.__import__(name, globals, locals, fromlist, level)


REMOVED_BUILTINS = ("open", "input", "breakpoint", "help", "exit", "quit", "compile", "exec", "eval", "copyright")


def _code_builtins() -> dict[str, Any]:
    names = {k: v for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS}
    names["__import__"] = _restricted_import
    return names


def _read_exact(stream: IO[bytes], count: int) -> bytes:
    chunks = []
    while count:
        chunk = stream.read(count)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _receive(stream: IO[bytes]) -> tuple[dict[str, Any], bytes]:
    (size,) = struct.unpack(">I", _read_exact(stream, 4))
    header = json.loads(_read_exact(stream, size))
    (size,) = struct.unpack(">Q", _read_exact(stream, 8))
    return header, _read_exact(stream, size) if size else b""


def _send(stream: IO[bytes], header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(header).encode()
    stream.write(struct.pack(">I", len(data)) + data + struct.pack(">Q", len(payload)) + payload)
    stream.flush()


ARROW_TYPES = {
    "text": pyarrow.string(),
    "int": pyarrow.int64(),
    "float": pyarrow.float64(),
    "bool": pyarrow.bool_(),
    "date": pyarrow.date32(),
}


def _warm_up() -> None:
    """Run every path a batch takes once, so lazily imported parts of the libraries load now."""
    table = pyarrow.table(
        {
            "t": ["2024-01-02", None],
            "i": [1, None],
            "f": [1.5, None],
            "b": [True, None],
            "d": [datetime.date(2024, 1, 2), None],
        }
    )
    frame = _to_frame(_from_ipc(_to_ipc(table)))
    frame["t"].str.strip().str.lower().str.extract(r"(\d+)", expand=False)
    frame["t"].str.replace("-", "/", regex=False).str.contains("x", regex=True)
    _ = pandas.to_datetime(frame["t"], errors="coerce", format="mixed").dt.date
    pandas.to_numeric(frame["t"], errors="coerce").fillna(0).round(2)
    frame.apply(lambda row: row["i"], axis=1)
    frame.assign(x=1).astype({"x": "float64"}).where(frame["b"].notna()).isna().sum()
    pandas.DataFrame({"a": [1, 2]}).merge(pandas.DataFrame({"a": [1]}), on="a").groupby("a").size()
    numpy.where(numpy.array([1.0, numpy.nan]) > 0, 1, 0)
    for kind, values in (
        ("text", ["a", None]),
        ("int", [1, None]),
        ("float", [1.0, None]),
        ("bool", [True, None]),
        ("date", [datetime.date(2024, 1, 2), None]),
    ):
        _column(pandas.Series(values, dtype=object), kind, "x")
    _to_ipc(pyarrow.table({"x": pyarrow.array([1], pyarrow.int64())}))
    json.dumps(json.loads('{"a": [1.5]}'))
    statistics.mean([1, 2])
    decimal.Decimal("1.10").quantize(decimal.Decimal("0.1"))
    fractions.Fraction(1, 3)
    collections.Counter("ab").most_common(1)
    list(itertools.chain([1], [2]))
    functools.reduce(lambda a, b: a + b, [1, 2])
    string.capwords("a b")
    unicodedata.normalize("NFKC", "x")
    re.compile(r"\w+").findall("a b")
    math.isfinite(1.0)
    try:
        raise ValueError("warm")
    except ValueError:
        traceback.format_exc()


def _from_ipc(payload: bytes) -> pyarrow.Table:
    return pyarrow.ipc.open_stream(pyarrow.BufferReader(payload)).read_all()


def _to_ipc(table: pyarrow.Table) -> bytes:
    sink = pyarrow.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _to_frame(table: pyarrow.Table) -> pandas.DataFrame:
    return table.to_pandas(date_as_object=True, integer_object_nulls=False)


class OutputProblem(Exception):
    """The function's result does not have the declared shape or types."""


def _column(values: Any, kind: str, name: str) -> pyarrow.Array:
    """One output column as its declared Arrow type; OutputProblem names the first bad value."""
    target = ARROW_TYPES[kind]
    cells = list(values)
    converted = []
    for position, cell in enumerate(cells):
        try:
            converted.append(_cell(cell, kind))
        except (TypeError, ValueError, OverflowError) as error:
            raise OutputProblem(
                f"column {name!r} row {position}: {_shown(cell)} is not a {kind} value ({error})"
            ) from None
    return pyarrow.array(converted, type=target)


def _is_null(cell: Any) -> bool:
    if cell is None:
        return True
    try:
        return bool(pandas.isna(cell))
    except (TypeError, ValueError):
        return False


def _cell(cell: Any, kind: str) -> Any:
    if _is_null(cell):
        return None
    if isinstance(cell, numpy.generic):
        cell = cell.item()
    if kind == "text":
        if not isinstance(cell, str):
            raise TypeError(f"got {type(cell).__name__}, expected str")
        return cell
    if kind == "bool":
        if not isinstance(cell, bool):
            raise TypeError(f"got {type(cell).__name__}, expected bool")
        return cell
    if kind == "int":
        if isinstance(cell, bool) or not isinstance(cell, (int, float)):
            raise TypeError(f"got {type(cell).__name__}, expected int")
        if isinstance(cell, float) and not cell.is_integer():
            raise ValueError("has a fractional part")
        value = int(cell)
        if not -(2**63) <= value < 2**63:
            raise OverflowError("does not fit in 64 bits")
        return value
    if kind == "float":
        if isinstance(cell, bool) or not isinstance(cell, (int, float, decimal.Decimal, fractions.Fraction)):
            raise TypeError(f"got {type(cell).__name__}, expected float")
        return float(cell)
    if isinstance(cell, pandas.Timestamp):
        return cell.date()
    if isinstance(cell, datetime.datetime):
        return cell.date()
    if isinstance(cell, datetime.date):
        return cell
    if isinstance(cell, str):
        return datetime.date.fromisoformat(cell)
    raise TypeError(f"got {type(cell).__name__}, expected datetime.date or an ISO date string")


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not end the child
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _result_table(result: Any, outputs: list[tuple[str, str]], rows: int) -> pyarrow.Table:
    if isinstance(result, pyarrow.Table):
        result = result.to_pandas(date_as_object=True)
    if isinstance(result, dict):
        result = pandas.DataFrame(result)
    if not isinstance(result, pandas.DataFrame):
        raise OutputProblem(
            f"transform returned {type(result).__name__}; return a pandas DataFrame with columns "
            f"{[name for name, _ in outputs]}"
        )
    names = [str(name) for name in result.columns]
    wanted = [name for name, _ in outputs]
    if sorted(names) != sorted(wanted) or len(set(names)) != len(names):
        missing = [name for name in wanted if name not in names]
        extra = [name for name in names if name not in wanted]
        raise OutputProblem(
            f"transform returned columns {names}; it must return exactly {wanted}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unexpected {extra})" if extra else "")
        )
    if len(result) != rows:
        raise OutputProblem(
            f"transform returned {len(result)} rows for {rows} input rows; return one row per input row"
        )
    columns = {name: _column(result[name], kind, name) for name, kind in outputs}
    return pyarrow.table(columns)


def _limit_cpu(seconds: float) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = int(spent + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    GUARD.own_rlimit = True
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    finally:
        GUARD.own_rlimit = False


def _address_space_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as stats:
        pages = int(stats.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _limit_os(memory_mb: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails instead of killing
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    if sys.platform.startswith("linux"):
        base = _address_space_bytes()
        cap = base + memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    highest = max(int(name) for name in os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 2
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, highest + 1))


def _failure(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "message": message[:4000]}


SOURCE_LINES: list[str] = []


def _code_error(error: BaseException) -> dict[str, Any]:
    """The code's exception, with its last line in the code (read from the source we hold: the
    linecache would open files)."""
    if GUARD.violations:
        return _failure("violation", GUARD.violations[0])
    numbers = [
        line for frame, line in traceback.walk_tb(error.__traceback__) if frame.f_code.co_filename == "<semcode>"
    ]
    where = ""
    if numbers:
        number = numbers[-1]
        line = SOURCE_LINES[number - 1].strip() if 0 < number <= len(SOURCE_LINES) else ""
        where = f" (line {number}: {line})"
    return _failure("code", f"{type(error).__name__}: {_shown_error(error)}{where}")


def _shown_error(error: BaseException) -> str:
    try:
        return str(error)[:500]
    except Exception:  # a hostile __str__
        return type(error).__name__


def _serve(proto_in: IO[bytes], proto_out: IO[bytes]) -> None:
    function: Any = None
    while True:
        try:
            header, payload = _receive(proto_in)
        except EOFError:
            return
        GUARD.violations.clear()
        if header["op"] == "load":
            function = None
            reply = _load(header)
            if isinstance(reply, dict):
                _send(proto_out, reply)
                continue
            function = reply
            _send(proto_out, {"ok": True})
            continue
        if function is None:
            _send(proto_out, _failure("code", "no function loaded"))
            continue
        try:
            reply, data = _run(function, header, payload)
        except BaseException as error:  # a failure while reporting a failure: still an answer
            reply, data = _failure("code", f"{type(error).__name__} while reporting the code's result"), b""
        _send(proto_out, reply, data)


def _load(header: dict[str, Any]) -> Any:
    scope = {"__builtins__": _code_builtins(), "__name__": "semcode"}
    SOURCE_LINES[:] = header["code"].splitlines()
    GUARD.active = True
    try:
        code = builtins.compile(header["code"], "<semcode>", "exec")
        builtins.exec(code, scope)
    except SandboxViolation as error:
        return _failure("violation", str(error))
    except MemoryError:
        return _failure("memory", "the code ran out of memory while loading")
    except SyntaxError as error:
        return _failure("code", f"SyntaxError: {error.msg} (line {error.lineno})")
    except BaseException as error:  # the code's own failure is reported, never fatal
        return _code_error(error)
    if GUARD.violations:
        return _failure("violation", GUARD.violations[0])
    function = scope.get(header["function"])
    if not callable(function):
        return _failure("code", f"the code defines no function {header['function']!r}(batch)")
    return function


def _run(function: Any, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    outputs = [tuple(pair) for pair in header["outputs"]]
    try:
        frame = _to_frame(_from_ipc(payload))
        rows = len(frame)
        _limit_cpu(float(header["cpu_s"]))
        result = function(frame)
        table = _result_table(result, outputs, rows)
        data = _to_ipc(table)
    except SandboxViolation as error:
        return _failure("violation", str(error)), b""
    except MemoryError:
        return _failure("memory", "the code ran out of memory (the sandbox's memory limit)"), b""
    except OutputProblem as error:
        return _failure("output", str(error)), b""
    except BaseException as error:  # the code's own failure is reported, never fatal
        return _code_error(error), b""
    if GUARD.violations:
        return _failure("violation", GUARD.violations[0]), b""
    return {"ok": True, "rows": table.num_rows}, data


def main() -> None:
    config = json.loads(sys.argv[1])
    Guard.allowed = frozenset(config["allowed"])
    # 1. private protocol pipes; the standard streams go nowhere
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = io.StringIO()
    sys.stdout = io.StringIO()
    sys.stderr = io.StringIO()
    # the code must not find the original streams either
    setattr(sys, "__stdout__", sys.stdout)  # noqa: B010 - a final name for type checkers
    setattr(sys, "__stderr__", sys.stderr)  # noqa: B010
    # 2. the allowed modules are imported (above); exercise them while files can still be read
    _warm_up()
    # 3. OS limits, 4. the audit hook
    _limit_os(int(config["memory_mb"]))
    sys.addaudithook(_audit)
    GUARD.active = True
    _send(proto_out, {"ok": True, "ready": True, "pid": os.getpid()})
    _serve(proto_in, proto_out)


if __name__ == "__main__":
    main()
