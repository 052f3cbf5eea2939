"""The running bot: pipeline + Slack App + transport (HTTP or Socket Mode) + /health, started and stopped
as one thing. `vllm-doctor serve`, the tests and bench/bench_slack.py all use this class."""

from __future__ import annotations

import logging
import threading
from typing import Any

from bot.errors import ConfigError
from bot.pipeline import Pipeline
from bot.settings import Settings
from bot.slack.app import HttpServer, SocketModeConnection, build_app, build_web_client, wsgi_app
from bot.slack.deps import SlackDeps
from bot.slack.hosts import load_host_diagnostics
from bot.slack.recent import RecentAnswers
from bot.slack.store import SlackStateDB
from bot.slack.thread_facts import ThreadFacts
from bot.slack.work import Workers

log = logging.getLogger(__name__)


class SlackBot:
    def __init__(
        self,
        settings: Settings,
        pipeline: Pipeline,
        *,
        http: bool,
        host: str | None = None,
        port: int | None = None,
        hosts: Any | None = None,
        kb_growth: Any | None = None,
    ) -> None:
        if http and not settings.slack_signing_secret:
            raise ConfigError("HTTP mode needs SLACK_SIGNING_SECRET (Basic Information → App Credentials)")
        if not http and not (settings.slack_app_token or "").startswith("xapp-"):
            raise ConfigError("Socket Mode needs SLACK_APP_TOKEN, an app-level xapp-… token with connections:write "
                              "(Basic Information → App-Level Tokens); or use --http")
        self.settings = settings
        self.http = http
        self.client = build_web_client(settings)
        state = SlackStateDB(settings.slack_state_db, retention_s=settings.slack_state_retention_days * 86400)
        self.deps = SlackDeps(
            settings=settings,
            pipeline=pipeline,
            bot_token=settings.slack_bot_token or "",
            workers=Workers(settings.slack_workers),
            recent=RecentAnswers(store=state),
            thread_facts=ThreadFacts(store=state),
            hosts=hosts if hosts is not None else load_host_diagnostics(pipeline.with_settings(settings)),
            kb_growth=kb_growth,  # None: the KB-growth listeners build it from settings (build_app)
        )
        self.app = build_app(self.deps, self.client)
        self._socket: SocketModeConnection | None = None
        if not http:
            self._socket = SocketModeConnection(self.app, settings.slack_app_token or "")
        self._server = HttpServer(
            wsgi_app(self.app if http else None, self.health),
            host=host or settings.http_host,
            port=settings.http_port if port is None else port,
            threads=settings.http_threads,
            max_body_bytes=max(16 * 1024 * 1024, 3 * settings.slack_max_input_bytes),
        )
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return self._server.url

    def health(self) -> tuple[bool, str]:
        if self._socket is not None and not self._socket.is_connected():
            return False, "socket mode: not connected to Slack"
        return True, f"ok ({'http' if self.http else 'socket mode'}, {self.deps.kb_size()} KB cases)"

    def start(self) -> SlackBot:
        """Start serving in background threads and return."""
        if self._socket is not None:
            self._socket.connect()
        self._server.start()
        log.info("vllm-doctor serving %s on %s", "HTTP" if self.http else "Socket Mode (+/health)", self.url)
        return self

    def wait(self) -> None:
        self._stopped.wait()

    def stop(self, drain_s: float = 10.0) -> None:
        """Stop taking requests, let running diagnoses finish (up to `drain_s`), then close."""
        if self._socket is not None:
            self._socket.close()
        self._server.close()
        self.deps.workers.wait_idle(timeout=drain_s)
        self.deps.workers.shutdown(wait=False)
        self._stopped.set()
