"""Random valid plans mixing relational and semantic operators, for differential tests.

Two small tables: ``t`` (id, a, b, c) and ``u`` (uid, d, e). A plan is built step by step
from a menu; each step reads columns that exist at that point (including outputs of earlier
semantic steps), and a step that would not validate is skipped. Instructions come from a
short list so that repeats (rule 8) and "same X" joins (rule 7) occur.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pyarrow as pa
from planner_reference import memory_scan

from semray.errors import PlanError
from semray.operators import (
    Aggregate,
    Distinct,
    ExtractField,
    Filter,
    Join,
    Limit,
    NamedExpr,
    Node,
    Project,
    SemClassify,
    SemExtract,
    SemFilter,
    SemJoin,
    SemMap,
    SemTopK,
    Sort,
    SortKey,
    Union,
)

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta")


def tables(seed: int = 3) -> dict[str, pa.Table]:
    rng = random.Random(seed)
    t = pa.table(
        {
            "id": list(range(24)),
            "a": [rng.randint(0, 9) for _ in range(24)],
            "b": [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(24)],
            "c": [rng.choice(WORDS) for _ in range(24)],
        }
    )
    u = pa.table(
        {
            "uid": list(range(7)),
            "d": [rng.choice(WORDS) for _ in range(7)],
            "e": [rng.randint(0, 9) for _ in range(7)],
        }
    )
    return {"t": t, "u": u}


class PlanBuilder:
    """Builds one plan from a stream of choices (``choose(n) -> 0..n-1``)."""

    def __init__(self, choose: Callable[[int], int]) -> None:
        self.choose = choose
        self.counter = 0
        data = tables()
        self.base = memory_scan("t", data["t"])
        self.other = memory_scan("u", data["u"])

    def pick(self, options: list[str] | tuple[str, ...]) -> str:
        if not options:
            raise IndexError("nothing to pick")
        return options[self.choose(len(options))]

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def columns(self, node: Node, types: tuple[str, ...]) -> list[str]:
        return [c.name for c in node.output_schema.user_columns() if c.type in types]

    def build(self, steps: int) -> Node:
        node: Node = self.base
        for _ in range(steps):
            step = self.STEPS[self.choose(len(self.STEPS))]
            try:
                node = step(self, node)
            except (PlanError, IndexError):
                continue
        return node

    # steps --------------------------------------------------------------------------
    def filter_numbers(self, node: Node) -> Node:
        numbers = self.columns(node, ("BIGINT",))
        first = f"{self.pick(numbers)} % 3 <> {self.choose(3)}"
        if self.choose(2):
            return Filter(input=node, predicate=first)
        return Filter(input=node, predicate=f"{first} AND {self.pick(numbers)} >= {self.choose(6)}")

    def filter_text(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        return Filter(input=node, predicate=f"{self.pick(texts)} <> '{self.pick(WORDS)}'")

    def sem_filter(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        return SemFilter(input=node, instruction=f"{{{self.pick(texts)}}} is {self.pick(('good', 'odd'))}")

    def sem_map(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        instruction = f"rate {{{self.pick(texts)}}}"
        return SemMap(input=node, instruction=instruction, output=self.fresh("m"), output_type="int", lo=1, hi=5)

    def sem_classify(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        return SemClassify(
            input=node, instruction=f"kind of {{{self.pick(texts)}}}", labels=("x", "y", "z"), output=self.fresh("k")
        )

    def sem_extract(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        n = self.counter + 1
        self.counter += 1
        fields = (
            ExtractField(name=f"p{n}", type="int"),
            ExtractField(name=f"q{n}"),
            ExtractField(name=f"r{n}", type="int"),
        )
        return SemExtract(
            input=node, instruction=f"facts in {{{self.pick(texts)}}}", fields=fields[: 2 + self.choose(2)]
        )

    def use_output(self, node: Node) -> Node:
        produced = [c for c in self.columns(node, ("BIGINT", "VARCHAR")) if c[0] in "mkpqr"]
        column = self.pick(produced)
        if node.output_schema.type_of(column) == "BIGINT":
            return Filter(input=node, predicate=f"{column} > {self.choose(4)}")
        if self.choose(2):
            return SemFilter(input=node, instruction=f"{{{column}}} is good")
        return Filter(input=node, predicate=f"{column} <> 'x'")

    def limit(self, node: Node) -> Node:
        return Limit(input=node, count=self.choose(9), offset=self.choose(3))

    def sort(self, node: Node) -> Node:
        names = [c.name for c in node.output_schema.user_columns()]
        return Sort(input=node, keys=(SortKey(column=self.pick(names), descending=bool(self.choose(2))),))

    def project(self, node: Node) -> Node:
        names = [c.name for c in node.output_schema.user_columns()]
        kept = [name for name in names if self.choose(3)] or names[:1]
        return Project(input=node, exprs=tuple(NamedExpr(name=name, expr=name) for name in kept))

    def join(self, node: Node) -> Node:
        right: Node = self.other
        if self.choose(2):
            right = Filter(input=right, predicate=f"e >= {self.choose(5)}")
        numbers = self.columns(node, ("BIGINT",))
        return Join(
            left=node, right=right, on=f"l.{self.pick(numbers)} = r.e", kind=self.pick(("inner", "semi", "anti"))
        )

    def sem_join(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        right: Node = self.other
        if self.choose(2):
            right = SemFilter(input=right, instruction="{d} is good")
        template = self.pick(("{{l.{0}}} and {{r.d}} have the same topic", "{{l.{0}}} matches {{r.d}}"))
        return SemJoin(left=node, right=right, instruction=template.format(self.pick(texts)))

    def union(self, node: Node) -> Node:
        numbers = self.columns(node, ("BIGINT",))
        return Union(inputs=(node, Filter(input=node, predicate=f"{self.pick(numbers)} % 2 = 0")))

    def distinct(self, node: Node) -> Node:
        return Distinct(input=node)

    def topk(self, node: Node) -> Node:
        texts = self.columns(node, ("VARCHAR",))
        return SemTopK(
            input=node, instruction=f"best {{{self.pick(texts)}}}", k=1 + self.choose(5), output=self.fresh("rank")
        )

    def aggregate(self, node: Node) -> Node:
        names = [c.name for c in node.output_schema.user_columns()]
        numbers = self.columns(node, ("BIGINT",))
        aggs = (
            NamedExpr(name=self.fresh("n"), expr="count(*)"),
            NamedExpr(name=self.fresh("s"), expr=f"sum({self.pick(numbers)})"),
        )
        return Aggregate(input=node, keys=(self.pick(names),), aggs=aggs)

    STEPS: tuple[Callable[[PlanBuilder, Node], Node], ...] = (
        filter_numbers,
        filter_text,
        sem_filter,
        sem_filter,
        sem_map,
        sem_classify,
        sem_extract,
        sem_extract,
        use_output,
        use_output,
        use_output,
        limit,
        sort,
        project,
        join,
        sem_join,
        union,
        distinct,
        topk,
        aggregate,
    )
