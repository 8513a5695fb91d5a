"""Model backends: each turns rendered calls into raw completions; ``tier.py`` does the rest."""

from __future__ import annotations

from semray.serving.backends.base import Backend, Call, RawCompletion, build_backend

__all__ = ["Backend", "Call", "RawCompletion", "build_backend"]
