"""SQL's SEM_EXTRACT reads its fields by the grammar `Query.sem_extract` reads them by
(``semray.operators.field_specs``): the same synonyms, the same names, the same plan."""

from __future__ import annotations

import pytest

from semray.api import Query
from semray.errors import PlanError
from semray.operators import ExtractField, Node, SemExtract
from semray.sql import compile_sql
from semray.sql.diagnostics import UnsupportedSqlError

SYNONYMS = "sender: VARCHAR, amount: double, count: integer, paid: Boolean, day: date, note"
CANONICAL = (
    ExtractField(name="sender"),
    ExtractField(name="amount", type="float"),
    ExtractField(name="count", type="int"),
    ExtractField(name="paid", type="bool"),
    ExtractField(name="day", type="date"),
    ExtractField(name="note"),
)


def extracted(plan: Node) -> SemExtract:
    found = plan if isinstance(plan, SemExtract) else plan.children[0]
    assert isinstance(found, SemExtract)
    return found


@pytest.mark.parametrize("spec", [SYNONYMS, "sender: text, amount: float, count: int, paid: bool, day: date, note:"])
def test_synonyms_give_the_same_fields_through_sql_and_the_builder(corpus: dict[str, Node], spec: str) -> None:
    from_sql = compile_sql(f"SELECT SEM_EXTRACT('From {{body}} take them', '{spec}') FROM emails", corpus)
    from_builder = Query(corpus["emails"]).sem_extract("From {body} take them", spec).plan
    assert extracted(from_sql).fields == extracted(from_builder).fields == CANONICAL
    assert extracted(from_sql) == from_builder
    assert extracted(from_sql).output_schema.type_of("count") == "BIGINT"


def test_a_name_that_is_not_an_identifier_reads_the_same_through_both(corpus: dict[str, Node]) -> None:
    from_sql = compile_sql("SELECT SEM_EXTRACT('From {body}', 'first name: text') FROM emails", corpus)
    from_builder = Query(corpus["emails"]).sem_extract("From {body}", "first name: text").plan
    assert extracted(from_sql) == from_builder
    assert extracted(from_sql).fields == (ExtractField(name="first name"),)


@pytest.mark.parametrize(
    ("spec", "sql_fragments", "python_fragment"),
    [
        ("who: person", ["the value type 'person' (at line 1, column 8)", "use one of text, int"], "has type 'person'"),
        ("a,,b", ["the field spec '' (at line 1, column 8)", "'name: type, ...'"], "empty field in 'a,,b'"),
    ],
)
def test_a_bad_spec_is_refused_by_both_each_in_its_own_words(
    corpus: dict[str, Node], spec: str, sql_fragments: list[str], python_fragment: str
) -> None:
    with pytest.raises(UnsupportedSqlError) as caught:
        compile_sql(f"SELECT SEM_EXTRACT('{{body}}', '{spec}') FROM emails", corpus)
    for fragment in sql_fragments:
        assert fragment in str(caught.value)
    with pytest.raises(PlanError, match=python_fragment):
        Query(corpus["emails"]).sem_extract("{body}", spec)
