"""semray: analytical queries with relational and semantic operators on Ray.

>>> import semray
>>> semray.read_csv("reviews.csv").filter("rating >= 4").collect()  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import os as _os
import sys
import types
from typing import Any

# Ray 2.60 binds every interface unless this is set before ray is first imported; the
# embedded cluster must listen on 127.0.0.1 only (checked by tests/test_cluster.py).
_os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
_os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

_EXPORTS = {
    "Query": "semray.api",
    "from_arrow": "semray.api",
    "from_pandas": "semray.api",
    "load_plan": "semray.api",
    "read_catalog": "semray.api",
    "read_csv": "semray.api",
    "read_json": "semray.api",
    "read_parquet": "semray.api",
    "read_sql": "semray.api",
    "read_text": "semray.api",
    "SemrayError": "semray.errors",
    "ask": "semray.asking",
    "Settings": "semray.settings",
}

__all__ = [*sorted(_EXPORTS), "sql"]


def __getattr__(name: str) -> Any:
    # Lazy: importing semray.operators must not pull in the readers, pandas or Ray.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'semray' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


class _SemrayModule(types.ModuleType):
    """``semray.sql(query, tables)`` is the SQL entry point, while ``semray.sql`` is also
    a subpackage: a property on the module keeps the attribute the function even after
    the subpackage is imported (``import semray.sql`` still works through sys.modules)."""

    @property
    def sql(self) -> Any:
        from semray.api import sql

        return sql

    @sql.setter
    def sql(self, value: Any) -> None:
        del value  # the import system records the subpackage here; keep the function


sys.modules[__name__].__class__ = _SemrayModule
