"""Find which documents a prompt quotes, from its text alone.

Text is normalised (JSON and HTML escapes decoded, tags dropped, NFKC, case-folded) into
words of letters and digits, so whitespace, quoting, escaping and punctuation changes do not
matter. Every document's ``k``-word shingles are hashed into one sorted array; a prompt's
shingles vote for documents, and documents are accepted greedily: the one with most votes
first, its shingle positions are then explained away, and the next one must win on what is left.
A document is accepted when it has at least ``min_shingles`` votes and either covers
``min_coverage`` of its own shingles (truncated quotes still match) or has ``strong_shingles``.

>>> index = ShingleIndex.build([("d", 0, "The cat sat on the warm mat today", "text")], MatchingConfig(shingle_words=3))
>>> [m.row.index for m in index.match("Is this about cats? 'the  cat SAT on the warm mat'").documents]
[0]
"""

from __future__ import annotations

import html
import itertools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from semray.serving.simulator.config import MatchingConfig
from semray.serving.simulator.truth import RowRef

_JSON_UNICODE = re.compile(r"\\u([0-9a-fA-F]{4})")
_JSON_ESCAPE = re.compile(r"\\([nrtbf\"\\/'])")
_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
_WORD = re.compile(r"[^\W_]+")
_ESCAPE_REPLACEMENTS = {"n": " ", "r": " ", "t": " ", "b": " ", "f": " ", '"': '"', "\\": "\\", "/": "/", "'": "'"}


def normalize_words(text: str) -> list[str]:
    """The words of ``text`` after undoing escaping: what shingles are made of.

    >>> normalize_words('I\\u0027ve a &quot;high&quot;\\nfever')
    ['i', 've', 'a', 'high', 'fever']
    """
    for _ in range(2):  # twice: prompts sometimes escape a JSON-escaped document again
        text = _JSON_UNICODE.sub(lambda m: chr(int(m.group(1), 16)), text)
        text = _JSON_ESCAPE.sub(lambda m: _ESCAPE_REPLACEMENTS[m.group(1)], text)
        text = html.unescape(text)
    text = _TAG.sub(" ", text)
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant: a polynomial hash base


def shingle_hashes(words: list[str], size: int) -> npt.NDArray[np.uint64]:
    """Hashes of each ``size``-word window (one window of all words when there are fewer).

    A polynomial (mod 2^64) over per-word hashes, vectorised with numpy. Python's string hash
    is salted per process; that is fine because an index and the prompts it matches are hashed
    in the same process, and which documents match never depends on hash values (only on
    64-bit equality, where collisions are negligible).
    """
    if not words:
        return np.empty(0, dtype=np.uint64)
    word_hashes = np.fromiter((hash(word) for word in words), dtype=np.int64, count=len(words)).view(np.uint64)
    width = min(size, len(words))
    count = len(words) - width + 1
    hashes = np.zeros(count, dtype=np.uint64)
    for offset in range(width):
        hashes = hashes * _MULTIPLIER + word_hashes[offset : offset + count]
    return hashes


@dataclass(frozen=True, slots=True)
class MatchedDocument:
    """A document found in a prompt: its row, the text column, votes, and first word position."""

    row: RowRef
    column: str
    votes: int
    position: int
    quotes: int = 1
    """How many times the prompt quotes it: runs of consecutive matching shingles that would
    each be accepted alone (a row paired with itself, or two rows with the same text)."""


@dataclass(frozen=True, slots=True)
class PromptMatch:
    """What a prompt is about: matched documents (in order of appearance) and its other words."""

    documents: tuple[MatchedDocument, ...]
    instruction_words: tuple[str, ...]

    @property
    def rows(self) -> tuple[RowRef, ...]:
        """Distinct rows in order of first appearance in the prompt."""
        seen: dict[RowRef, None] = {}
        for document in self.documents:
            seen.setdefault(document.row, None)
        return tuple(seen)

    @property
    def quoted_rows(self) -> tuple[RowRef, ...]:
        """Rows in order of appearance, a row quoted ``n`` times listed ``n`` times."""
        return tuple(document.row for document in self.documents for _ in range(document.quotes))


