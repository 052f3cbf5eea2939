"""Helpers for the Slack bot tests: settings pointing at the fake Slack, and a sender that signs
requests the way Slack does and posts them over real HTTP."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fake_slack import FakeSlack

SIGNING_SECRET = "test-signing-secret-8f1c"
BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-1-A0TEST-123-abc"


def bot_settings(fake: FakeSlack, base: Any, **overrides: Any) -> Any:
    """The session's engine settings plus Slack settings pointing at the fake. Each call gets its own
    Slack state file (answers, thread host facts) unless `slack_state_db` is given: tests reuse thread ts."""
    values = {
        "slack_bot_token": BOT_TOKEN,
        "slack_app_token": APP_TOKEN,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": fake.base_url,
        "slack_update_interval_s": 0.05,
        "slack_max_input_bytes": 1024 * 1024,
        "slack_watch_channels": ["CWATCH01"],
        "http_host": "127.0.0.1",
        "http_port": 0,
        "vllm_base_url": None,
        "drain_delay_s": 0.0,  # no load balancer in front of a test bot
    }
    if "slack_state_db" not in overrides:
        values["slack_state_db"] = Path(tempfile.mkdtemp(prefix="slack-state-")) / "state.sqlite3"
    values.update(overrides)
    return base.model_copy(update=values)


@dataclass
class Sent:
    status: int
    body: str
    elapsed_s: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class SlackSender:
    """Sends requests to the bot the way Slack does: signed, over HTTP."""

    def __init__(self, url: str, secret: str = SIGNING_SECRET) -> None:
        self.url = url
        self.secret = secret

    def sign(self, body: bytes, timestamp: int) -> str:
        base = b"v0:" + str(timestamp).encode() + b":" + body
        return "v0=" + hmac.new(self.secret.encode(), base, hashlib.sha256).hexdigest()

    def post(
        self,
        body: bytes,
        content_type: str,
        *,
        timestamp: int | None = None,
        signature: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Sent:
        ts = int(time.time()) if timestamp is None else timestamp
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": content_type,
                "X-Slack-Request-Timestamp": str(ts),
                "X-Slack-Signature": signature or self.sign(body, ts),
                **(headers or {}),
            },
        )
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Sent(response.status, response.read().decode(), time.perf_counter() - started)
        except urllib.error.HTTPError as exc:
            with exc:  # an HTTPError holds the response and its socket until closed
                return Sent(exc.code, exc.read().decode(), time.perf_counter() - started)

    def event(self, event: dict[str, Any], event_id: str, *, retry_num: int | None = None, **kw: Any) -> Sent:
        envelope = {
            "token": "legacy",
            "team_id": "T0TEST01",
            "api_app_id": "A0TEST",
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "event": event,
            "authorizations": [{"team_id": "T0TEST01", "user_id": "UBOT0001", "is_bot": True}],
        }
        headers = {}
        if retry_num is not None:
            headers = {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"}
        return self.post(json.dumps(envelope).encode(), "application/json", headers=headers, **kw)

    def command(self, command: str, text: str, *, response_url: str, channel: str = "C0CHAN01", user: str = "U0ALICE1",
                trigger_id: str | None = None) -> Sent:
        form = {
            "token": "legacy",
            "team_id": "T0TEST01",
            "channel_id": channel,
            "channel_name": "vllm-ops",
            "user_id": user,
            "user_name": "alice",
            "command": command,
            "text": text,
            "api_app_id": "A0TEST",
            "response_url": response_url,
            "trigger_id": trigger_id or f"1337.42.{secrets.token_hex(4)}",  # unique per invocation, as in Slack
        }
        return self.post(urlencode(form).encode(), "application/x-www-form-urlencoded")

    def interactive(self, payload: dict[str, Any]) -> Sent:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        return self.post(body, "application/x-www-form-urlencoded")


def kb_store(bot_settings_: Any, engine: Any) -> Any:
    """The real KB store on a temp SQLite file; priors are not attached, so votes cast here cannot change
    the ranking of the session-wide engine that other tests share."""
    from bot.kb_growth import KBGrowth

    return KBGrowth(bot_settings_, engine, attach_priors=False)
