"""A damaged SQLite file (KB growth, Slack state) is moved aside and recreated with one warning line; a
read-only KB database still serves reading commands; no sqlite3 traceback reaches the user."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.kb_growth.candidates import CandidateStore
from bot.kb_growth.db import Database
from bot.slack.store import SlackStateDB

REPO = Path(__file__).resolve().parent.parent
LOG = "ERROR 12-01 10:00:00 [core.py:1] OSError: [Errno 24] Too many open files: '/tmp/x'"


def _kb_db(path: Path, rows: int = 300) -> Path:
    db = Database(path)
    store = CandidateStore(db)
    for n in range(rows):
        word = "".join(chr(97 + int(d)) for d in str(n))  # a distinct failure per row (numbers are masked)
        store.add(f"RuntimeError: widget {word} failed", "unknown", now=float(n))
    del db
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garbage(p: Path) -> None:
    p.write_bytes(b"this is not a database, it is a text file that got copied over it\n" * 200)


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[200:6000] = b"\xff" * 5800  # the schema page and the first table pages
    p.write_bytes(bytes(data))


DAMAGE = {"truncated": _truncate, "overwritten": _garbage, "bytes flipped": _flip}


@pytest.fixture
def kb_db(tmp_path: Path) -> Path:
    return _kb_db(tmp_path / "kb.sqlite3")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_kb_database_is_quarantined_and_recreated(kb_db: Path, damage: str, caplog) -> None:
    DAMAGE[damage](kb_db)
    caplog.set_level(logging.WARNING)
    store = CandidateStore(Database(kb_db))
    assert store.counts()["open"] == 0  # a new, empty database
    assert store.add(LOG, "unknown") is not None  # and writable
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "damaged" in warnings[0] and "moved it to" in warnings[0], warnings
    quarantined = [p for p in kb_db.parent.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert len(quarantined) == 1  # the damaged file is kept for whoever wants to look at it


def test_healthy_database_is_left_alone(kb_db: Path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    assert CandidateStore(Database(kb_db)).counts()["open"] == 300
    assert _warnings(caplog) == []
    assert not [p for p in kb_db.parent.iterdir() if ".corrupt-" in p.name]


@pytest.mark.parametrize("damage", ["overwritten", "bytes flipped"])
def test_damaged_slack_state_file_is_recreated(tmp_path: Path, damage: str, caplog) -> None:
    path = tmp_path / "slack.sqlite3"
    SlackStateDB(path, retention_s=3600)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    DAMAGE[damage](path)
    caplog.set_level(logging.WARNING)
    SlackStateDB(path, retention_s=3600)  # the bot starts
    assert len([w for w in _warnings(caplog) if "damaged" in w]) == 1


def _cli(args: list[str], env_extra: dict[str, str], tmp_path: Path, read_only: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_DOCTOR_INDEX_DIR=str(tmp_path / "index"), **env_extra)
    cmd = [sys.executable, "-m", "bot", *args]
    if read_only is not None:
        if os.geteuid() == 0:  # root ignores file modes: a read-only bind mount in a private mount namespace
            if shutil.which("unshare") is None:
                message = "running as root without unshare (util-linux): cannot make a read-only directory"
                if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
                    pytest.fail(message + "; CI must have it", pytrace=False)
                pytest.skip(message)
            script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
            cmd = ["unshare", "-m", "sh", "-c", script, str(read_only), *cmd]
        else:
            read_only.chmod(0o555)
            for p in read_only.iterdir():
                p.chmod(0o444)
    try:
        return subprocess.run(cmd, capture_output=True, env=env, timeout=300, check=False, cwd=REPO)
    finally:
        if read_only is not None and os.geteuid() != 0:
            read_only.chmod(0o755)


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_cli_on_a_damaged_kb_database_recovers_with_one_line(kb_db: Path, tmp_path: Path, damage: str) -> None:
    DAMAGE[damage](kb_db)
    proc = _cli(["kb", "stats"], {"VLLM_DOCTOR_KB_DB": str(kb_db)}, tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "damaged" in err
    assert "candidates for new cases: 0 open" in proc.stdout.decode()


def test_cli_reads_a_read_only_kb_database(tmp_path: Path) -> None:
    ro_dir = tmp_path / "ro"
    ro_dir.mkdir()
    _kb_db(ro_dir / "kb.sqlite3", rows=5)
    for side in ro_dir.glob("kb.sqlite3-*"):
        side.unlink()
    env = {"VLLM_DOCTOR_KB_DB": str(ro_dir / "kb.sqlite3")}
    proc = _cli(["kb", "stats"], env, tmp_path, read_only=ro_dir)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "candidates for new cases: 5 open" in proc.stdout.decode()
    assert "Traceback" not in err and "read-only" in err


def test_read_only_database_refuses_writes_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.storage.database as storage
    from bot.storage.sqlite_recovery import FileState

    path = _kb_db(tmp_path / "kb.sqlite3", rows=2)
    # what check_sqlite_file says of a file this process cannot write (tested for real above, via the CLI)
    monkeypatch.setattr(storage, "check_sqlite_file", lambda *_a: FileState(read_only=True, exists=True))
    db = Database(path)
    assert db.read_only
    assert CandidateStore(db).counts()["open"] == 2
    with pytest.raises(ConfigError, match="read-only; nothing can be saved"):
        CandidateStore(db).add(LOG, "unknown")
