"""/healthz (the process answers), /readyz (it can do its job: KB and index loaded, database reachable,
Slack connected) and /metrics, as one WSGI app that the HTTP mode puts in front of Slack's endpoint and
Socket Mode serves on VLLM_DOCTOR_METRICS_PORT. Readiness checks are callables returning (ok, reason)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from bot.ops import metrics
from bot.ops.logs import REQUEST_ID

Probe = Callable[[], tuple[bool, str]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

HEALTHZ, READYZ, METRICS = "/healthz", "/readyz", "/metrics"


def readiness(probes: dict[str, Probe]) -> tuple[bool, str]:
    """All probes must pass; the reason names each one (`kb: ok (58 cases); database: ok; slack: …`)."""
    parts, ok = [], True
    for name, probe in probes.items():
        try:
            good, why = probe()
        except Exception as exc:  # noqa: BLE001 - a probe that raises is a failed probe, with its reason
            good, why = False, f"{type(exc).__name__}: {exc}"
        ok = ok and good
        parts.append(f"{name}: {why}")
    return ok, "; ".join(parts)


def ops_app(probes: dict[str, Probe], alive: Probe, inner: WSGIApp | None = None) -> WSGIApp:
    """Serve the three endpoints; anything else goes to `inner` (bolt), timed as an ack on POST."""

    def reply(start_response: Callable[..., Any], status: str, body: bytes, ctype: str) -> list[bytes]:
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        REQUEST_ID.set("-")  # server threads are reused: a probe must not log under the last delivery's id
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
        if method in ("GET", "HEAD") and path in (HEALTHZ, READYZ):
            ok, why = alive() if path == HEALTHZ else readiness(probes)
            status = "200 OK" if ok else "503 Service Unavailable"
            return reply(start_response, status, (why + "\n").encode(), "text/plain; charset=utf-8")
        if method == "GET" and path == METRICS:
            return reply(start_response, "200 OK", metrics.exposition(), metrics.CONTENT_TYPE)
        if inner is None:
            return reply(start_response, "404 Not Found", b"Not Found\n", "text/plain; charset=utf-8")
        if method != "POST":
            return inner(environ, start_response)
        started = time.monotonic()

        def timed_start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            metrics.ACK_SECONDS.observe(time.monotonic() - started)
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        return inner(environ, timed_start)

    return application
