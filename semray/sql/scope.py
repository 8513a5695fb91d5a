"""Name scopes: which SQL names (``t.x``, ``x``) denote which columns of a plan node.

The plan IR knows only the column names of each node's output schema. A query speaks
of ``reviews.id`` and ``r.id``; a :class:`Relation` pairs a compiled node with the SQL
names of its columns so that references resolve to plan column names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from semray.errors import ColumnNotFoundError, TableNotFoundError
from semray.operators import Node
from semray.sql.diagnostics import QueryText, UnsupportedSqlError, at_position


@dataclass(frozen=True, slots=True)
class ScopeColumn:
    """A column visible to SQL: ``qualifier.name`` denotes ``plan_name`` in the node's schema."""

    qualifier: str | None
    name: str
    plan_name: str
    in_star: bool = True
    """Whether ``*`` expands to it (the right copy of a USING column does not)."""


@dataclass(frozen=True, slots=True)
class Relation:
    """A compiled FROM item: a plan node and the SQL names of its user columns."""

    node: Node
    columns: tuple[ScopeColumn, ...]

    @classmethod
    def of_node(cls, node: Node, qualifier: str | None) -> Relation:
        """Every user column of ``node`` under ``qualifier`` (a table name or alias)."""
        return cls(node, tuple(ScopeColumn(qualifier, c.name, c.name) for c in node.output_schema.user_columns()))

    def with_node(self, node: Node) -> Relation:
        return replace(self, node=node)

    @property
    def qualifiers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.qualifier for c in self.columns if c.qualifier is not None))

    def has_qualifier(self, qualifier: str) -> bool:
        return _pick(qualifier, self.qualifiers) is not None

    def star(self, qualifier: str | None = None) -> tuple[ScopeColumn, ...]:
        """Columns ``*`` (or ``qualifier.*``) expands to, in FROM order."""
        if qualifier is None:
            return tuple(c for c in self.columns if c.in_star)
        chosen = _pick(qualifier, self.qualifiers)
        if chosen is None:
            raise TableNotFoundError(qualifier, self.qualifiers)
        return tuple(c for c in self.columns if c.qualifier == chosen and c.in_star)

    def find(self, name: str, qualifier: str | None) -> ScopeColumn | None:
        """The column ``qualifier.name`` denotes, None when absent; raises when ambiguous."""
        if qualifier is not None:
            chosen = _pick(qualifier, self.qualifiers)
            if chosen is None:
                return None
            pool = [c for c in self.columns if c.qualifier == chosen]
        else:
            pool = [c for c in self.columns if c.in_star]
        matches = [c for c in pool if c.name == name] or [c for c in pool if c.name.lower() == name.lower()]
        if len(matches) > 1:
            spelled = ", ".join(f"{c.qualifier}.{c.name}" if c.qualifier else c.name for c in matches)
            raise UnsupportedSqlError(f"column reference {name!r} is ambiguous ({spelled}); qualify it with its table")
        return matches[0] if matches else None

    def resolve(self, column: exp.Column, source: QueryText) -> ScopeColumn:
        """The column a SQL reference denotes; unknown names suggest the closest one."""
        if column.args.get("db") or column.args.get("catalog"):
            raise source.unsupported(column, f"the reference {column.sql()!r}", "qualify columns as table.column only")
        qualifier = column.table or None
        found = self.find(column.name, qualifier)
        if found is not None:
            return found
        where = f"the query (at {source.locate(column)})"
        if qualifier is not None:
            if not self.has_qualifier(qualifier):
                raise at_position(TableNotFoundError(qualifier, self.qualifiers), source.locate(column))
            chosen = _pick(qualifier, self.qualifiers)
            names = [c.name for c in self.columns if c.qualifier == chosen]
            raise ColumnNotFoundError(column.name, names, f"{chosen} (at {source.locate(column)})")
        raise ColumnNotFoundError(column.name, [c.name for c in self.columns if c.in_star], where)


def _pick(name: str, candidates: tuple[str, ...]) -> str | None:
    """``name`` among ``candidates``, exactly or else case-insensitively (DuckDB's rule)."""
    if name in candidates:
        return name
    folded = [candidate for candidate in candidates if candidate.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None
