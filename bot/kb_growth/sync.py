"""KB changes reach every replica (issue 11): the replica that writes a case file also records it in
the shared database (`kb_changes`: a growing version number, the file's path under the cases directory
and its text); every replica polls that table (VLLM_DOCTOR_KB_POLL seconds), writes the files it has not
got yet into its own cases directory, atomically, and lets the pipeline pick them up
(Pipeline.reload_if_changed re-embeds only the changed cases). So a case approved on one replica is
matched on all of them within one poll interval plus one incremental index update.

The database is the log of record between replicas; git (VLLM_DOCTOR_KB_GIT_COMMIT) stays the record for
humans. Files are written only under the cases directory, at the relative path the writer chose.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.kb_growth.db import Database
from bot.storage import StorageError, one

log = logging.getLogger(__name__)


def publish(db: Database, cases_dir: Path, path: Path, replica: str, clock: Callable[[], float] = time.time) -> int:
    """Record a written case file for the other replicas; returns its version."""
    relpath = path.resolve().relative_to(cases_dir.resolve()).as_posix()
    text = path.read_text(encoding="utf-8")
    with db.write() as conn:
        row = one(conn.execute(
            "INSERT INTO kb_changes (relpath, content, replica, created) VALUES (?, ?, ?, ?) RETURNING version",
            (relpath, text, replica, clock()),
        ))
    return int(row[0])


def _safe_target(cases_dir: Path, relpath: str) -> Path | None:
    target = (cases_dir / relpath).resolve()
    if cases_dir.resolve() not in target.parents or target.suffix != ".yaml":
        return None
    return target


def _write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".sync-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class KBSync:
    """Applies other replicas' case files; `poll_once()` is the unit, `start()` runs it in a thread."""

    def __init__(self, db: Database, cases_dir: Path, pipeline: Any, replica: str, interval_s: float = 5.0) -> None:
        self.db, self.cases_dir, self.pipeline, self.replica = db, cases_dir, pipeline, replica
        self.interval_s = interval_s
        self.version = 0  # everything is applied once at start: changes made while this replica was down
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kb-sync", daemon=True)

    def poll_once(self) -> int:
        """Apply new changes; returns how many files were written here."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT version, relpath, content, replica FROM kb_changes WHERE version > ? "
                                "ORDER BY version", (self.version,)).fetchall()
        latest: dict[str, tuple[str, str]] = {}  # relpath -> (content, replica): only a file's newest text
        newest = self.version
        for row in rows:
            newest = max(newest, int(row[0]))
            latest.pop(str(row[1]), None)
            latest[str(row[1])] = (str(row[2]), str(row[3]))
        written = 0
        for relpath, (content, replica) in latest.items():
            target = _safe_target(self.cases_dir, relpath)
            if target is None:
                log.error("ignoring a KB change: %r is not a case file under %s", relpath, self.cases_dir)
                continue
            if replica == self.replica or (target.exists() and target.read_text(encoding="utf-8") == content):
                continue
            _write_atomically(target, content)  # raises: the version stays, the next poll writes it again
            written += 1
        self.version = newest  # only once every file is on disk (issue 28: a failed write was lost until restart)
        if written:
            self.pipeline.reload_if_changed()
            log.info("applied %d KB change(s) from other replicas (version %d)", written, self.version)
        return written

    def start(self) -> KBSync:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            try:
                self.poll_once()
            except (StorageError, OSError) as exc:
                log.warning("KB sync: %s", exc)
            except Exception:  # noqa: BLE001 - keep polling; a bad change is logged with its trace
                log.exception("KB sync failed")
            if self._stop.wait(self.interval_s):
                return
