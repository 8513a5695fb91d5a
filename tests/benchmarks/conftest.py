"""Make the repository's ``benchmarks`` package importable however pytest is started.

``benchmarks/`` is not part of the installed ``semray`` distribution; ``python -m pytest``
finds it through the working directory, a bare ``pytest`` does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
