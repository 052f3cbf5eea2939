"""The Slack edge: the only module that imports slack_bolt.

    build_web_client(settings)        WebClient(base_url=SLACK_API_URL) that retries 429s (Retry-After)
    build_app(deps, client)           the bolt App with every listener registered
    HttpServer(app, …)                HTTP mode: POST /slack/events, GET /health, served by waitress
    start_socket_mode(app, token)     Socket Mode: outbound WebSocket, no ingress needed

Execution model: one sync App. Listeners only parse and ack (bolt acks events itself before running
them); slow work goes to deps.workers. HTTP adapter: bolt's WSGI adapter under waitress, a production
WSGI server with a request thread pool. (Bolt's Starlette adapter would call the sync App.dispatch on the
event loop and serialise requests; `App.start()` is bolt's development server.)
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from slack_bolt import App, BoltResponse
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.error import BoltError
from slack_sdk import WebClient
from slack_sdk.http_retry import default_retry_handlers
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from waitress import wasyncore
from waitress.server import create_server

from bot.errors import ConfigError
from bot.ops import metrics
from bot.ops.logs import new_request_id
from bot.settings import Settings
from bot.slack import actions, commands, events, kb_growth_edge, shortcuts, views
from bot.slack.delivery import CURRENT, Delivery, TrackingExecutor
from bot.slack.deps import SlackDeps

if TYPE_CHECKING:
    from waitress.task import ThreadedTaskDispatcher

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/health"


def build_web_client(settings: Settings) -> WebClient:
    if not settings.slack_bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set: create the app from slack-manifest.yaml (docs/slack.md)")
    base_url = settings.slack_api_url if settings.slack_api_url.endswith("/") else settings.slack_api_url + "/"
    return WebClient(
        token=settings.slack_bot_token,
        base_url=base_url,  # slack_sdk joins method names with urljoin: the trailing slash matters
        timeout=30,
        retry_handlers=[*default_retry_handlers(), RateLimitErrorRetryHandler(max_retry_count=2)],
    )


def build_app(deps: SlackDeps, client: WebClient) -> App:
    """The bolt App; calls auth.test once (bolt validates the token eagerly)."""
    try:
        app = App(
            client=client,
            signing_secret=deps.settings.slack_signing_secret or "",  # unused in Socket Mode
            process_before_response=False,
            name="vllm-doctor",
            listener_executor=TrackingExecutor(max_workers=10, thread_name_prefix="bolt-listener"),
        )
    except (BoltError, OSError) as exc:  # auth.test failed: a wrong token, or Slack unreachable
        raise ConfigError(f"Slack did not accept SLACK_BOT_TOKEN at {client.base_url} ({exc})") from exc
    app.middleware(_skip_retried_events(deps))
    app.error(_log_listener_error)
    kb_growth_edge.setup(app, deps)  # deps.kb_growth, before the areas that register its listeners
    for area in (events, commands, actions, shortcuts, views):
        area.register(app, deps)
    return app


def delivery_key(body: dict[str, Any]) -> str | None:
    """What makes a Slack delivery unique: the event id of an event, the trigger id of a slash command
    (a command is not retried by Slack, but behind a load balancer a duplicate may reach two replicas)."""
    if body.get("type") == "event_callback" and body.get("event_id"):
        return f"event:{body['event_id']}"
    if body.get("command") and body.get("trigger_id"):
        return f"command:{body['trigger_id']}"
    return None


def _retry_num(body: dict[str, Any], request: Any) -> int:
    """Slack's retry counter: the X-Slack-Retry-Num header (HTTP) or `retry_attempt` (Socket Mode)."""
    raw = (request.headers.get("x-slack-retry-num") or [None])[0] or body.get("retry_attempt") or 0
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0


