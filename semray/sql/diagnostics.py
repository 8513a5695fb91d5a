"""Errors of the SQL surface and the positions they point at.

Every message names where in the query text the problem is ("line 1, column 8") and
what would work instead. The classes extend the shared hierarchy in semray.errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from semray.errors import ExpressionError, PlanError


class SqlSyntaxError(ExpressionError):
    """The query text does not parse; the message names the position and what was expected."""


class UnsupportedSqlError(PlanError):
    """The query parses but uses a construct the SQL surface does not compile; says what is supported."""


class SqlLimitError(UnsupportedSqlError):
    """The query passes one of the SQL surface's size limits (``semray.sql.limits``): its length,
    how deeply its parentheses nest, or how deep one expression is; says the limit and what to do."""


@dataclass(frozen=True, slots=True)
class QueryText:
    """The query being compiled, for turning node offsets into line and column numbers.

    >>> QueryText("SELECT\\n  x FROM t").position(9)
    'line 2, column 3'
    """

    text: str

    def position(self, offset: int) -> str:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return f"line {line}, column {column}"

    def locate(self, node: exp.Expr | None) -> str:
        """``line L, column C`` of the first token of ``node`` that sqlglot located, else ``query``."""
        offset = start_offset(node)
        return "query" if offset is None else self.position(offset)

    def unsupported(self, node: exp.Expr | None, what: str, instead: str) -> UnsupportedSqlError:
        """An error like ``window functions are not supported (line 1, column 8); use ...``."""
        return UnsupportedSqlError(f"{what} (at {self.locate(node)}) is not supported; {instead}")


def at_position(error: PlanError, where: str) -> PlanError:
    """``error`` with `` (at line L, column C)`` appended, unless it already names a position."""
    message = str(error.args[0]) if error.args else str(error)
    if " (at " not in message and where != "query":
        error.args = (f"{message} (at {where})", *error.args[1:])
    return error


def start_offset(node: exp.Expr | None) -> int | None:
    """Smallest source offset recorded on ``node`` or its descendants (sqlglot keeps them on tokens)."""
    if node is None:
        return None
    offsets = [
        meta["start"]
        for part in node.walk()
        if isinstance(part, exp.Expr) and (meta := part.meta) and isinstance(meta.get("start"), int)
    ]
    return min(offsets) if offsets else None
