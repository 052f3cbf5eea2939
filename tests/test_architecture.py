"""Keep the design honest: each heavy library is imported in exactly one module, and dependencies point
one way (kb ← indexer ← bot)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = {
    "slack_bolt": "bot/slack/app.py",
    "openai": "bot/explain/llm.py",
    "asyncssh": "bot/runner/ssh.py",
    "sentence_transformers": "indexer/encoder.py",
    "faiss": "indexer/store.py",
    "psycopg": "bot/storage/postgres.py",
    "psycopg_pool": "bot/storage/postgres.py",
    "prometheus_client": "bot/ops/metrics.py",
    "matplotlib": "bot/pictures.py",
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


SOURCES = sorted(p for pkg in ("bot", "kb", "indexer") for p in (REPO / pkg).rglob("*.py"))


@pytest.mark.parametrize(("library", "owner"), HEAVY.items())
def test_heavy_library_imported_in_exactly_one_module(library: str, owner: str) -> None:
    users = [str(p.relative_to(REPO)) for p in SOURCES if library in imports_of(p)]
    assert users == [owner]


def test_layers_point_one_way() -> None:
    for path in SOURCES:
        rel = path.relative_to(REPO).parts[0]
        deps = imports_of(path) & {"bot", "kb", "indexer"}
        if rel == "kb":
            assert deps <= {"kb"}, f"{path}: kb must not import {deps - {'kb'}}"
        elif rel == "indexer":
            assert deps <= {"kb", "indexer"}, f"{path}: indexer may only import kb, not {deps}"