def _skip_retried_events(deps: SlackDeps) -> Callable[..., Any]:
    def skip_retried_events(body: dict[str, Any], request: Any, next_: Callable[[], None], resp: BoltResponse) -> Any:
        key = delivery_key(body)
        new_request_id(key.split(":", 1)[1] if key else None)
        CURRENT.set(None)  # request threads are reused: never let an earlier delivery's context leak in
        if key:
            retry = _retry_num(body, request)
            admitted = deps.seen_events.admit(key, retry=retry > 0)
            if admitted.outcome == "duplicate":
                reason = (request.headers.get("x-slack-retry-reason") or ["?"])[0]
                log.info("skipping repeated delivery %s (retry %s, %s)", key, retry or "?", reason)
                metrics.REQUESTS.labels(kind="duplicate").inc()
                return BoltResponse(status=200, body="")  # a 2xx stops Slack's retries
            if admitted.outcome == "busy":  # another replica holds a live lease: Slack should ask again later
                log.info("delivery %s (retry %s) is being answered by another replica; asking Slack to retry later",
                         key, retry)
                metrics.REQUESTS.labels(kind="busy").inc()
                return BoltResponse(status=503, body="in progress on another replica; retry later")
            CURRENT.set(Delivery(key, deps.seen_events, admitted))
        metrics.REQUESTS.labels(kind=key.split(":")[0] if key else str(body.get("type") or "other")).inc()
        next_()
        return resp

    return skip_retried_events


def _log_listener_error(error: Exception, body: dict[str, Any]) -> None:
    ref = secrets.token_hex(4)
    log.error("listener failed (ref %s) on %s: %r", ref, body.get("type") or body.get("command"), error, exc_info=error)


# --- HTTP mode ---------------------------------------------------------------------------------------


def wsgi_app(app: App | None, health: Callable[[], tuple[bool, str]]) -> Callable[..., Iterable[bytes]]:
    """POST /slack/events → bolt (when `app` is given); GET /health → 200/503 with a one-line reason."""
    slack = SlackRequestHandler(app, path=EVENTS_PATH) if app is not None else None

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            ok, reason = health()
            body = (reason + "\n").encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
            return [body]
        if slack is not None:
            return slack(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"Not Found\n"]

    return application


class _WaitressServer(Protocol):
    """What HttpServer uses of the server waitress builds for one host and port (a TcpWSGIServer: it sets
    effective_host and effective_port, and its asyncore map, which types-waitress does not declare)."""

    effective_host: str
    effective_port: int
    _map: dict[int, Any]
    task_dispatcher: ThreadedTaskDispatcher

    def run(self) -> None: ...


class HttpServer:
    """waitress around `wsgi_app`; port 0 picks a free port (see `.port`)."""

    def __init__(
        self,
        application: Callable[..., Iterable[bytes]],
        host: str,
        port: int,
        threads: int = 8,
        max_body_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        # one host and port: create_server builds a TcpWSGIServer (a MultiSocketServer only for several)
        self._server = cast(_WaitressServer, create_server(
            application,
            host=host,
            port=port,
            threads=threads,
            ident="vllm-doctor",
            max_request_body_size=max_body_bytes,
            channel_timeout=60,
        ))
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def port(self) -> int:
        return int(self._server.effective_port)

    @property
    def url(self) -> str:
        return f"http://{self._server.effective_host}:{self.port}"

    def serve_forever(self) -> None:
        try:
            self._server.run()
        except OSError:
            if not self._closing:  # close() from another thread can leave the poll on a closed socket
                raise

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self.serve_forever, name="http-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing = True
        self._server.task_dispatcher.shutdown()
        wasyncore.close_all(self._server._map)  # empties the loop's map, so run() returns
        if self._thread is not None:
            self._thread.join(timeout=5)


# --- Socket Mode -------------------------------------------------------------------------------------


class SocketModeConnection:
    def __init__(self, app: App, app_token: str) -> None:
        if not app_token.startswith("xapp-"):
            raise ConfigError("SLACK_APP_TOKEN must be an app-level token (xapp-…) with connections:write")
        self._handler = SocketModeHandler(app, app_token)

    def connect(self) -> None:
        """Open the WebSocket (apps.connections.open, then wss); returns at once, events flow on threads."""
        self._handler.connect()  # type: ignore[no-untyped-call]  # slack_bolt's SocketModeHandler is unannotated

    def is_connected(self) -> bool:
        return bool(self._handler.client.is_connected())

    def close(self) -> None:
        self._handler.close()  # type: ignore[no-untyped-call]  # slack_bolt's SocketModeHandler is unannotated

    @property
    def client(self) -> Any:
        return self._handler.client
