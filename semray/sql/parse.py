"""Parse query text (DuckDB dialect, via sqlglot) into one SELECT-like statement."""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from semray.sql.diagnostics import QueryText, SqlSyntaxError, UnsupportedSqlError
from semray.sql.limits import check_depth, check_length, check_nesting, check_operators

DIALECT = "duckdb"
_MISSING = re.compile(r"Required keyword: '(?P<part>\w+)' missing for <class '[\w.]*\.(?P<kind>\w+)'>")
_STATEMENTS = {
    "Create",
    "Drop",
    "Insert",
    "Update",
    "Delete",
    "Merge",
    "Alter",
    "Set",
    "Use",
    "Pragma",
    "Copy",
    "Describe",
    "Attach",
    "Detach",
    "Install",
    "Show",
    "Summarize",
    "Transaction",
    "Commit",
    "Rollback",
    "Analyze",
    "Export",
    "Load",
}

_TOKEN = re.compile(r"<Token token_type: [\w.]+, text: (?P<text>.*?), line: \d+, col: \d+, start: (?P<start>\d+).*?>")


def parse_query(text: str) -> exp.Expr:
    """Parse ``text`` into a single query (SELECT, UNION, WITH ... SELECT).

    >>> type(parse_query("SELECT a FROM t")).__name__
    'Select'
    """
    source = QueryText(text)
    if not text.strip():
        raise SqlSyntaxError("empty query; write a SELECT, e.g. SELECT * FROM reviews")
    check_length(text)
    check_operators(text)
    dialect = Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(text)
        check_nesting(tokens, source)
        statements = [statement for statement in dialect.parser().parse(tokens, text) if statement is not None]
    except ParseError as error:
        raise _syntax_error(error, source) from None
    except TokenError as error:
        raise SqlSyntaxError(f"cannot read the query: {error}") from None
    if not statements:
        raise SqlSyntaxError("empty query; write a SELECT, e.g. SELECT * FROM reviews")
    if len(statements) > 1:
        raise UnsupportedSqlError("several statements are not supported; give one SELECT (drop the extra ';')")
    statement = statements[0]
    while isinstance(statement, exp.Subquery) and not _has_parts(statement):
        statement = statement.this  # (SELECT ...): a parenthesized query; with ORDER BY / LIMIT it stays one
    if isinstance(statement, exp.Command | exp.DML | exp.DDL) or type(statement).__name__ in _STATEMENTS:
        kind = statement.key.upper()
        if isinstance(statement, exp.Command):
            kind = str(statement.this).split(maxsplit=1)[0].upper() if str(statement.this).strip() else "this"
        raise UnsupportedSqlError(f"{kind} statements are not supported; give a SELECT query")
    if not isinstance(statement, exp.Query):
        raise SqlSyntaxError(
            "syntax error at line 1, column 1: expected SELECT, WITH or a parenthesized query,"
            f" got {text.strip()[:40]!r}"
        )
    check_depth(statement, source)
    return statement


def _syntax_error(error: ParseError, source: QueryText) -> SqlSyntaxError:
    detail = error.errors[0] if error.errors else {}
    description = str(detail.get("description") or error)
    # sqlglot describes the offending token with its repr; show only its text.
    token = _TOKEN.search(description)
    description = _TOKEN.sub(lambda match: repr(match.group("text")), description)
    description = _MISSING.sub(
        lambda match: f"incomplete {match.group('kind')} expression (missing its {match.group('part')})", description
    )
    line, column = detail.get("line"), detail.get("col")
    highlight = detail.get("highlight")
    if token is not None:
        where = source.position(int(token.group("start")))
    elif isinstance(detail.get("start_context"), str) and highlight and text_has(source, detail):
        where = source.position(source.text.find(str(detail["start_context"])) + len(str(detail["start_context"])))
    else:
        where = f"line {line}, column {column}" if line and column else "query"
    near = f" near {highlight!r}" if highlight else ""
    return SqlSyntaxError(f"syntax error at {where}{near}: {_first_sentence(description)}")


def text_has(source: QueryText, detail: dict[str, object]) -> bool:
    context = detail.get("start_context")
    return isinstance(context, str) and bool(context) and source.text.count(context) == 1


def _first_sentence(description: str) -> str:
    first = description.split("\n")[0]
    # sqlglot appends "Line 1, Col: 9." with coloured context; the position is already given.
    return re.sub(r"\.?\s*Line \d+, Col: \d+\.?.*$", "", first).strip() or first


def _has_parts(query: exp.Subquery) -> bool:
    """Whether a parenthesized query carries more than its query (ORDER BY, LIMIT, ...): such a
    query is compiled with them, never unwrapped (which would drop them without a word)."""
    return any(value for key, value in query.args.items() if key != "this")
