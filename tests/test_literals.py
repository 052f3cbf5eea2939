"""indexer/literals.py (one Aho-Corasick pass for many literals) against the obvious per-literal str.find
loops it replaced, on text with multi-byte characters, CJK, lone surrogates and empty lines."""

from __future__ import annotations

import random

import pytest

from indexer.literals import LiteralSet, for_lines

LITERALS = ("error", "err", "rror x", "sk-", "sk-ant-", "错误", "失败", "é", "a", "--")
ALPHABET = ["error", "err", "sk-", "sk-ant-", "错误", "失败", "é", "a", "-", " ", "x", "\n", "\n", "İ", "\ud800", "🙂"]


def texts() -> list[str]:
    rng = random.Random(7)
    out = ["", "\n", "no hit here", "错误\n\nerror"]
    for _ in range(300):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60))))
    return out


def naive_lines(text: str, literals: tuple[str, ...]) -> list[int]:
    return [i for i, line in enumerate(text.split("\n")) if any(lit in line for lit in literals)]


def naive_positions(text: str, literals: tuple[str, ...]) -> list[int]:
    return sorted({i for lit in literals for i in range(len(text)) if text.startswith(lit, i)})


def naive_first_lines(text: str, literals: tuple[str, ...], cap: int) -> dict[int, list[str]]:
    hits: dict[int, list[str]] = {}
    lines = text.split("\n")
    for lit in literals:
        found = [i for i, line in enumerate(lines) if lit in line][:cap]
        for i in found:
            hits.setdefault(i, []).append(lit)
    return hits


def test_same_answers_as_per_literal_search() -> None:
    literals = LITERALS
    scanner = LiteralSet(literals)
    for text in texts():
        assert for_lines(literals).lines_hit(text) == naive_lines(text, literals), text
        assert scanner.positions(text) == naive_positions(text, literals), text
        assert scanner.present(text) == {lit for lit in literals if lit in text}, text
        for cap in (1, 2, 40):
            assert scanner.first_lines(text, cap) == naive_first_lines(text, literals, cap), (text, cap)


def test_literals_with_a_line_break_are_dropped_for_line_search() -> None:
    assert for_lines(("a\nb", "zz")).literals == ("zz",)
    assert for_lines(("a\nb", "zz")).lines_hit("a\nb\nzz") == [2]


def test_empty_literal_is_refused() -> None:
    with pytest.raises(ValueError, match="empty literal"):
        LiteralSet(("ok", ""))
