"""Generate the demo corpus: ``python scripts/generate_demo_corpus.py OUT_FOLDER [ROWS]``."""

from __future__ import annotations

import sys
from pathlib import Path

from semray.demo.corpus import write

if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-data")
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    for name, path in write(folder, rows).items():
        sys.stdout.write(f"{name}: {path}\n")
