"""Many literal strings found in one pass over a large text (Aho-Corasick, `ahocorasick_rs`).

Distillation's keyword pre-filter, redaction's rule triggers and the fact reader's markers each used to
scan a 10 MB paste once per literal (~70, ~60 and ~40 passes); one automaton pass over the UTF-8 bytes
replaces each of them (~35 ms for 10 MB; the str interface of the library is 5x slower, so text is
encoded once). This is the only module that imports the library. Literals are compared as given: callers
pass lower-case literals and the lower-cased text.
"""

from __future__ import annotations

from functools import lru_cache

import ahocorasick_rs


def _utf8(text: str) -> bytes:
    # Lines are counted on the bytes: no multi-byte UTF-8 sequence holds the byte 0x0A, so the count
    # is the same as for str.split("\\n").
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate must not stop the scan


class LiteralSet:
    """An immutable set of literals, compiled once."""

    def __init__(self, literals: tuple[str, ...]) -> None:
        if any(not lit for lit in literals):
            raise ValueError("empty literal")
        self.literals = tuple(dict.fromkeys(literals))  # unique, order kept
        self._automaton = ahocorasick_rs.BytesAhoCorasick([_utf8(lit) for lit in self.literals])

    def present(self, text: str) -> frozenset[str]:
        """Which literals occur anywhere in `text` (overlapping occurrences count: 'sk-' and 'sk-ant-')."""
        found = {i for i, _, _ in self._automaton.find_matches_as_indexes(_utf8(text), overlapping=True)}
        return frozenset(self.literals[i] for i in found)

    def positions(self, text: str) -> list[int]:
        """Sorted, unique str offsets where an occurrence of a literal begins (overlapping ones too)."""
        data = _utf8(text)
        starts = sorted({start for _, start, _ in self._automaton.find_matches_as_indexes(data, overlapping=True)})
        if not starts or len(data) == len(text):  # ASCII: byte offsets are str offsets
            return starts
        out: list[int] = []
        char, byte = 0, 0
        for start in starts:  # one incremental decode over the text in all: linear
            char += len(data[byte:start].decode("utf-8", "surrogatepass"))
            byte = start
            out.append(char)
        return out

    def lines_hit(self, text: str) -> list[int]:
        """Sorted indices of the lines of `text` (split on "\n") that hold a literal.

        Non-overlapping matches suffice: a literal hidden under an overlapping match sits on the same line,
        since no literal holds a line break (`for_lines` drops those)."""
        data = _utf8(text)
        found: list[int] = []
        line, counted_to, next_line_start = 0, 0, -1
        for _, start, _ in self._automaton.find_matches_as_indexes(data):  # in text order
            if start < next_line_start:
                continue  # this line is already in
            line += data.count(b"\n", counted_to, start)
            counted_to = start
            found.append(line)
            end_of_line = data.find(b"\n", start)
            next_line_start = len(data) + 1 if end_of_line < 0 else end_of_line + 1
        return found

    def first_lines(self, text: str, per_literal: int) -> dict[int, list[str]]:
        """Line index → the literals found on it (in this set's order), counting for each literal only
        the first `per_literal` lines of `text` that hold it."""
        data = _utf8(text)
        lines_of: list[list[int]] = [[] for _ in self.literals]
        line, counted_to = 0, 0
        # overlapping matches come in order of their end; a literal holds no line break, so its end
        # byte is on its line
        for i, _, end in self._automaton.find_matches_as_indexes(data, overlapping=True):
            seen = lines_of[i]
            if len(seen) >= per_literal:
                continue
            if end >= counted_to:
                line += data.count(b"\n", counted_to, end)
            else:
                line -= data.count(b"\n", end, counted_to)
            counted_to = end
            if not seen or seen[-1] != line:  # one literal's matches come in text order
                seen.append(line)
        hits: dict[int, list[str]] = {}
        for i, lines in enumerate(lines_of):
            for idx in lines:
                hits.setdefault(idx, []).append(self.literals[i])
        return hits


@lru_cache(maxsize=16)
def literal_set(literals: tuple[str, ...]) -> LiteralSet:
    """A compiled set, cached: the KB's keyword tuple changes only when the KB is reloaded."""
    return LiteralSet(literals)


def for_lines(literals: tuple[str, ...]) -> LiteralSet:
    """A set for per-line search: literals holding a line break can never be found on one line."""
    return literal_set(tuple(lit for lit in literals if lit and "\n" not in lit))
