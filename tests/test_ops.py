"""Operations plumbing (bot/ops): /healthz, /readyz and /metrics as WSGI, readiness naming the failing
part, the ack histogram timing POSTs, and JSON log lines whose request id follows work into pools."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from bot.ops import metrics
from bot.ops.health import ops_app, readiness
from bot.ops.logs import REQUEST_ID, ContextExecutor, JsonFormatter, RequestIdFilter, new_request_id


def call(app: Callable[..., Iterable[bytes]], method: str, path: str) -> tuple[str, str, dict[str, str]]:
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO()}, start_response))
    return got["status"], body.decode(), got["headers"]


def test_readiness_names_each_probe_and_fails_on_any() -> None:
    def broken() -> tuple[bool, str]:
        raise OSError("connection refused")

    assert readiness({"kb": lambda: (True, "58 cases")}) == (True, "kb: 58 cases")
    ok, why = readiness({"kb": lambda: (True, "58 cases"), "database": broken, "slack": lambda: (False, "offline")})
    assert not ok and why == "kb: 58 cases; database: OSError: connection refused; slack: offline"


def test_endpoints_and_pass_through() -> None:
    state = {"db": True}
    seen: list[str] = []

    def inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        seen.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"bolt"]

    app = ops_app({"database": lambda: (state["db"], "postgresql" if state["db"] else "unreachable")},
                  alive=lambda: (True, "alive"), inner=inner)
    assert call(app, "GET", "/healthz")[:2] == ("200 OK", "alive\n")
    assert call(app, "GET", "/readyz")[:2] == ("200 OK", "database: postgresql\n")
    state["db"] = False
    assert call(app, "GET", "/readyz")[:2] == ("503 Service Unavailable", "database: unreachable\n")
    assert call(app, "GET", "/healthz")[0] == "200 OK"  # alive even when not ready: no restart loop

    before = metrics.ACK_SECONDS._sum.get()  # noqa: SLF001 - the histogram's running sum
    count_before = sum(s.value for s in metrics.ACK_SECONDS.collect()[0].samples if s.name.endswith("_count"))
    assert call(app, "POST", "/slack/events")[1] == "bolt"
    count_after = sum(s.value for s in metrics.ACK_SECONDS.collect()[0].samples if s.name.endswith("_count"))
    assert count_after == count_before + 1 and metrics.ACK_SECONDS._sum.get() >= before  # noqa: SLF001
    metrics.REQUESTS.labels(kind="event").inc()
    status, text, headers = call(app, "GET", "/metrics")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain")
    assert 'vllm_doctor_requests_total{kind="event"}' in text and "vllm_doctor_fleet_queue_depth" in text
    assert seen == ["/slack/events"]
    assert call(ops_app({}, alive=lambda: (True, "alive")), "GET", "/slack/events")[0] == "404 Not Found"


def test_json_log_lines_carry_the_request_id_into_worker_threads() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("bot.test_ops")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        token = REQUEST_ID.set("-")
        new_request_id("Ev0LOG01")
        log.info("acked %s", "it")
        with ContextExecutor(max_workers=1) as pool:
            pool.submit(log.warning, "worked on it").result()
        REQUEST_ID.reset(token)
        with ContextExecutor(max_workers=1) as pool:
            pool.submit(log.info, "unrelated").result()
    finally:
        log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["request_id"], x["level"], x["message"]) for x in lines] == [
        ("Ev0LOG01", "info", "acked it"), ("Ev0LOG01", "warning", "worked on it"), ("-", "info", "unrelated")]
    assert all(x["logger"] == "bot.test_ops" and x["ts"].endswith("Z") for x in lines)
