"""Generated inputs shared by benchmarks: unique nonsense texts the simulator can match row by row."""

from __future__ import annotations

import random

SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "da", "fo", "gu", "hi", "jo", "be", "xa")


def nonsense_texts(rows: int, words: int, rng: random.Random) -> list[str]:
    """``rows`` distinct texts of ``words`` three-syllable words, e.g. ``"kalomi neruta ..."``."""
    texts: list[str] = []
    seen: set[str] = set()
    while len(texts) < rows:
        text = " ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(words))
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts
