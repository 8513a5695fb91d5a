"""Every rule against its before/after fixtures; the order of RULES; fixture coverage."""

from __future__ import annotations

import pytest
from planner_fixtures import FIXTURES, TABLES, Fixture
from planner_reference import as_multiset, evaluate

from semray.operators import render_tree
from semray.planner import rules
from semray.planner.rules import RULES


@pytest.mark.parametrize("fixture", FIXTURES, ids=[fixture.name for fixture in FIXTURES])
def test_rule_rewrites_before_into_after(fixture: Fixture) -> None:
    rewritten = fixture.rule(fixture.before, fixture.context)
    assert rewritten == fixture.after, f"\ngot:\n{render_tree(rewritten)}\nwant:\n{render_tree(fixture.after)}"
    assert fixture.rule(rewritten, fixture.context) == rewritten, "a rule applied twice changes nothing more"
    assert rewritten.output_schema == fixture.before.output_schema
    assert as_multiset(evaluate(rewritten, TABLES)) == as_multiset(evaluate(fixture.before, TABLES))


def test_every_rule_has_a_fixture_that_changes_a_plan() -> None:
    changing = {fixture.rule for fixture in FIXTURES if fixture.before != fixture.after}
    assert changing == set(RULES)


def test_rules_run_in_the_documented_order() -> None:
    assert (
        rules.share_semantic_expressions,
        rules.push_filters_below_semantic,
        rules.defer_unneeded_semantic,
        rules.split_extract_fields,
        rules.push_limit_down,
        rules.order_semantic_filters,
        rules.factorize_semantic_joins,
        rules.prune_columns,
    ) == RULES


def test_every_rule_module_has_the_documented_docstring() -> None:
    for rule in RULES:
        module = __import__(rule.__module__, fromlist=["_"])
        text = module.__doc__ or ""
        assert "Precondition" in text and "preserved" in text and "Before" in text, rule.__module__
