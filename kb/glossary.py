"""Bilingual glossary of deployment terms (kb/glossary.yaml): schema, loader, and term lookup.

A question names a term in one language; the glossary gives the other language's forms, so a Chinese
question reaches the English signatures and cause text, and an English question the Chinese text. The
lookup is plain string matching (no segmentation here): Chinese forms by substring, English forms as whole
words, case-insensitive. docs/language.md describes how the question flow uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kb.loader import KBError, _format_validation

DEFAULT_GLOSSARY = Path(__file__).resolve().parent / "glossary.yaml"
_CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def has_cjk(text: str) -> bool:
    return bool(_CJK_RE.search(text))


class GlossaryEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    zh: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)

    @field_validator("zh")
    @classmethod
    def _zh_is_chinese(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not t or not has_cjk(t)]
        if bad:
            raise ValueError(f"Chinese forms must contain Chinese characters: {bad}")
        return v

    @field_validator("en")
    @classmethod
    def _en_is_latin(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not t or has_cjk(t)]
        if bad:
            raise ValueError(f"English forms must not contain Chinese characters: {bad}")
        return v


class GlossaryFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[GlossaryEntry] = Field(min_length=1)


@dataclass(frozen=True)
class TermHit:
    """A glossary form found in a text, and the other language's forms it brings in."""

    found: str
    language: str  # "zh" or "en": the language of `found`
    other: tuple[str, ...]


class Glossary:
    def __init__(self, entries: list[GlossaryEntry]):
        self.entries = tuple(entries)
        self._en_res = [
            [re.compile(r"(?<![A-Za-z0-9_])" + re.escape(t) + r"(?![A-Za-z0-9_])", re.IGNORECASE) for t in e.en]
            for e in self.entries
        ]

    def chinese_words(self) -> list[str]:
        """Chinese forms without spaces: the segmenter keeps them whole."""
        return sorted({t for e in self.entries for t in e.zh if " " not in t})

    def lookup(self, text: str) -> list[TermHit]:
        """Every form of every entry that occurs in `text`, longest forms first."""
        hits: list[TermHit] = []
        lowered = text.lower()
        spans = [(m.start(), m.start() + len(form)) for e in self.entries for form in e.zh if len(form) > 1
                 for m in re.finditer(re.escape(form.lower()), lowered)]
        for entry, en_res in zip(self.entries, self._en_res, strict=True):
            for form in entry.zh:
                if len(form) == 1:
                    # one character (卡) counts only where no longer form holds it: 卡住 is "stuck", not a GPU
                    at = [m.start() for m in re.finditer(re.escape(form.lower()), lowered)]
                    if at and any(not any(a <= i < b for a, b in spans) for i in at):
                        hits.append(TermHit(form, "zh", tuple(entry.en)))
                elif form.lower() in lowered:
                    hits.append(TermHit(form, "zh", tuple(entry.en)))
            for form, pattern in zip(entry.en, en_res, strict=True):
                if pattern.search(text):
                    hits.append(TermHit(form, "en", tuple(entry.zh)))
        hits.sort(key=lambda h: -len(h.found))
        return hits


def load_glossary(path: Path | str = DEFAULT_GLOSSARY) -> Glossary:
    """Raises KBError naming the file and the field when the glossary is invalid."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KBError(path, [f"cannot read: {exc}"]) from exc
    try:
        parsed = GlossaryFile.model_validate(data)
    except ValidationError as exc:
        raise KBError(path, _format_validation(exc)) from exc
    return Glossary(list(parsed.entries))


@cache
def default_glossary() -> Glossary:
    return load_glossary(DEFAULT_GLOSSARY)


__all__ = ["Glossary", "GlossaryEntry", "TermHit", "default_glossary", "has_cjk", "load_glossary"]
