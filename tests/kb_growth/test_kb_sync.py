"""KB changes shared between replicas (bot/kb_growth/sync.py) on SQLite and a real PostgreSQL: a case file
written on replica A is applied to replica B's cases directory by B's poll, atomically, once; A skips
its own; paths outside the cases directory are refused; a replica that starts later catches up. The
engine is a counter of reload calls (its incremental reload is tested with the real index elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.kb_growth.db import Database
from bot.kb_growth.sync import KBSync, publish


class Engine:
    def __init__(self) -> None:
        self.reloads = 0

    def reload_if_changed(self) -> bool:
        self.reloads += 1
        return True


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "postgresql":
        return Database(request.getfixturevalue("postgres_url"))
    return Database(tmp_path / "kb.sqlite3")


CASE = "id: widget-oom\ntitle: Widget runs out of memory\n"


def test_a_case_written_on_one_replica_reaches_the_others(db: Database, tmp_path: Path) -> None:
    dir_a, dir_b, dir_c = (tmp_path / n / "cases" for n in "abc")
    for d in (dir_a, dir_b, dir_c):
        (d / "server").mkdir(parents=True)
    engine_a, engine_b = Engine(), Engine()
    sync_a, sync_b = KBSync(db, dir_a, engine_a, "A"), KBSync(db, dir_b, engine_b, "B")
    assert sync_b.poll_once() == 0 and engine_b.reloads == 0

    written = dir_a / "server" / "widget-oom.yaml"
    written.write_text(CASE, encoding="utf-8")
    first = publish(db, dir_a, written, "A")
    assert sync_a.poll_once() == 0 and engine_a.reloads == 0  # its own change: already live on A
    assert sync_b.poll_once() == 1 and engine_b.reloads == 1
    assert (dir_b / "server" / "widget-oom.yaml").read_text(encoding="utf-8") == CASE
    assert sync_b.poll_once() == 0 and engine_b.reloads == 1  # applied once
    assert not list(dir_b.rglob("*.tmp"))

    written.write_text(CASE + "summary: more\n", encoding="utf-8")  # a new example on the same case
    assert publish(db, dir_a, written, "A") > first
    assert sync_b.poll_once() == 1
    assert (dir_b / "server" / "widget-oom.yaml").read_text(encoding="utf-8").endswith("summary: more\n")

    late = KBSync(db, dir_c, Engine(), "C")  # started after both changes: catches up to the latest text
    assert late.poll_once() == 1 and (dir_c / "server" / "widget-oom.yaml").read_text().endswith("more\n")


def test_a_change_outside_the_cases_directory_is_refused(db: Database, tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    with db.write() as conn:
        conn.execute("INSERT INTO kb_changes (relpath, content, replica, created) VALUES (?, ?, ?, ?)",
                     ("../../etc/evil.yaml", "x", "A", 0.0))
    engine = Engine()
    assert KBSync(db, cases, engine, "B").poll_once() == 0 and engine.reloads == 0
    assert not (tmp_path / "etc").exists()
    with pytest.raises(ValueError):
        outside = tmp_path / "elsewhere.yaml"
        outside.write_text("x")
        publish(db, cases, outside, "A")


def test_a_failed_write_is_retried_at_the_next_poll_not_lost(db: Database, tmp_path: Path) -> None:
    """Issue 28: the version advanced before the file was written, so one failed write lost the change on
    that replica until a restart. Now the version moves only once every file is on disk."""
    dir_a, dir_b = (tmp_path / n / "cases" for n in "ab")
    (dir_a / "server").mkdir(parents=True)
    dir_b.mkdir(parents=True)
    written = dir_a / "server" / "widget-oom.yaml"
    written.write_text(CASE, encoding="utf-8")
    publish(db, dir_a, written, "A")
    sync_b = KBSync(db, dir_b, Engine(), "B")
    (dir_b / "server").write_text("a file where the directory should be", encoding="utf-8")
    with pytest.raises(OSError):
        sync_b.poll_once()
    assert sync_b.version == 0
    (dir_b / "server").unlink()
    assert sync_b.poll_once() == 1
    assert (dir_b / "server" / "widget-oom.yaml").read_text(encoding="utf-8") == CASE