@dataclass(frozen=True, slots=True)
class ShingleIndex:
    """Sorted shingle hashes -> document ids, plus each document's informative shingle count."""

    config: MatchingConfig
    hashes: npt.NDArray[np.uint64]
    documents: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    refs: tuple[tuple[RowRef, str], ...]

    @classmethod
    def build(cls, documents: Iterable[tuple[str, int, str | None, str]], config: MatchingConfig) -> ShingleIndex:
        """Index ``(dataset, row index, text, column)`` documents; empty texts are skipped."""
        refs: list[tuple[RowRef, str]] = []
        hash_parts: list[npt.NDArray[np.uint64]] = []
        doc_parts: list[npt.NDArray[np.int64]] = []
        for entry in documents:
            dataset, index, text, column = entry
            if not text:
                continue
            hashes = shingle_hashes(normalize_words(text), config.shingle_words)
            if hashes.size == 0:
                continue
            hash_parts.append(hashes)
            doc_parts.append(np.full(hashes.size, len(refs), dtype=np.int64))
            refs.append((RowRef(dataset, index), column))
        all_hashes = np.concatenate(hash_parts) if hash_parts else np.empty(0, dtype=np.uint64)
        all_docs = np.concatenate(doc_parts) if doc_parts else np.empty(0, dtype=np.int64)
        order = np.lexsort((all_docs, all_hashes))
        all_hashes, all_docs = all_hashes[order], all_docs[order]
        # A shingle repeated inside one document counts once.
        first = np.ones(all_hashes.size, dtype=bool)
        first[1:] = (all_hashes[1:] != all_hashes[:-1]) | (all_docs[1:] != all_docs[:-1])
        all_hashes, all_docs = all_hashes[first], all_docs[first]
        # Shingles shared by many documents (boilerplate) say nothing about which one is quoted.
        _, inverse, counts = np.unique(all_hashes, return_inverse=True, return_counts=True)
        keep = counts[inverse] <= config.max_document_frequency
        all_hashes, all_docs = all_hashes[keep], all_docs[keep]
        sizes = np.bincount(all_docs, minlength=len(refs)).astype(np.int64)
        return cls(config, all_hashes, all_docs, sizes, tuple(refs))

    @property
    def document_count(self) -> int:
        return len(self.refs)

    def match(self, prompt: str) -> PromptMatch:
        """The documents quoted in ``prompt`` and the words that are not part of any of them."""
        words = normalize_words(prompt)
        size = self.config.shingle_words
        probes = shingle_hashes(words, size)
        left = np.searchsorted(self.hashes, probes, side="left")
        right = np.searchsorted(self.hashes, probes, side="right")
        votes: dict[int, set[int]] = {}
        for position in np.nonzero(right > left)[0].tolist():
            for document in self.documents[left[position] : right[position]].tolist():
                votes.setdefault(document, set()).add(position)
        accepted: list[MatchedDocument] = []
        explained: set[int] = set()
        while votes:
            # Most unexplained votes wins; then the document they cover best (a quote of a short
            # text that is the prefix of a longer one is the short one); then the lower id.
            document, positions = max(
                votes.items(),
                key=lambda item: (len(item[1] - explained), len(item[1]) / self.sizes[item[0]], -item[0]),
            )
            fresh = positions - explained
            if not self._accepts(len(fresh), int(self.sizes[document])):
                break
            row, column = self.refs[document]
            quotes = self._quotes(positions, fresh, int(self.sizes[document]))
            accepted.append(MatchedDocument(row, column, len(fresh), min(fresh), quotes))
            explained |= fresh
            del votes[document]
        covered = np.zeros(len(words), dtype=bool)
        for position in explained:
            covered[position : position + size] = True
        instruction = tuple(word for word, hit in zip(words, covered.tolist(), strict=True) if not hit)
        return PromptMatch(tuple(sorted(accepted, key=lambda d: d.position)), instruction)

    def _quotes(self, positions: set[int], fresh: set[int], size: int) -> int:
        """Quotes of one document: runs of consecutive positions voting for it that cover at least
        half of its shingles (or ``strong_shingles``) and that it explains (a phrase it shares with
        another quoted document, or a near-duplicate explained by that document, is no quote)."""
        needed = min(max(self.config.min_shingles, (size + 1) // 2), self.config.strong_shingles)
        ordered = sorted(positions)
        runs: list[list[int]] = [[ordered[0]]] if ordered else []
        for previous, current in itertools.pairwise(ordered):
            if current == previous + 1:
                runs[-1].append(current)
            else:
                runs.append([current])
        quoted = [run for run in runs if len(run) >= needed and 2 * len(fresh.intersection(run)) >= len(run)]
        return max(1, len(quoted))

    def _accepts(self, votes: int, size: int) -> bool:
        config = self.config
        if votes < 1 or votes < min(config.min_shingles, size):
            return False
        return votes >= config.strong_shingles or votes >= config.min_coverage * size
