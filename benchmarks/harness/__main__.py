"""``python -m benchmarks.harness``: regenerate RESULTS.md from the committed results files."""

from __future__ import annotations

import sys

from benchmarks.harness.results import regenerate_report

if __name__ == "__main__":
    print(f"wrote {regenerate_report()}", file=sys.stderr)
