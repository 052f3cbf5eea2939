"""Log lines for operators: `text` (the default) or `json` (VLLM_DOCTOR_LOG_FORMAT=json), one object
per line with the request id of the Slack delivery being served, so one paste can be followed across
the ack, the worker thread and the LLM call. The id lives in a context variable; executors that run
work for a request copy the context (ContextExecutor), since threads do not inherit it."""

from __future__ import annotations

import contextvars
import json
import logging
import secrets
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def new_request_id(key: str | None = None) -> str:
    """Set (and return) the id of the request being served: Slack's own key when there is one."""
    rid = key or secrets.token_hex(6)
    REQUEST_ID.set(rid)
    return rid


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", REQUEST_ID.get()),
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(fmt: str, level: int = logging.INFO) -> None:
    """Replace the root handlers with one stderr handler in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    logging.getLogger("bot").setLevel(level)
    # A library's deprecation warnings become DEBUG-level log records of the bot, not stray stderr lines.
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.ERROR)


class ContextExecutor(ThreadPoolExecutor):
    """A thread pool whose jobs run in a copy of the submitter's context (the request id follows)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        ctx = contextvars.copy_context()
        return super().submit(ctx.run, fn, *args, **kwargs)
