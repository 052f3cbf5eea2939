"""The bot in HTTP mode, over real HTTP: signed requests in, Web API calls out to the fake Slack.
End to end with the real KB and embedding model."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fake_slack import BOT_USER_ID, FakeFile
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG
from slack_support import SlackSender

DM = "D0DM0001"
ALICE = "U0ALICE1"


def slack_escape(text: str) -> str:
    """What Slack does to pasted text before it reaches the bot."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def dm_event(text: str, ts: str = "1700000000.000100", **extra: Any) -> dict[str, Any]:
    return {"type": "message", "channel": DM, "channel_type": "im", "user": ALICE, "text": text, "ts": ts,
            "event_ts": ts, **extra}


def answered(fake: Any, thread_ts: str, case_id: str | None = None) -> list[Any]:
    """Wait for the final chat.update of the answer in `thread_ts` (naming `case_id` when given)."""
    def done(calls: list[Any]) -> bool:
        placeholders = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == thread_ts
                        and c.params.get("_ts")]  # a 429'd attempt has no ts
        if not placeholders:
            return False
        ts = placeholders[0].params.get("_ts")
        updates = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == ts]
        return any(case_id is None or case_id in json.dumps(u.params.get("blocks")) for u in updates)

    return fake.wait_for(done, timeout=60)


def test_url_verification_and_health(http_bot: Any) -> None:
    bot, sender = http_bot
    body = json.dumps({"type": "url_verification", "challenge": "abc123", "token": "x"}).encode()
    sent = sender.post(body, "application/json")
    assert sent.status == 200 and "abc123" in sent.body
    import urllib.request

    with urllib.request.urlopen(bot.url + "/health", timeout=5) as response:
        assert response.status == 200
        assert b"ok (http" in response.read()


def _only_the_barrier_is_answered(sender: Any, fake_slack: Any, rejected_ts: str) -> None:
    """A negative wait without a sleep: a valid paste sent after the rejected one gets its placeholder, and by
    then the rejected one (handled first, synchronously) has posted nothing."""
    barrier_ts = "1700000099.000100"
    assert sender.event(dm_event(slack_escape(KV_CACHE_LOG), ts=barrier_ts), f"Ev0BARRIER{rejected_ts}").status == 200
    fake_slack.wait_for_call("chat.postMessage", thread_ts=barrier_ts, timeout=60)
    assert [c.params.get("thread_ts") for c in fake_slack.calls_to("chat.postMessage")] == [barrier_ts]


