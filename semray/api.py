"""The public entry points: read sources, SQL and JSON plans into a ``Query``.

This module is the public surface only: the builder lives in ``semray/query.py`` and the
readers in ``semray/readers.py``; nothing inside semray imports this module.

>>> import semray
>>> q = semray.read_csv("reviews.csv").filter("rating >= 4").select("product", "rating")  # doctest: +SKIP
>>> q.collect()  # doctest: +SKIP
"""

from __future__ import annotations

from semray.query import OptionValue, Query
from semray.readers import (
    from_arrow,
    from_pandas,
    load_plan,
    read_catalog,
    read_csv,
    read_json,
    read_parquet,
    read_sql,
    read_text,
    sql,
    table_query,
)

__all__ = [
    "OptionValue",
    "Query",
    "from_arrow",
    "from_pandas",
    "load_plan",
    "read_catalog",
    "read_csv",
    "read_json",
    "read_parquet",
    "read_sql",
    "read_text",
    "sql",
    "table_query",
]
