"""Access rules by Slack user group: the asker's groups come from usergroups.users.list (fake Slack over
real HTTP), are cached, and a missing usergroups:read scope means "in no group", said once in the log."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from host_support import final_report, unreachable_runner_settings
from slack_sdk import WebClient
from slack_support import BOT_TOKEN

from bot.runner.audit import AuditLog
from bot.settings import RunnerAccessRule
from bot.slack.usergroups import UserGroupDirectory, rule_groups

ONCALL = "S0ONCALL1"
BOB, MALLORY = "U0BOB001", "U0MALL01"
OPS, ELSEWHERE = "C0CHAN01", "C0OTHER1"


@pytest.fixture
def group_rules(tmp_path: Path) -> dict[str, Any]:
    """Only members of ONCALL may diagnose, and only from OPS."""
    return unreachable_runner_settings(tmp_path, [RunnerAccessRule(hosts=["fleet"], usergroups=[ONCALL],
                                                                   channels=[OPS])])


def audit_rows(settings: dict[str, Any]) -> list[dict[str, Any]]:
    return AuditLog(settings["runner_audit_db"]).runs()


def test_a_member_of_an_allowed_group_can_diagnose_and_others_are_refused_and_audited(
        make_http_bot: Any, fake_slack: FakeSlack, group_rules: dict[str, Any]) -> None:
    fake_slack.groups[ONCALL] = ["U0SOMEONE", BOB]
    _, sender = make_http_bot(**group_rules)

    sender.command("/vllm-diagnose", "gpu-01", response_url=fake_slack.response_url("bob"), user=BOB, channel=OPS)
    report = final_report(fake_slack)
    assert "gpu-01" in json.dumps(report.params["blocks"])
    asked = fake_slack.calls_to("usergroups.users.list")
    assert [c.params["usergroup"] for c in asked] == [ONCALL]

    sender.command("/vllm-diagnose", "gpu-01", response_url=fake_slack.response_url("mallory"), user=MALLORY,
                   channel=OPS)
    refusal = fake_slack.wait_for_call("response_url")[0].params
    assert "may not run host checks" in refusal["text"]
    assert len(fake_slack.calls_to("usergroups.users.list")) == 1  # the member list came from the cache

    runs = audit_rows(group_rules)
    done = [r for r in runs if r["status"] == "done"]
    refused = [r for r in runs if r["status"] == "refused"]
    assert [(r["user_id"], r["hosts"]) for r in done] == [(BOB, ["gpu-01"])]
    assert [(r["user_id"], r["channel_id"], r["target"]) for r in refused] == [(MALLORY, OPS, "gpu-01")]


def test_the_group_does_not_help_outside_the_rules_channels(make_http_bot: Any, fake_slack: FakeSlack,
                                                            group_rules: dict[str, Any]) -> None:
    fake_slack.groups[ONCALL] = [BOB]
    _, sender = make_http_bot(**group_rules)
    sender.command("/vllm-diagnose", "gpu-01", response_url=fake_slack.response_url(1), user=BOB, channel=ELSEWHERE)
    assert "may not run host checks" in fake_slack.wait_for_call("response_url")[0].params["text"]
    assert not fake_slack.calls_to("usergroups.users.list")  # no rule there names a group: nothing to ask
    assert [r["status"] for r in audit_rows(group_rules)] == ["refused"]


def test_without_the_usergroups_scope_nobody_is_in_a_group_and_it_is_logged_once(
        make_http_bot: Any, fake_slack: FakeSlack, group_rules: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    fake_slack.groups[ONCALL] = [BOB]
    fake_slack.scopes.discard("usergroups:read")
    _, sender = make_http_bot(slack_usergroup_cache_s=0, **group_rules)  # no cache: Slack is asked each time
    caplog.set_level(logging.WARNING, logger="bot.slack.usergroups")
    for n in (1, 2):
        sender.command("/vllm-diagnose", "gpu-01", response_url=fake_slack.response_url(n), user=BOB, channel=OPS)
        replies = fake_slack.wait_for_call("response_url", count=n)
        assert "may not run host checks" in replies[n - 1].params["text"]
    assert len(fake_slack.calls_to("usergroups.users.list")) == 2
    told = [r for r in caplog.records if "usergroups:read" in r.getMessage()]
    assert len(told) == 1
    assert [r["status"] for r in audit_rows(group_rules)] == ["refused", "refused"]


def test_directory_caches_for_its_ttl_and_forgets_transient_errors(fake_slack: FakeSlack) -> None:
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.base_url)
    now = [1000.0]
    directory = UserGroupDirectory(ttl_s=60, clock=lambda: now[0])
    fake_slack.groups = {"S1": [BOB], "S2": [MALLORY]}
    assert directory.groups_of(client, BOB, ["S1", "S2", "S_GONE"]) == {"S1"}
    assert directory.groups_of(client, MALLORY, ["S1", "S2", "S_GONE"]) == {"S2"}
    assert len(fake_slack.calls_to("usergroups.users.list")) == 3  # once per group, deleted group included
    fake_slack.groups["S1"] = [MALLORY]  # membership changes in Slack…
    now[0] += 59
    assert directory.groups_of(client, MALLORY, ["S1"]) == set()  # …seen after the TTL only
    now[0] += 2
    assert directory.groups_of(client, MALLORY, ["S1"]) == {"S1"}
    assert directory.groups_of(client, None, ["S1"]) == set()

    down = WebClient(token=BOT_TOKEN, base_url="http://127.0.0.1:9/api/", timeout=2)  # nothing listens
    assert directory.groups_of(down, BOB, ["S3"]) == set()
    fake_slack.groups["S3"] = [BOB]
    assert directory.groups_of(client, BOB, ["S3"]) == {"S3"}  # the failure was not cached


def test_only_groups_of_rules_that_can_apply_in_the_channel_are_asked() -> None:
    rules = [RunnerAccessRule(hosts=["a"], usergroups=["S1"], channels=["C1"]),
             RunnerAccessRule(hosts=["b"], usergroups=["S2"]),
             RunnerAccessRule(hosts=["c"], users=["U1"])]
    assert rule_groups(rules, "C1") == {"S1", "S2"}
    assert rule_groups(rules, "C9") == {"S2"}
