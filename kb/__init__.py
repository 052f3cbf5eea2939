"""Declarative knowledge: failure cases and host checks as validated YAML. No ML, no network."""

from kb.loader import KBError, KnowledgeBase, load_case_file, load_cases, load_kb
from kb.schema import Case, Example, FixStep

__all__ = [
    "Case",
    "Example",
    "FixStep",
    "KBError",
    "KnowledgeBase",
    "load_case_file",
    "load_cases",
    "load_kb",
]