def test_bad_signature_is_rejected_with_401(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    forged = SlackSender(sender.url, secret="not-the-secret")
    sent = forged.event(dm_event(KV_CACHE_LOG, ts="1700000098.000100"), "Ev0BADSIG")
    assert sent.status == 401
    _only_the_barrier_is_answered(sender, fake_slack, "1700000098.000100")


def test_stale_timestamp_is_rejected(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    old = int(time.time()) - 6 * 60  # correctly signed, but replayed after Slack's 5-minute window
    sent = sender.event(dm_event(KV_CACHE_LOG, ts="1700000097.000100"), "Ev0STALE", timestamp=old)
    assert sent.status == 401
    _only_the_barrier_is_answered(sender, fake_slack, "1700000097.000100")


def test_dm_paste_gets_placeholder_then_threaded_answer_naming_the_case(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    ts = "1700000001.000100"
    with fake_slack.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.event(dm_event(slack_escape(KV_CACHE_LOG), ts=ts), "Ev0PASTE1")
        assert sent.status == 200
    assert not fake_slack.held_too_long

    calls = answered(fake_slack, ts, KV_CACHE_CASE)
    placeholder = next(c for c in calls if c.method == "chat.postMessage" and c.params.get("_ts"))
    assert placeholder.params["channel"] == DM
    assert placeholder.params["thread_ts"] == ts  # answers go in the thread of the paste
    assert "Reading your log" in placeholder.params["text"]
    update = [c for c in calls if c.method == "chat.update"][-1]
    assert update.params["ts"] == placeholder.params["_ts"]
    assert update.params["text"].startswith("Likely cause: ")  # plain-text fallback
    blocks = update.params["blocks"]
    ids = [b.get("block_id") for b in blocks]
    assert ids[:3] == ["verdict", "root", "evidence"] and "fix" in ids and ids[-1] == "answer_actions"
    evidence = next(b for b in blocks if b.get("block_id") == "evidence")["text"]["text"]
    assert "No available memory for the cache blocks" in evidence
    fix = next(b for b in blocks if b.get("block_id") == "fix")["text"]["text"]
    assert "--gpu-memory-utilization" in fix
    actions = [e["action_id"] for e in blocks[-1]["elements"]]
    assert actions == ["feedback_fixed", "feedback_not_helpful", "run_host_diagnostics", "add_kb_case", "draft_vllm_issue"]
    assert not [c for c in fake_slack.calls if c.params.get("_rejected")]


def test_retried_event_gets_one_answer(http_bot: Any, fake_slack: Any) -> None:
    bot, sender = http_bot
    ts = "1700000002.000100"
    event = dm_event(slack_escape(KV_CACHE_LOG), ts=ts)
    assert sender.event(event, "Ev0RETRY").status == 200
    for retry in (1, 2):  # Slack re-sends with the same event_id
        assert sender.event(event, "Ev0RETRY", retry_num=retry).status == 200
    answered(fake_slack, ts, KV_CACHE_CASE)
    assert bot.deps.workers.wait_idle(timeout=60)  # every accepted job has finished: nothing more will post
    posts = [c for c in fake_slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == ts]
    assert len(posts) == 1


@pytest.mark.parametrize(
    "injected",
    [
        "<!channel> <!here|here> <@U0EVIL99> <https://evil.example/|click me>",  # escaped by Slack, unescaped by us
    ],
)
def test_mentions_inside_a_log_never_ping(http_bot: Any, fake_slack: Any, injected: str) -> None:
    _, sender = http_bot
    ts = "1700000003.000100"
    log = KV_CACHE_LOG.replace("Try increasing", f"{injected} Try increasing")
    sender.event(dm_event(slack_escape(log), ts=ts), "Ev0INJECT")
    calls = answered(fake_slack, ts, KV_CACHE_CASE)
    evidence = next(b for b in [c for c in calls if c.method == "chat.update"][-1].params["blocks"]
                    if b.get("block_id") == "evidence")["text"]["text"]
    assert "&lt;!channel&gt;" in evidence  # shown, literally
    assert fake_slack.special_mentions() == []


def test_raw_special_mention_token_in_a_message_is_neutralised(http_bot: Any, fake_slack: Any) -> None:
    """Slack delivers a typed @channel as the token <!channel>; it must not come back out as one."""
    _, sender = http_bot
    ts = "1700000004.000100"
    log = "<!channel> please look\n" + slack_escape(KV_CACHE_LOG)
    sender.event(dm_event(log, ts=ts), "Ev0RAWTOKEN")
    answered(fake_slack, ts, KV_CACHE_CASE)
    assert fake_slack.special_mentions() == []


def test_ten_megabyte_paste_gets_a_polite_ephemeral(http_bot: Any, fake_slack: Any) -> None:
    bot, sender = http_bot
    ts = "1700000005.000100"
    huge = (KV_CACHE_LOG * 40_000)[: 10 * 1024 * 1024]
    sent = sender.event(dm_event(slack_escape(huge), ts=ts), "Ev0HUGE")
    assert sent.status == 200
    calls = fake_slack.wait_for_call("chat.postEphemeral")
    message = calls[0].params
    assert message["user"] == ALICE and message["channel"] == DM
    assert "MB" in message["text"] and "paste the last few hundred lines" in message["text"]
    assert bot.deps.workers.wait_idle(timeout=60)  # the refusal was the whole handling
    assert not fake_slack.calls_to("chat.postMessage")  # no placeholder, no answer


def test_ten_megabyte_file_is_refused_without_downloading(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    ts = "1700000006.000100"
    info = fake_slack.add_file(FakeFile("F0HUGE01", "engine.log", b"x", size=10 * 1024 * 1024))
    sender.event(dm_event("", ts=ts, subtype="file_share", files=[info]), "Ev0HUGEFILE")
    message = fake_slack.wait_for_call("chat.postEphemeral")[0].params
    assert "`engine.log` is 10.0 MB" in message["text"]
    assert not fake_slack.calls_to("file_download")


def test_binary_file_gets_a_polite_ephemeral(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    ts = "1700000007.000100"
    info = fake_slack.add_file(FakeFile("F0BIN001", "core.dump", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8,
                                        mimetype="application/octet-stream", filetype="binary"))
    sender.event(dm_event("", ts=ts, subtype="file_share", files=[info]), "Ev0BINARY")
    message = fake_slack.wait_for_call("chat.postEphemeral")[0].params
    assert "binary file" in message["text"]
    assert not fake_slack.calls_to("chat.postMessage")


def test_log_shared_as_a_file_is_fetched_with_the_bot_token_and_diagnosed(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    ts = "1700000008.000100"
    info = fake_slack.add_file(FakeFile("F0LOG001", "vllm-serve.log", KV_CACHE_LOG.encode()))
    partial = {"id": info["id"], "file_access": "check_file_info"}  # newer payloads only carry the id
    sender.event(dm_event("it crashed, log attached", ts=ts, subtype="file_share", files=[partial]), "Ev0FILE")
    answered(fake_slack, ts, KV_CACHE_CASE)
    download = fake_slack.calls_to("file_download")[0]
    assert download.params["token"].startswith("xoxb-")
    assert fake_slack.calls_to("files.info")


def test_watch_channel_answers_logs_and_ignores_chatter(http_bot: Any, fake_slack: Any) -> None:
    bot, sender = http_bot
    chatter = {"type": "message", "channel": "CWATCH01", "channel_type": "channel", "user": ALICE,
               "text": "anyone else seeing errors with vllm today?", "ts": "1700000009.000100"}
    sender.event(chatter, "Ev0CHATTER")
    other = {**chatter, "channel": "C0OTHER1", "text": slack_escape(KV_CACHE_LOG), "ts": "1700000009.000200"}
    sender.event(other, "Ev0NOTWATCHED")
    log = {**chatter, "text": slack_escape(KV_CACHE_LOG), "ts": "1700000009.000300"}
    sender.event(log, "Ev0WATCHLOG")
    answered(fake_slack, "1700000009.000300", KV_CACHE_CASE)
    assert bot.deps.workers.wait_idle(timeout=60)  # every accepted job has finished: nothing more will post
    threads = {c.params.get("thread_ts") for c in fake_slack.calls_to("chat.postMessage")}
    assert threads == {"1700000009.000300"}


def test_bare_mention_in_a_thread_diagnoses_the_thread_parent(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    parent_ts = "1700000010.000100"
    fake_slack.thread_messages[("C0CHAN01", parent_ts)] = [
        {"type": "message", "user": ALICE, "text": slack_escape(KV_CACHE_LOG), "ts": parent_ts}
    ]
    mention = {"type": "app_mention", "channel": "C0CHAN01", "user": "U0BOB001", "text": f"<@{BOT_USER_ID}>",
               "ts": "1700000010.000200", "thread_ts": parent_ts}
    sender.event(mention, "Ev0MENTION")
    answered(fake_slack, parent_ts, KV_CACHE_CASE)
    assert fake_slack.calls_to("conversations.replies")[0].params["ts"] == parent_ts


def test_slash_command_acks_fast_and_posts_the_answer_in_channel(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    with fake_slack.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.command("/vllm-explain", slack_escape(KV_CACHE_LOG), response_url=fake_slack.response_url(1))
        assert sent.status == 200
    assert not fake_slack.held_too_long
    update = fake_slack.wait_for(
        lambda calls: any(c.method == "chat.update" and KV_CACHE_CASE in json.dumps(c.params.get("blocks")) for c in calls),
        timeout=60,
    )
    post = next(c for c in update if c.method == "chat.postMessage")
    assert post.params["channel"] == "C0CHAN01" and "thread_ts" not in post.params
    final = [c for c in update if c.method == "chat.update"][-1]
    assert final.params["blocks"][0]["text"]["text"].startswith(f"<@{ALICE}> ")  # names the asker


def test_slash_command_where_the_bot_is_not_a_member_answers_via_response_url(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    fake_slack.not_in_channels.add("C0PRIV01")
    sender.command("/vllm-explain", slack_escape(KV_CACHE_LOG), response_url=fake_slack.response_url(7), channel="C0PRIV01")
    calls = fake_slack.wait_for(
        lambda cs: any(c.method == "response_url" and KV_CACHE_CASE in json.dumps(c.params) for c in cs), timeout=60
    )
    final = [c for c in calls if c.method == "response_url"][-1]
    assert final.params.get("replace_original") is True


def test_empty_slash_command_gets_usage_in_the_ack(http_bot: Any) -> None:
    _, sender = http_bot
    sent = sender.command("/vllm-explain", "", response_url="http://127.0.0.1:9/unused")
    assert sent.status == 200
    assert "Usage: `/vllm-explain" in sent.json()["text"]


def test_diagnose_help_and_unconfigured_runner(http_bot: Any) -> None:
    _, sender = http_bot
    help_text = sender.command("/vllm-diagnose", "help", response_url="http://127.0.0.1:9/unused").json()
    assert "/vllm-explain" in json.dumps(help_text) and "Diagnose this message" in json.dumps(help_text)
    host = sender.command("/vllm-diagnose", "gpu-01", response_url="http://127.0.0.1:9/unused").json()
    assert "not configured" in host["text"]


def _button(action_id: str, value: str, *, message_ts: str = "1700000020.000100") -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": ALICE, "username": "alice", "team_id": "T0TEST01"},
        "api_app_id": "A0TEST",
        "team": {"id": "T0TEST01"},
        "channel": {"id": "C0CHAN01", "name": "vllm-ops"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": "C0CHAN01"},
        "message": {"ts": message_ts, "thread_ts": "1700000020.000000", "text": "answer"},
        "trigger_id": "1337.42.trigger",
        "response_url": "",
        "actions": [{"action_id": action_id, "block_id": "answer_actions", "type": "button", "value": value,
                     "action_ts": str(time.time())}],
    }


@pytest.mark.parametrize("action_id", ["feedback_fixed", "feedback_not_helpful", "run_host_diagnostics", "add_kb_case",
                                       "draft_vllm_issue"])
def test_every_button_answers(http_bot: Any, fake_slack: Any, action_id: str) -> None:
    """No dead buttons: each one acks at once and then says something (an answer id this process never
    gave, as after a restart)."""
    _, sender = http_bot
    payload = _button(action_id, "abc123")
    payload["response_url"] = fake_slack.response_url(action_id)
    with fake_slack.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.interactive(payload)
        assert sent.status == 200
    assert not fake_slack.held_too_long
    calls = fake_slack.wait_for(
        lambda cs: any(c.method in ("response_url", "views.open", "chat.postEphemeral") for c in cs), timeout=10
    )
    reply = next(c for c in calls if c.method in ("response_url", "views.open", "chat.postEphemeral"))
    assert json.dumps(reply.params).strip()
    if action_id == "run_host_diagnostics":
        assert "not configured" in reply.params["text"] and reply.params["response_type"] == "ephemeral"


def test_feedback_is_remembered_and_shown_on_the_home_tab(http_bot: Any, fake_slack: Any) -> None:
    bot, sender = http_bot
    ts = "1700000021.000100"
    sender.event(dm_event(slack_escape(KV_CACHE_LOG), ts=ts), "Ev0HOME1")
    calls = answered(fake_slack, ts, KV_CACHE_CASE)
    final = [c for c in calls if c.method == "chat.update"][-1]
    answer_id = final.params["blocks"][-1]["elements"][0]["value"]
    payload = _button("feedback_fixed", answer_id)
    payload["response_url"] = fake_slack.response_url("fb")
    sender.interactive(payload)
    reply = fake_slack.wait_for_call("response_url")[0].params
    assert KV_CACHE_CASE in reply["text"]
    assert bot.deps.kb_growth.outcome_text(KV_CACHE_CASE) == "solved 1 of 1"  # stored in the KB store
    later = "1700000021.000900"
    sender.event(dm_event(slack_escape(KV_CACHE_LOG), ts=later), "Ev0HOME3")
    next_answer = [c for c in answered(fake_slack, later, KV_CACHE_CASE) if c.method == "chat.update"][-1]
    assert "Team feedback on this case: solved 1 of 1" in json.dumps(next_answer.params["blocks"])

    sender.event({"type": "app_home_opened", "user": ALICE, "channel": DM, "tab": "home",
                  "event_ts": "1700000022.000100"}, "Ev0HOME2")
    view = fake_slack.wait_for_call("views.publish")[0].params
    assert view["user_id"] == ALICE
    text = json.dumps(view["view"])
    assert f"*{bot.deps.kb_size()}* known failure cases" in text and bot.deps.kb_size() > 10
    assert KV_CACHE_CASE in text and "fixed" in text


def test_message_shortcut_answers_in_the_thread_of_that_message(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    message_ts = "1700000030.000100"
    payload = {
        "type": "message_action",
        "callback_id": "diagnose_message",
        "trigger_id": "1337.42.shortcut",
        "team": {"id": "T0TEST01"},
        "user": {"id": "U0BOB001", "name": "bob"},
        "channel": {"id": "C0CHAN01", "name": "vllm-ops"},
        "message": {"type": "message", "user": ALICE, "ts": message_ts, "text": slack_escape(KV_CACHE_LOG)},
        "response_url": fake_slack.response_url("sc"),
    }
    with fake_slack.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.interactive(payload)
        assert sent.status == 200
    assert not fake_slack.held_too_long
    answered(fake_slack, message_ts, KV_CACHE_CASE)


def test_rate_limited_post_is_retried_after_retry_after(http_bot: Any, fake_slack: Any) -> None:
    _, sender = http_bot
    ts = "1700000040.000100"
    fake_slack.rate_limit_once("chat.postMessage", retry_after=1)
    sender.event(dm_event(slack_escape(KV_CACHE_LOG), ts=ts), "Ev0RATE")
    answered(fake_slack, ts, KV_CACHE_CASE)
    posts = fake_slack.calls_to("chat.postMessage")
    assert len(posts) == 2 and posts[1].at - posts[0].at >= 0.9
