"""What compiling one query needs: its text, the tables in reach and a way to compile subqueries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from sqlglot import exp

from semray.errors import TableNotFoundError
from semray.operators import Node
from semray.sql.diagnostics import QueryText, at_position

CompileQuery = Callable[[exp.Expr, "Context"], Node]


@dataclass(frozen=True, slots=True)
class Context:
    """Tables given by the caller, CTEs defined so far, and the query compiler (for subqueries)."""

    source: QueryText
    tables: Mapping[str, Node]
    compile_query: CompileQuery
    ctes: Mapping[str, Node] = field(default_factory=dict)

    def with_cte(self, name: str, node: Node) -> Context:
        return replace(self, ctes={**self.ctes, name: node})

    def table(self, name: str, reference: exp.Expr) -> Node:
        """The node a table name denotes: a CTE first, then a given table (case-insensitively)."""
        for pool in (self.ctes, self.tables):
            if name in pool:
                return pool[name]
            folded = [key for key in pool if key.lower() == name.lower()]
            if len(folded) == 1:
                return pool[folded[0]]
        error = TableNotFoundError(name, [*self.ctes, *self.tables])
        raise at_position(error, self.source.locate(reference))

    def compile(self, query: exp.Expr) -> Node:
        return self.compile_query(query, self)
