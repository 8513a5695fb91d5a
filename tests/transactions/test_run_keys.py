"""Run ids, fingerprints and batch keys."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from semray.transactions.keys import batch_key, file_safe, fingerprint, is_run_id, new_run_id


def test_run_ids_sort_by_time_and_are_unique() -> None:
    early = new_run_id(datetime(2026, 1, 1, tzinfo=UTC))
    late = new_run_id(datetime(2026, 1, 2, tzinfo=UTC))
    assert early < late and is_run_id(early)
    assert len({new_run_id() for _ in range(200)}) == 200
    assert not is_run_id("../etc")


def test_fingerprint_ignores_key_order_and_formatting() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint('{ "b": [1, 2], "a": 1 }')
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


@given(st.lists(st.text(min_size=0, max_size=5), max_size=8), st.randoms())
def test_batch_key_depends_on_the_set_of_rows_not_their_order(rows: list[str], rnd: object) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert batch_key("op", rows) == batch_key("op", shuffled)


def test_batch_key_separates_operators_and_row_boundaries() -> None:
    assert batch_key("op1", ["a"]) != batch_key("op2", ["a"])
    assert batch_key("op", ["ab", "c"]) != batch_key("op", ["a", "bc"])
    assert batch_key("op", [1, 2]) == batch_key("op", ["1", "2"])


def test_file_safe_names() -> None:
    assert file_safe("sem_filter-3") == "sem_filter-3"
    assert file_safe("../x") != "../x" and "/" not in file_safe("a/b")
    assert file_safe("a/b") == file_safe("a/b")
