"""Socket Mode: the same App over a WebSocket (local aiohttp server), acks within milliseconds,
retries deduplicated, /health reflects the connection."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fake_socket_mode import FakeSocketMode
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG
from slack_support import bot_settings, kb_store


@pytest.fixture
def socket_bot(fake_slack: Any, doctor: Any, settings: Any, tmp_path: Any) -> Iterator[tuple[Any, FakeSocketMode]]:
    from bot.slack.server import SlackBot

    server = FakeSocketMode().start()
    fake_slack.socket_mode_url = server.url
    bot_cfg = bot_settings(fake_slack, settings, kb_db_path=tmp_path / "kb.sqlite3",
                           slack_state_db=tmp_path / "slack-state.sqlite3")
    bot = SlackBot(bot_cfg, doctor, http=False, kb_growth=kb_store(bot_cfg, doctor)).start()
    server.wait_connected()
    yield bot, server
    bot.stop(drain_s=30)
    server.stop()


def health(bot: Any) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(bot.url + "/health", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:  # an HTTPError holds the response and its socket until closed
            return exc.code, exc.read().decode()


def test_socket_mode_connects_with_the_app_token_and_reports_health(socket_bot: Any, fake_slack: Any) -> None:
    bot, _ = socket_bot
    opened = fake_slack.calls_to("apps.connections.open")
    assert opened and opened[0].headers["authorization"] == "Bearer xapp-1-A0TEST-123-abc"
    deadline = time.monotonic() + 5
    while health(bot)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, body = health(bot)
    assert status == 200 and "socket mode" in body
    # the HTTP port serves only /health in Socket Mode
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(bot.url + "/slack/events", data=b"{}", method="POST"), timeout=5)
    with info.value:  # close the error's response: left open, its socket is finalized by the GC in a later test
        assert info.value.code == 404


def test_slash_command_over_socket_mode_is_acked_fast_then_answered(socket_bot: Any, fake_slack: Any) -> None:
    _, server = socket_bot
    payload = {
        "token": "legacy", "team_id": "T0TEST01", "channel_id": "C0CHAN01", "channel_name": "vllm-ops",
        "user_id": "U0ALICE1", "user_name": "alice", "command": "/vllm-explain",
        "text": KV_CACHE_LOG.replace("<", "&lt;"), "api_app_id": "A0TEST",
        "response_url": fake_slack.response_url(1), "trigger_id": "1.2.3",
    }
    with fake_slack.holding():  # the ack arrives while every Slack call of the work waits: ack before work
        server.send({"envelope_id": "env-cmd-1", "type": "slash_commands", "payload": payload,
                     "accepts_response_payload": True})
        _, ack = server.wait_ack("env-cmd-1", timeout=30)
    assert not fake_slack.held_too_long
    assert "payload" not in ack or not ack["payload"]  # empty ack: the answer comes as a message
    fake_slack.wait_for(
        lambda calls: any(c.method == "chat.update" and KV_CACHE_CASE in json.dumps(c.params.get("blocks")) for c in calls),
        timeout=60,
    )


def test_usage_error_comes_back_in_the_socket_mode_ack(socket_bot: Any) -> None:
    _, server = socket_bot
    payload = {"team_id": "T0TEST01", "channel_id": "C0CHAN01", "user_id": "U0ALICE1", "command": "/vllm-explain",
               "text": "", "response_url": "http://127.0.0.1:9/x", "trigger_id": "1.2.4", "api_app_id": "A0TEST"}
    server.send({"envelope_id": "env-cmd-2", "type": "slash_commands", "payload": payload, "accepts_response_payload": True})
    _, ack = server.wait_ack("env-cmd-2")
    assert "Usage: `/vllm-explain" in ack["payload"]["text"]


def test_retried_event_envelope_is_answered_once(socket_bot: Any, fake_slack: Any) -> None:
    bot, server = socket_bot
    ts = "1700000100.000100"
    event = {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": "U0ALICE1",
             "text": KV_CACHE_LOG.replace("<", "&lt;"), "ts": ts, "event_ts": ts}
    body = {"type": "event_callback", "team_id": "T0TEST01", "api_app_id": "A0TEST", "event_id": "Ev0SOCKET",
            "event_time": int(time.time()), "event": event}
    server.send({"envelope_id": "env-ev-1", "type": "events_api", "payload": body, "accepts_response_payload": False,
                 "retry_attempt": 0, "retry_reason": ""})
    server.send({"envelope_id": "env-ev-2", "type": "events_api", "payload": body, "accepts_response_payload": False,
                 "retry_attempt": 1, "retry_reason": "timeout"})
    server.wait_ack("env-ev-1")
    server.wait_ack("env-ev-2")
    fake_slack.wait_for(
        lambda calls: any(c.method == "chat.update" and KV_CACHE_CASE in json.dumps(c.params.get("blocks")) for c in calls),
        timeout=60,
    )
    assert bot.deps.workers.wait_idle(timeout=60)  # every accepted job has finished: nothing more will post
    assert len([c for c in fake_slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == ts]) == 1
