"""Where an index lives on disk, for indexer.index.KBIndex: the directory lock, each new state written as a
new generation (format: indexer.persist), and the fall-back to memory only when the directory cannot be
written (one warning per directory and process)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from filelock import FileLock

from indexer.persist import acquire_directory_lock, write_generation
from indexer.state import IndexState

log = logging.getLogger("indexer.index")  # the index's own warnings, under the name they always had

_readonly_warned: set[str] = set()


class IndexDisk:
    """One index directory: locks and writes, or memory only (`persistent` False)."""

    def __init__(self, index_dir: Path, persistent: bool = True) -> None:
        self.index_dir = index_dir
        self.persistent = persistent
        self._write_problem = ""  # why the directory cannot be written, once known

    def acquire_lock(self) -> FileLock | None:
        """The directory lock, or None when the directory cannot be written: then a valid stored index
        is still read, and the first write that is needed turns the index memory-only (one warning)."""
        lock, problem = acquire_directory_lock(self.index_dir)
        if problem:
            self._write_problem = problem
        return lock

    @contextmanager
    def lock_for_write(self) -> Iterator[None]:
        """Directory lock for upsert/remove/rebuild; degrades to memory-only like open()."""
        lock = self.acquire_lock() if self.persistent else None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def _go_memory_only(self, why: str) -> None:
        self.persistent = False
        key = str(self.index_dir.resolve()) if self.index_dir.exists() else str(self.index_dir)
        if key not in _readonly_warned:
            _readonly_warned.add(key)
            log.warning("search index: %s; keeping the index in memory only", why)

    def persist(self, state: IndexState) -> IndexState:
        """Write `state` as a new generation (indexer.persist). Caller holds the directory lock. On
        failure: memory only."""
        if not self.persistent:
            return state
        if self._write_problem:
            self._go_memory_only(self._write_problem)
            return state
        try:
            generation = write_generation(self.index_dir, state)
        except OSError as exc:
            self._go_memory_only(f"cannot write to {self.index_dir} ({exc.strerror or exc})")
            return state
        return replace(state, generation=generation)


__all__ = ["IndexDisk"]
