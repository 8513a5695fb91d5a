"""Hypothesis strategies: random tables (nulls, unicode, empty) and random SQL queries over them.

Two tables, ``t1(k, a, s, x)`` and ``t2(k, b, s)``, with few distinct keys so joins and
groups collide. Doubles are multiples of 0.5, so sums are exact in any order. Queries
with ORDER BY order by every output column, so their row sequence is fully determined.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from hypothesis import strategies as st

KEYS = st.one_of(st.none(), st.integers(0, 3))
INTS = st.one_of(st.none(), st.integers(-5, 5))
TEXTS = st.sampled_from([None, "", "a", "b", "ab", "é", "日本", "Ω x", "🙂"])
HALVES = st.one_of(st.none(), st.integers(-8, 8).map(lambda n: n / 2))


@dataclass(frozen=True)
class Case:
    tables: dict[str, pa.Table]
    sql: str
    ordered: bool
    joins: bool


@st.composite
def tables(draw: st.DrawFn) -> dict[str, pa.Table]:
    rows1 = draw(st.lists(st.tuples(KEYS, INTS, TEXTS, HALVES), max_size=10))
    rows2 = draw(st.lists(st.tuples(KEYS, INTS, TEXTS), max_size=8))
    t1 = pa.table(
        {
            "k": pa.array([r[0] for r in rows1], pa.int64()),
            "a": pa.array([r[1] for r in rows1], pa.int64()),
            "s": pa.array([r[2] for r in rows1], pa.string()),
            "x": pa.array([r[3] for r in rows1], pa.float64()),
        }
    )
    t2 = pa.table(
        {
            "k": pa.array([r[0] for r in rows2], pa.int64()),
            "b": pa.array([r[1] for r in rows2], pa.int64()),
            "s": pa.array([r[2] for r in rows2], pa.string()),
        }
    )
    return {"t1": t1, "t2": t2}


def _literal_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@st.composite
def predicate(draw: st.DrawFn, depth: int = 2) -> str:
    """A boolean expression over t1's columns."""
    atoms = [
        st.builds(lambda op, n: f"a {op} {n}", st.sampled_from(["<", "<=", "=", "<>", ">", ">="]), st.integers(-3, 3)),
        st.sampled_from(["a IS NULL", "s IS NOT NULL", "x IS NULL", "k IN (1, 2)", "s LIKE 'a%'", "x > 0"]),
        st.builds(lambda v: f"s = {_literal_text(v)}", st.sampled_from(["a", "é", "日本", ""])),
        st.builds(lambda n: f"coalesce(a, 0) + k > {n}", st.integers(-2, 4)),
        st.builds(lambda n: f"x * 2 <= {n}", st.integers(-4, 4)),
    ]
    if depth <= 0:
        return draw(st.one_of(*atoms))
    inner = predicate(depth=depth - 1)
    return draw(
        st.one_of(
            *atoms,
            st.builds(lambda p, q: f"({p} AND {q})", inner, inner),
            st.builds(lambda p, q: f"({p} OR {q})", inner, inner),
            st.builds(lambda p: f"NOT ({p})", inner),
        )
    )


SCALARS = [
    "a",
    "k",
    "s",
    "x",
    "a + k AS ak",
    "upper(s) AS us",
    "CASE WHEN a > 0 THEN 'pos' WHEN a < 0 THEN 'neg' END AS sign",
    "x * 2 AS x2",
    "coalesce(s, '?') AS s0",
    "length(s) AS n",
]
AGGREGATES = [
    "count(*) AS c",
    "count(a) AS ca",
    "sum(a) AS sa",
    "min(s) AS ms",
    "max(x) AS mx",
    "avg(x) AS ax",
    "count(DISTINCT s) AS ds",
]


def _where(draw: st.DrawFn) -> str:
    return draw(st.one_of(st.just(""), predicate().map(lambda p: f" WHERE {p}")))


def _names(items: list[str]) -> list[str]:
    return [item.split(" AS ")[-1] for item in items]


@st.composite
def select_query(draw: st.DrawFn) -> tuple[str, bool]:
    items = draw(st.lists(st.sampled_from(SCALARS), min_size=1, max_size=4, unique=True))
    sql = f"SELECT {', '.join(items)} FROM t1{_where(draw)}"
    if draw(st.booleans()):
        order = ", ".join(f"{name} {draw(st.sampled_from(['ASC', 'DESC']))}" for name in _names(items))
        limit = draw(st.sampled_from(["", " LIMIT 3", " LIMIT 2 OFFSET 1", " OFFSET 2"]))
        return f"{sql} ORDER BY {order}{limit}", True
    return sql, False


