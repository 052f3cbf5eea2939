"""/vllm-diagnose, `@bot diagnose host`, and the host-picker button, with the real bot.runner against
inventory hosts that refuse connections (the runner reports them per host; no sshd needed here)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fake_slack import BOT_USER_ID, FakeSlack
from host_support import final_report, unreachable_runner_settings

from bot.settings import RunnerAccessRule

ALICE, MALLORY = "U0ALICE1", "U0MALL01"


@pytest.fixture
def runner_settings(tmp_path: Path) -> dict[str, Any]:
    return unreachable_runner_settings(tmp_path, [RunnerAccessRule(hosts=["*"], users=[ALICE], max_tier=1)])


def test_group_fan_out_posts_a_grid_and_the_raw_outputs_file(make_http_bot: Any, fake_slack: FakeSlack,
                                                             runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    with fake_slack.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.command("/vllm-diagnose", "fleet", response_url=fake_slack.response_url(1), user=ALICE)
        assert sent.status == 200
    assert not fake_slack.held_too_long
    report = final_report(fake_slack)
    progress = fake_slack.calls_to("chat.postMessage")[0]
    assert "Running read-only checks on *fleet*" in progress.params["text"] or "fleet" in progress.params["text"]
    text = json.dumps(report.params["blocks"])
    assert "gpu-01" in text and "gpu-02" in text and "2 problems found" in text
    assert any("fields" in b for b in report.params["blocks"])  # the host grid
    complete = fake_slack.wait_for_call("files.completeUploadExternal")[0]
    assert complete.params["thread_ts"] == progress.params["_ts"]
    upload = fake_slack.calls_to("upload")[0]
    assert b"HOST ERROR" in upload.params["content"]


def test_chat_text_never_reaches_a_shell(make_http_bot: Any, fake_slack: FakeSlack, runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    sender.command("/vllm-diagnose", "gpu-01;rm -rf / tier 1", response_url=fake_slack.response_url(2), user=ALICE)
    reply = fake_slack.wait_for_call("response_url")[0].params
    assert "is not a host or group name" in reply["text"]
    assert not fake_slack.calls_to("chat.postMessage")


def test_users_without_an_access_rule_are_refused(make_http_bot: Any, fake_slack: FakeSlack,
                                                   runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    sender.command("/vllm-diagnose", "gpu-01", response_url=fake_slack.response_url(3), user=MALLORY)
    reply = fake_slack.wait_for_call("response_url")[0].params
    assert "may not run host checks" in reply["text"]
    sender.command("/vllm-diagnose", "gpu-01 tier 2", response_url=fake_slack.response_url(4), user=ALICE)
    replies = fake_slack.wait_for_call("response_url", count=2)
    assert "tier 2 checks are not granted" in replies[1].params["text"]


def test_mention_in_a_thread_runs_checks_in_that_thread(make_http_bot: Any, fake_slack: FakeSlack,
                                                        runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    thread = "1700000300.000100"
    sender.event({"type": "app_mention", "channel": "C0CHAN01", "user": ALICE, "text": f"<@{BOT_USER_ID}> diagnose gpu-01",
                  "ts": "1700000300.000200", "thread_ts": thread}, "Ev0HOSTMENTION")
    final_report(fake_slack)
    assert fake_slack.calls_to("chat.postMessage")[0].params["thread_ts"] == thread
    assert "could not" in json.dumps(fake_slack.calls_to("chat.update")[-1].params["blocks"]).lower()


def test_button_opens_the_host_picker_and_the_modal_runs_checks(make_http_bot: Any, fake_slack: FakeSlack,
                                                                runner_settings: dict[str, Any]) -> None:
    bot, sender = make_http_bot(**runner_settings)
    button = {
        "type": "block_actions", "user": {"id": ALICE}, "team": {"id": "T0TEST01"}, "api_app_id": "A0TEST",
        "channel": {"id": "C0CHAN01"}, "trigger_id": "1337.42.t",
        "container": {"type": "message", "message_ts": "1700000400.000200", "channel_id": "C0CHAN01"},
        "message": {"ts": "1700000400.000200", "thread_ts": "1700000400.000100", "text": "answer"},
        "response_url": fake_slack.response_url(5),
        "actions": [{"action_id": "run_host_diagnostics", "block_id": "answer_actions", "type": "button", "value": "a1"}],
    }
    # trigger_id lives 3 s, so views.open must not queue behind slow work: with every worker busy, it still
    # comes (an ordering check; no stopwatch on a shared machine)
    busy = threading.Event()
    for _ in range(bot.deps.settings.slack_workers):
        bot.deps.workers.submit(busy.wait, 60)
    try:
        assert sender.interactive(button).status == 200
        opened = fake_slack.wait_for_call("views.open")[0].params
    finally:
        busy.set()
    view = opened["view"]
    assert "gpu-01" in json.dumps(view) and "fleet" in json.dumps(view)  # the picker lists the inventory

    def submit(target: str) -> Any:
        return sender.interactive({
            "type": "view_submission", "user": {"id": ALICE}, "team": {"id": "T0TEST01"}, "api_app_id": "A0TEST",
            "trigger_id": "1337.43.t",
            "view": {"id": "V0001", "type": "modal", "callback_id": "host_picker", "private_metadata": view["private_metadata"],
                     "state": {"values": {"target": {"target_input": {"type": "plain_text_input", "value": target}}}}},
        })

    refused = submit("gpu-99")
    assert refused.status == 200 and refused.json()["response_action"] == "errors"
    assert "not a host or group" in refused.json()["errors"]["target"]
    accepted = submit("gpu-02")
    assert accepted.status == 200 and not accepted.body
    final_report(fake_slack)
    assert fake_slack.calls_to("chat.postMessage")[0].params["thread_ts"] == "1700000400.000100"


def test_the_root_line_button_carries_its_components_checks_into_the_picker(make_http_bot: Any, fake_slack: FakeSlack,
                                                                          runner_settings: dict[str, Any]) -> None:
    """Issue 25: an answer with no established case offers the component's host checks; the picker keeps them."""
    _, sender = make_http_bot(**runner_settings)
    button = {
        "type": "block_actions", "user": {"id": ALICE}, "team": {"id": "T0TEST01"}, "api_app_id": "A0TEST",
        "channel": {"id": "C0CHAN01"}, "trigger_id": "1337.44.t",
        "container": {"type": "message", "message_ts": "1700000500.000200", "channel_id": "C0CHAN01"},
        "message": {"ts": "1700000500.000200", "thread_ts": "1700000500.000100", "text": "answer"},
        "response_url": fake_slack.response_url(6),
        "actions": [{"action_id": "run_host_diagnostics", "block_id": "root_checks", "type": "button",
                     "value": "a1 checks:model.files,system.disk"}],
    }
    assert sender.interactive(button).status == 200
    view = fake_slack.wait_for_call("views.open")[0].params["view"]
    meta = json.loads(view["private_metadata"])
    assert meta["answer_id"] == "a1" and meta["checks"] == ["model.files", "system.disk"]
