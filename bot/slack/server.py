"""The running bot: pipeline + Slack App + transport (HTTP or Socket Mode) + /health, started and stopped
as one thing. `vllm-doctor serve`, the tests and bench/bench_slack.py all use this class."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import Any

from bot.errors import ConfigError
from bot.kb_growth.sync import KBSync
from bot.ops.health import ops_app
from bot.present.i18n import t
from bot.runner.fleet import FleetQueue
from bot.settings import Settings
from bot.slack.app import HttpServer, SocketModeConnection, build_app, build_web_client, wsgi_app
from bot.slack.deps import SlackDeps
from bot.slack.fleet import FleetWorker
from bot.slack.healthy_runs import HealthyRuns
from bot.slack.hosts import load_host_diagnostics
from bot.slack.recent import RecentAnswers
from bot.slack.reply import kit
from bot.slack.seen_events import SeenEvents
from bot.slack.store import SlackStateDB
from bot.slack.thread_facts import ThreadFacts
from bot.slack.work import Workers
from bot.storage import StorageError, open_database

log = logging.getLogger(__name__)

READY_DB_TIMEOUT_S = 0.5  # /readyz must say 503 fast while the database is down, not hang


def replica_id() -> str:
    """Who claimed a delivery or a fleet job: host name, pid and a random suffix (pids repeat in pods)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SlackBot:
    def __init__(
        self,
        settings: Settings,
        pipeline: Any,
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
        self.replica_id = replica_id()
        state = SlackStateDB(settings.store_target(settings.slack_state_db),
                             retention_s=settings.slack_state_retention_days * 86400)
        self.state = state
        self.deps = SlackDeps(
            settings=settings,
            pipeline=pipeline,
            bot_token=settings.slack_bot_token or "",
            workers=Workers(settings.slack_workers),
            seen_events=SeenEvents(store=state, owner=self.replica_id, lease_s=settings.claim_lease_s),
            recent=RecentAnswers(store=state),
            thread_facts=ThreadFacts(store=state),
            healthy_runs=HealthyRuns(store=state),
            hosts=hosts if hosts is not None else load_host_diagnostics(settings, pipeline),
            kb_growth=kb_growth,  # None: kb_growth_edge.setup builds it from settings (build_app)
        )
        self.app = build_app(self.deps, self.client)
        self.kb_sync: KBSync | None = None
        growth = self.deps.kb_growth
        if growth is not None:
            growth.replica = self.replica_id
            if settings.database_url and growth.live:  # cases approved on other replicas go live here too
                self.kb_sync = KBSync(growth.db, growth.write_dir, pipeline, self.replica_id, settings.kb_poll_s)
        self.fleet: FleetWorker | None = None
        if settings.database_url and self.deps.hosts is not None:
            self.fleet = FleetWorker(FleetQueue(open_database(settings.database_url)), self.deps, self.client,
                                     owner=self.replica_id)
            self.deps.hosts.fleet = self.fleet
        self._draining = False
        self._socket: SocketModeConnection | None = None
        if not http:
            self._socket = SocketModeConnection(self.app, settings.slack_app_token or "")
        self._warm = threading.Event()
        self._warm_error = ""
        probes = {"kb": self._kb_ready, "index": self._index_ready, "database": self._database_ready,
                  "slack": self.health,
                  "serving": lambda: (not self._draining, "draining" if self._draining else "yes")}
        if not http and settings.metrics_port is not None and port is None:
            port = settings.metrics_port
        self._server = HttpServer(
            ops_app(probes, alive=self.deps.seen_events.alive, inner=wsgi_app(self.app if http else None, self.health)),
            host=host or settings.http_host,
            port=settings.http_port if port is None else port,
            threads=settings.http_threads,
            max_body_bytes=max(16 * 1024 * 1024, 3 * settings.slack_max_input_bytes),
        )
        self._stopped = threading.Event()
        self._listen_while_draining = threading.Event()
        self._draining = False

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

    def _kb_ready(self) -> tuple[bool, str]:
        size = self.deps.kb_size()
        return size > 0, f"{size} cases"

    def _index_ready(self) -> tuple[bool, str]:
        if self._warm_error:
            return False, self._warm_error
        return (True, "loaded") if self._warm.is_set() else (False, "loading")

    def _database_ready(self) -> tuple[bool, str]:
        try:
            self.state.db.ping(timeout=READY_DB_TIMEOUT_S)
        except StorageError as exc:
            return False, str(exc)
        return True, self.state.db.backend

    def _warm_up(self) -> None:
        """Index and embedding model loaded before /readyz says 200 (else the first paste pays for it)."""
        warm = getattr(self.deps.pipeline, "warm_up", None)
        try:
            if warm is not None:
                started = time.monotonic()
                warm()
                log.info("search index and embedding model loaded in %.1f s", time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - readiness says why; pastes get the pipeline's own errors
            log.exception("could not load the search index")
            self._warm_error = f"not loaded: {type(exc).__name__}: {str(exc)[:200]}"
        finally:
            self._warm.set()

    def start(self) -> SlackBot:
        """Start serving in background threads and return."""
        threading.Thread(target=self._warm_up, name="index-warm-up", daemon=True).start()
        self.deps.seen_events.start()  # lease heartbeat
        if self._socket is not None:
            self._socket.connect()
        self._server.start()
        if self.fleet is not None:
            self.fleet.start()
        elif self.deps.hosts is not None:  # one process owns the audit file: its old Slack runs are dead
            try:
                closed = self.deps.hosts.audit().close_interrupted("slack", time.time())
            except (StorageError, ConfigError) as exc:
                log.warning("could not close interrupted audit runs: %s", exc)
            else:
                if closed:
                    log.warning("%d diagnose run(s) were interrupted by the last stop; audited as interrupted",
                                closed)
        if self.kb_sync is not None:
            self.kb_sync.start()
        log.info("vllm-doctor serving %s on %s", "HTTP" if self.http else "Socket Mode (+/health)", self.url)
        return self

    def wait(self) -> None:
        self._stopped.wait()

    def end_drain_delay(self) -> None:
        """Close the listener now instead of at the end of the drain delay (tests; a second signal)."""
        self._listen_while_draining.set()

    def stop(self, drain_s: float | None = None, delay_s: float | None = None) -> int:
        """Drain in order (issue 28): `/readyz` answers 503 at once while requests are still taken for
        `delay_s` (load balancers and Kubernetes stop sending); then the listener and Socket Mode close and
        the fleet worker stops claiming; running and queued answers get `drain_s`; every delivery still
        unanswered is handed back (its lease released: the next delivery is taken by another replica at
        once), fleet jobs still running go back to the queue; then close. Returns how many deliveries were
        handed back (their work, if still running, must not go on: `vllm-doctor serve` then exits at once)."""
        drain_s = self.settings.drain_s if drain_s is None else drain_s
        delay_s = self.settings.drain_delay_s if delay_s is None else delay_s
        self._draining = True
        log.info("draining: /readyz answers 503; closing the listener in %.1f s", delay_s)
        if delay_s > 0:
            self._listen_while_draining.wait(delay_s)
        if self._socket is not None:
            self._socket.close()
        self._server.close()
        if self.fleet is not None:
            handed_back = self.fleet.stop(grace_s=drain_s)
            if handed_back:
                log.info("handed %d host checks back to the fleet queue", handed_back)
        if self.kb_sync is not None:
            self.kb_sync.stop()
        if not self.deps.workers.wait_idle(timeout=drain_s):
            log.warning("%d answers still running or queued after %.0f s of draining", self.deps.workers.pending,
                        drain_s)
        self.deps.workers.shutdown(wait=False)  # queued jobs are cancelled: their deliveries are handed back
        self.deps.seen_events.stop()
        handed = self.deps.seen_events.hand_back()
        for item in handed:  # no dangling "working on it": say what happened (a take-over edits it again)
            if item.placeholder is not None:
                channel, ts, lang = item.placeholder
                try:
                    self.client.chat_update(channel=channel, ts=ts, **kit.notice(
                        t("slack.handed_back", "zh" if lang == "zh" else "en")).as_kwargs())
                except Exception as exc:  # noqa: BLE001 - best effort on the way out
                    log.warning("could not update the placeholder %s of %s: %s", ts, item.key, exc)
        self._stopped.set()
        return len(handed)
