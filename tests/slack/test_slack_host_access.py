"""Host diagnostics from Slack tell an unauthorised user nothing about the inventory: the host picker
lists only what the asker may diagnose, and a name that does not exist is refused in the same words as
one the asker may not diagnose (real bot over HTTP, real bot.runner, fake Slack Web API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from host_support import unreachable_runner_settings

from bot.settings import RunnerAccessRule

BOB, MALLORY = "U0BOB001", "U0MALL01"


@pytest.fixture
def runner_settings(tmp_path: Path) -> dict[str, Any]:
    return unreachable_runner_settings(tmp_path, [RunnerAccessRule(hosts=["gpu-01"], users=[BOB])])


def _open_picker(sender: Any, fake: FakeSlack, user: str, n: int) -> dict[str, Any]:
    button = {
        "type": "block_actions", "user": {"id": user}, "team": {"id": "T0TEST01"}, "api_app_id": "A0TEST",
        "channel": {"id": "C0CHAN01"}, "trigger_id": f"1337.{n}.t",
        "container": {"type": "message", "message_ts": "1700000400.000200", "channel_id": "C0CHAN01"},
        "message": {"ts": "1700000400.000200", "thread_ts": "1700000400.000100", "text": "answer"},
        "response_url": fake.response_url(f"picker-{n}"),
        "actions": [{"action_id": "run_host_diagnostics", "block_id": "answer_actions", "type": "button", "value": "a1"}],
    }
    assert sender.interactive(button).status == 200
    return fake.wait_for_call("views.open", count=n)[n - 1].params["view"]


def _submit(sender: Any, view: dict[str, Any], user: str, target: str) -> Any:
    return sender.interactive({
        "type": "view_submission", "user": {"id": user}, "team": {"id": "T0TEST01"}, "api_app_id": "A0TEST",
        "trigger_id": "1337.99.t",
        "view": {"id": "V0001", "type": "modal", "callback_id": "host_picker", "private_metadata": view["private_metadata"],
                 "state": {"values": {"target": {"target_input": {"type": "plain_text_input", "value": target}}}}},
    })


def test_host_picker_shows_only_what_the_asker_may_diagnose(make_http_bot: Any, fake_slack: FakeSlack,
                                                            runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    bob_view = json.dumps(_open_picker(sender, fake_slack, BOB, 1))
    assert "gpu-01" in bob_view and "gpu-02" not in bob_view and "fleet" not in bob_view
    mallory_view = json.dumps(_open_picker(sender, fake_slack, MALLORY, 2))
    # only the generic example text ("e.g. gpu-01 or a100-pool") is left: no list of the inventory
    assert "you may diagnose" not in mallory_view and "gpu-02" not in mallory_view and "fleet" not in mallory_view
    assert "you may diagnose here: gpu-01" in bob_view


def test_unknown_and_forbidden_names_read_the_same(make_http_bot: Any, fake_slack: FakeSlack,
                                                   runner_settings: dict[str, Any]) -> None:
    _, sender = make_http_bot(**runner_settings)
    view = _open_picker(sender, fake_slack, BOB, 1)
    errors = {}
    for target in ("gpu-02", "gpu-99", "fleet"):  # exists / does not exist / a group with a foreign host
        refused = _submit(sender, view, BOB, target).json()
        assert refused["response_action"] == "errors"
        errors[target] = refused["errors"]["target"].replace(target, "NAME")
    assert errors["gpu-02"] == errors["gpu-99"] == errors["fleet"]
    # the slash command says the same
    for n, target in enumerate(("gpu-02", "gpu-99"), start=1):
        sender.command("/vllm-diagnose", target, response_url=fake_slack.response_url(f"cmd-{n}"), user=BOB)
    replies = [c.params["text"] for c in fake_slack.wait_for_call("response_url", count=2)]
    texts = sorted(t.replace("gpu-02", "NAME").replace("gpu-99", "NAME") for t in replies)
    assert texts[0] == texts[1] and "you may not diagnose" in texts[0]
    assert not fake_slack.calls_to("chat.postMessage")  # nothing ran