@st.composite
def aggregate_query(draw: st.DrawFn) -> tuple[str, bool]:
    aggs = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    where = _where(draw)
    key = draw(st.sampled_from(["", "k", "s", "a % 2"]))
    if not key:
        return f"SELECT {', '.join(aggs)} FROM t1{where}", False
    having = draw(st.sampled_from(["", " HAVING count(*) > 1", " HAVING max(a) IS NOT NULL"]))
    return f"SELECT {key} AS g, {', '.join(aggs)} FROM t1{where} GROUP BY {key}{having}", False


@st.composite
def distinct_query(draw: st.DrawFn) -> tuple[str, bool]:
    items = draw(st.lists(st.sampled_from(["k", "s", "a > 0 AS pos", "x"]), min_size=1, max_size=2, unique=True))
    return f"SELECT DISTINCT {', '.join(items)} FROM t1{_where(draw)}", False


@st.composite
def union_query(draw: st.DrawFn) -> tuple[str, bool]:
    kind = draw(st.sampled_from(["UNION", "UNION ALL"]))
    left = draw(st.sampled_from(["SELECT k, s FROM t1", "SELECT a, s FROM t1", "SELECT k, upper(s) FROM t1"]))
    right = draw(st.sampled_from(["SELECT k, s FROM t2", "SELECT b, s FROM t2"]))
    return f"{left}{_where(draw)} {kind} {right}", False


@st.composite
def join_query(draw: st.DrawFn) -> tuple[str, bool]:
    kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", "RIGHT JOIN"]))
    items = draw(st.sampled_from(["*", "t1.k, t2.b", "t1.s, t2.s, t1.a + t2.b AS total", "t2.*", "t1.a, t2.k AS k2"]))
    extra = draw(st.sampled_from(["", " AND t2.b > 0"])) if kind != "RIGHT JOIN" else ""
    where = draw(st.sampled_from(["", " WHERE t1.a IS NOT NULL", " WHERE t2.b IS NULL OR t1.x > 0"]))
    return f"SELECT {items} FROM t1 {kind} t2 ON t1.k = t2.k{extra}{where}", False


@st.composite
def ranked_query(draw: st.DrawFn) -> tuple[str, bool]:
    """ORDER BY keys outside the SELECT list (hidden columns) or aggregates; still a total order."""
    if draw(st.booleans()):
        items = draw(st.sampled_from(["a", "upper(s) AS us", "a, x", "coalesce(a, k) AS ak"]))
        direction = draw(st.sampled_from(["", " DESC", " DESC NULLS FIRST", " NULLS FIRST"]))
        limit = draw(st.sampled_from(["", " LIMIT 4", " LIMIT 3 OFFSET 2"]))
        return f"SELECT {items} FROM t1{_where(draw)} ORDER BY x{direction}, k, a, s{limit}", True
    agg = draw(st.sampled_from(["count(*)", "sum(a)", "max(s)"]))
    limit = draw(st.sampled_from(["", " LIMIT 2"]))
    return f"SELECT k, {agg} AS v FROM t1 GROUP BY k ORDER BY v DESC, k NULLS FIRST{limit}", True


@st.composite
def joined_subquery_query(draw: st.DrawFn) -> tuple[str, bool]:
    inner = draw(st.sampled_from(["SELECT k, sum(a) AS sa FROM t1 GROUP BY k", "SELECT DISTINCT k, s FROM t1"]))
    kind = draw(st.sampled_from(["JOIN", "LEFT JOIN"]))
    return f"SELECT * FROM ({inner}) q {kind} t2 ON q.k = t2.k{_where_t2(draw)}", False


def _where_t2(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["", " WHERE t2.b IS NOT NULL", " WHERE q.k > 0 OR t2.s = 'a'"]))


@st.composite
def nested_query(draw: st.DrawFn) -> tuple[str, bool]:
    form = draw(st.sampled_from(["in", "cte", "from"]))
    if form == "in":
        return f"SELECT a, s FROM t1 WHERE k IN (SELECT k FROM t2 WHERE b > {draw(st.integers(-3, 3))})", False
    inner = draw(aggregate_query())[0] if draw(st.booleans()) else draw(select_query())[0]
    if " ORDER BY " in inner:
        inner = inner.split(" ORDER BY ")[0]
    if form == "cte":
        return f"WITH q AS ({inner}) SELECT * FROM q", False
    return f"SELECT * FROM ({inner}) AS sub", False


@st.composite
def cases(draw: st.DrawFn, with_joins: bool = True) -> Case:
    forms = [select_query(), aggregate_query(), distinct_query(), union_query(), nested_query(), ranked_query()]
    if with_joins:
        forms += [join_query(), joined_subquery_query()]
    sql, ordered = draw(st.one_of(*forms))
    return Case(draw(tables()), sql, ordered, " JOIN " in sql or " IN (SELECT" in sql)
