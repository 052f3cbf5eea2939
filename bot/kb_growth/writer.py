"""Writes validated cases into kb/cases/<area>/<id>.yaml: atomically, one writer at a time.

- Atomic: the YAML goes to a temp file in the same directory, is fsynced, then `os.replace`d over the
  target (indexer/atomic.py), so the bot's reloader sees the old file or the new one, never half of one.
- One writer at a time: a filelock (`.kb-write.lock` in the cases directory) serialises writers across
  threads and processes (the bot approving a case while someone runs `vllm-doctor kb add`).
- Id collisions: ids are unique across areas. A new case whose id is taken gets the next free
  `<id>-2`, `<id>-3`, … chosen under the lock, so twenty concurrent adds of the same id make twenty files.
- Read back: the written file is loaded with the KB's own loader; if that ever failed the file is removed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from filelock import Timeout as LockTimeout

from bot.errors import ConfigError
from bot.kb_growth.caseyaml import render_case
from indexer.atomic import atomic_write_text
from kb.loader import KBError, load_case_file
from kb.schema import Case

LOCK_NAME = ".kb-write.lock"


@dataclass(frozen=True)
class Written:
    case: Case
    path: Path
    requested_id: str  # differs from case.id when the id was taken
    replaced: bool = False  # an existing case file was rewritten (a new example)

    @property
    def renamed(self) -> bool:
        return self.case.id != self.requested_id


class CaseWriter:
    def __init__(self, cases_dir: Path, lock_timeout_s: float = 60.0):
        self.cases_dir = Path(cases_dir)
        self._lock = FileLock(str(self.cases_dir / LOCK_NAME), timeout=lock_timeout_s, thread_local=False)
        self._thread_lock = threading.RLock()  # FileLock is re-entrant per object; this orders threads fairly

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the write lock (threads and processes). Re-entrant within a thread."""
        try:
            self.cases_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the KB directory {self.cases_dir}: {exc.strerror or exc}") from exc
        with self._thread_lock:
            try:
                self._lock.acquire()
            except LockTimeout as exc:
                raise ConfigError(f"another writer holds {self.cases_dir / LOCK_NAME}; try again") from exc
            except OSError as exc:  # a read-only folder (mount, permissions): say which, not "unexpected"
                raise ConfigError(
                    f"cannot write to the KB folder {self.cases_dir}: {exc.strerror or exc} "
                    "(setting VLLM_DOCTOR_KB_WRITE_DIR, or VLLM_DOCTOR_KB_DIR)"
                ) from None
            try:
                yield
            finally:
                self._lock.release()

    def path_of(self, case_id: str) -> Path | None:
        """The file holding `case_id` in any area, if there is one."""
        found = sorted(self.cases_dir.glob(f"*/{case_id}.yaml"))
        return found[0] if found else None

    def free_id(self, wanted: str) -> str:
        """`wanted` or the first free `wanted-N` (call under `locked()`)."""
        if self.path_of(wanted) is None:
            return wanted
        n = 2
        while self.path_of(f"{wanted}-{n}") is not None:
            n += 1
        return f"{wanted}-{n}"

    def add(self, case: Case, then: Callable[[Written], None] | None = None) -> Written:
        """Write a new case, renaming it if its id is taken. `then(written)` runs under the lock (git)."""
        with self.locked():
            requested = case.id
            case_id = self.free_id(requested)
            if case_id != requested:
                case = case.model_copy(update={"id": case_id})  # a "-N" suffix keeps the id valid
            written = Written(case, self._write(case), requested_id=requested)
            if then is not None:
                then(written)
            return written

    def replace(self, case: Case, then: Callable[[Written], None] | None = None) -> Written:
        """Rewrite an existing case (same id, same area); KeyError if there is none."""
        with self.locked():
            current = self.path_of(case.id)
            if current is None:
                raise KeyError(f"no case file for {case.id!r} in {self.cases_dir}")
            if current.parent.name != case.area:
                raise ValueError(f"case {case.id} lives in {current.parent.name}/, not {case.area}/")
            written = Written(case, self._write(case), case.id, replaced=True)
            if then is not None:
                then(written)
            return written

    def _write(self, case: Case) -> Path:
        text = render_case(case)
        path = self.cases_dir / case.area / f"{case.id}.yaml"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc} (setting VLLM_DOCTOR_KB_WRITE_DIR)") from exc
        try:
            load_case_file(path)
        except KBError:
            path.unlink(missing_ok=True)
            raise
        return path

