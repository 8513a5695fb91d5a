"""Readers for Scan: every source yields Arrow tables with a stable ``_rowid`` first.

>>> source = open_source("csv", "reviews.csv", {})  # doctest: +SKIP
>>> [batch for task in source.read_tasks(["review"], 1024) for batch in task()]  # doctest: +SKIP
"""

from semray.sources.base import ROW_ID, ReadTask, Source
from semray.sources.memory_source import register_table, unregister_table
from semray.sources.registry import OPENERS, open_source

__all__ = ["OPENERS", "ROW_ID", "ReadTask", "Source", "open_source", "register_table", "unregister_table"]
