"""Fixtures for the KB-growth tests. Every test gets its own temporary copy of kb/cases and of the
session's search index (tests/conftest.py `doctor` builds it once), its own SQLite file, and a real
engine on them; the repository's kb/cases is never written."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import REVIEWER, copy_kb, make_engine


@pytest.fixture
def grow_settings(tmp_path: Path, doctor: Any, settings: Any) -> Any:
    """Settings on a temp KB copy + a copy of the session index (so opening it re-embeds nothing)."""
    _ = doctor.index  # the session index over the bundled KB exists
    cases = copy_kb(tmp_path / "cases")
    index = tmp_path / "index"
    shutil.copytree(settings.index_dir, index, ignore=shutil.ignore_patterns(".lock", "*.tmp"))
    return settings.model_copy(
        update={
            "kb_dir": cases,
            "index_dir": index,
            "kb_db_path": tmp_path / "kb.sqlite3",
            "kb_reviewers": [REVIEWER],
            "kb_write_dir": None,
            "kb_git_commit": False,
        }
    )


@pytest.fixture
def engine(grow_settings: Any) -> Any:
    return make_engine(grow_settings)


@pytest.fixture
def growth(grow_settings: Any, engine: Any) -> Iterator[Any]:
    from bot.kb_growth import KBGrowth

    yield KBGrowth(grow_settings, engine)
