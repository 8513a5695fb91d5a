"""SQLite values to Arrow: declared-type affinity, sample-based types, lenient text."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from semray.errors import SourceError


class SqliteText(str):
    """Text whose stored bytes were not valid UTF-8 (bad bytes replaced by U+FFFD).

    Its type marks the row as affected so readers can count it.
    """

    __slots__ = ()

    @staticmethod
    def decode(data: bytes) -> str:
        """``sqlite3`` text factory: strict UTF-8, else a replacing ``SqliteText``."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return SqliteText(data.decode("utf-8", errors="replace"))


def column_type(declared: str, sample: Sequence[object]) -> pa.DataType:
    """The Arrow type of a column from its declared type (SQLite affinity rules) or its sampled values.

    >>> column_type("VARCHAR(20)", [])
    DataType(string)
    >>> column_type("", [1, 2.5])
    DataType(double)
    """
    upper = declared.upper()
    if "INT" in upper:
        return pa.int64()
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    if "BLOB" in upper:
        return pa.binary()
    return _sampled_type(sample)


def _sampled_type(sample: Sequence[object]) -> pa.DataType:
    kinds = {type(value) for value in sample if value is not None}
    if kinds <= {int}:
        return pa.int64() if kinds else pa.string()
    if kinds <= {int, float}:
        return pa.float64()
    if kinds == {bytes}:
        return pa.binary()
    return pa.string()


def to_arrow(values: list[object], kind: pa.DataType, where: str) -> pa.Array:
    """Build an Arrow array of ``kind``, coercing SQLite's loosely typed values where that is lossless."""
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    return pa.array([_coerce(value, kind, where) for value in values], type=kind)


def _coerce(value: object, kind: pa.DataType, where: str) -> object:
    if value is None:
        return None
    if pa.types.is_string(kind):
        if isinstance(value, bytes):
            return SqliteText.decode(value)
        return str(value)
    if pa.types.is_binary(kind):
        return value.encode("utf-8") if isinstance(value, str) else value
    if pa.types.is_floating(kind) and isinstance(value, int | float):
        return float(value)
    if pa.types.is_integer(kind) and isinstance(value, float) and value.is_integer():
        return int(value)
    raise SourceError(
        f"{where} holds {value!r}, which is not {kind}; use the 'query' option with a CAST to read it as another type"
    )
