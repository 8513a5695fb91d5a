"""The SQL surface: SELECT queries with ``SEM_*`` functions compiled into the plan IR.

>>> from semray.sql import compile_sql  # doctest: +SKIP
>>> compile_sql("SELECT * FROM t WHERE SEM_FILTER('{text} is upbeat')", {"t": scan})  # doctest: +SKIP
"""

from semray.sql.compiler import compile_sql
from semray.sql.diagnostics import SqlLimitError, SqlSyntaxError, UnsupportedSqlError

__all__ = ["SqlLimitError", "SqlSyntaxError", "UnsupportedSqlError", "compile_sql"]
