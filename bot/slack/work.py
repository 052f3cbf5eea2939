"""The bot's own worker pool for slow work (search, LLM, file downloads, host checks).

Listeners only parse, ack and submit here, so bolt's listener threads stay free and every ack lands in
milliseconds even while many diagnoses run. The pool is small on purpose: the engine is CPU-bound
(embedding) and the LLM server queues anyway; jobs wait in the queue rather than being dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bot.slack.delivery import TrackingExecutor

log = logging.getLogger(__name__)


class Workers:
    def __init__(self, max_workers: int = 4) -> None:
        self._pool = TrackingExecutor(max_workers=max_workers, thread_name_prefix="doctor-worker")  # ids, deliveries
        self._pending = 0
        self._idle = threading.Condition()

    def submit(self, job: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        with self._idle:
            self._pending += 1
        future = self._pool.submit(self._run, job, *args, **kwargs)
        return future

    def _run(self, job: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return job(*args, **kwargs)
        except Exception:  # jobs report their own user-facing errors; this is the last line of defence
            log.exception("background job %s failed", getattr(job, "__name__", job))
            raise
        finally:
            with self._idle:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running (tests, benchmarks, graceful shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout)

    @property
    def pending(self) -> int:
        with self._idle:
            return self._pending

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
