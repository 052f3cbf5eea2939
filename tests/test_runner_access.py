"""Targets typed in chat, who may diagnose what (default deny), and the audit log."""

from __future__ import annotations

import multiprocessing
import sqlite3
import textwrap
import threading

import pytest
from runner_support import run_diagnosis

from bot.errors import InvalidTarget, PermissionDenied, UnknownHost
from bot.runner import authorize, resolve_target
from bot.runner.audit import AuditLog
from bot.settings import RunnerAccessRule, Settings

INJECTIONS = [
    "host01; rm -rf /", "host01 && reboot", "$(reboot)", "`id`", "host01|nc evil 1", "host01\nid",
    "../../etc/passwd", "host01 gpu02", "-oProxyCommand=id", "gpu[01:02]", "host01'", 'host01"', "host01>x",
    "*", "", "   ", "h" * 70, "hôst01",
]


@pytest.fixture
def settings(tmp_path):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(textwrap.dedent("""\
        hosts:
          gpu01: {address: 10.0.0.1}
          gpu02: {address: 10.0.0.2}
          gpu03: {address: 10.0.0.3}
          bot-llm: {address: 10.0.0.9}
        groups:
          a100: [gpu01, gpu02]
          fleet: [a100, gpu03]
        """))
    rules = [
        RunnerAccessRule(hosts=["a100"], users=["U_ALICE"]),
        RunnerAccessRule(hosts=["fleet"], usergroups=["S_ONCALL"], channels=["C_OPS"], max_tier=1),
        RunnerAccessRule(hosts=["bot-llm"], channels=["C_OPS"]),
    ]
    return Settings(runner_inventory=inv, runner_audit_db=tmp_path / "audit.sqlite3", runner_access=rules)


@pytest.mark.parametrize("target", INJECTIONS)
def test_anything_but_a_plain_name_is_refused(settings, target):
    with pytest.raises(InvalidTarget) as err:
        resolve_target(target, settings)
    assert "never run" in str(err.value) or "name a host" in str(err.value)


@pytest.mark.parametrize("target", ["host01; rm -rf /", "$(reboot)", "`id`"])
def test_injection_through_run_diagnosis_runs_nothing(settings, target):
    with pytest.raises(InvalidTarget):
        run_diagnosis(target, settings=settings)
    assert AuditLog(settings.runner_audit_db).runs() == []  # refused before any run started


def test_unknown_name_is_unknown_host(settings):
    with pytest.raises(UnknownHost, match="'gpu99' is not a host or group"):
        resolve_target("gpu99", settings)
    assert [h.name for h in resolve_target("fleet", settings)] == ["gpu01", "gpu02", "gpu03"]


def test_default_deny_and_grants(settings):
    # user rule: anywhere, only a100 hosts, tier 0
    assert [h.name for h in authorize("U_ALICE", "C_RANDOM", [], "a100", settings)] == ["gpu01", "gpu02"]
    assert [h.name for h in authorize("U_ALICE", None, [], "gpu01", settings)] == ["gpu01"]
    with pytest.raises(PermissionDenied, match="you may not diagnose 'fleet' from here"):
        authorize("U_ALICE", "C_RANDOM", [], "fleet", settings)  # gpu03 is not hers: the group is refused
    with pytest.raises(PermissionDenied, match="tier 1 checks are not granted to you for gpu01"):
        authorize("U_ALICE", "C_RANDOM", [], "gpu01", settings, max_tier=1)
    # user-group rule: only in C_OPS
    assert len(authorize("U_BOB", "C_OPS", ["S_ONCALL"], "fleet", settings, max_tier=1)) == 3
    with pytest.raises(PermissionDenied, match="no access rule covers you"):
        authorize("U_BOB", "C_RANDOM", ["S_ONCALL"], "fleet", settings)
    # channel rule: anyone in C_OPS, only bot-llm
    assert [h.name for h in authorize("U_NEW", "C_OPS", [], "bot-llm", settings)] == ["bot-llm"]
    with pytest.raises(PermissionDenied):
        authorize("U_NEW", "C_OPS", [], "gpu01", settings)
    # nobody else, nowhere else
    with pytest.raises(PermissionDenied, match="no access rule covers you"):
        authorize("U_MALLORY", "C_RANDOM", ["S_OTHER"], "gpu01", settings)


def test_no_rules_means_nobody(settings, tmp_path):
    empty = settings.model_copy(update={"runner_access": []})
    with pytest.raises(PermissionDenied):
        authorize("U_ALICE", "C_OPS", ["S_ONCALL"], "gpu01", empty)


def test_a_rule_must_name_someone():
    with pytest.raises(ValueError, match="needs users, usergroups or channels"):
        RunnerAccessRule(hosts=["*"])
    star = RunnerAccessRule(hosts=["*"], users=["*"])
    assert star.users == ["*"]


def test_every_refusal_is_audited(settings):
    for args in [("U_MALLORY", "C_X", [], "gpu01"), ("U_ALICE", "C_X", [], "gpu01; id"), ("U_ALICE", "C_X", [], "nope")]:
        with pytest.raises((PermissionDenied, InvalidTarget, UnknownHost)):
            authorize(*args, settings)
    runs = AuditLog(settings.runner_audit_db).runs()
    assert [(r["user_id"], r["target"], r["status"]) for r in reversed(runs)] == [
        ("U_MALLORY", "gpu01", "refused"), ("U_ALICE", "gpu01; id", "refused"), ("U_ALICE", "nope", "refused")]
    assert "no access rule" in runs[-1]["detail"]
    assert "is not a host or group in the inventory" in runs[0]["detail"]  # the audit keeps the real reason


def test_unauthorised_users_cannot_tell_existing_from_unknown_names(settings):
    """ALICE may diagnose a100 only: gpu03 (exists) and gpu99 (does not) are refused in the same words, and
    the refusal of a group does not list its members."""
    messages = {}
    for target in ("gpu03", "gpu99", "fleet"):
        with pytest.raises(PermissionDenied) as err:
            authorize("U_ALICE", "C_RANDOM", [], target, settings)
        messages[target] = str(err.value).replace(f"'{target}'", "'X'")
    assert messages["gpu03"] == messages["gpu99"] == messages["fleet"]
    assert "gpu03" not in messages["fleet"] and "inventory" not in messages["gpu99"]
    # a user with no rule here hears the same for every name, known or not, before the inventory is read
    for target in ("gpu01", "gpu99"):
        with pytest.raises(PermissionDenied, match="no access rule covers you"):
            authorize("U_MALLORY", "C_RANDOM", [], target, settings)
    # granted every host: an unknown name is plainly unknown
    star = settings.model_copy(update={"runner_access": [RunnerAccessRule(hosts=["*"], users=["U_ROOT"])]})
    with pytest.raises(UnknownHost, match="'gpu99' is not a host or group"):
        authorize("U_ROOT", "C_RANDOM", [], "gpu99", star)


def test_hints_show_only_the_names_a_user_may_diagnose(settings):
    from bot.runner.access import access_problem, visible_names

    assert visible_names("U_ALICE", "C_RANDOM", [], settings) == ["gpu01", "gpu02", "a100"]
    assert visible_names("U_MALLORY", "C_RANDOM", [], settings) == []
    assert visible_names("U_BOB", "C_OPS", ["S_ONCALL"], settings) == ["bot-llm", "gpu01", "gpu02", "gpu03", "a100",
                                                                         "fleet"]
    assert access_problem("U_ALICE", "C_RANDOM", [], "gpu01", settings) is None
    assert access_problem("U_ALICE", "C_RANDOM", [], "gpu03", settings) == access_problem(
        "U_ALICE", "C_RANDOM", [], "gpu03", settings)
    assert AuditLog(settings.runner_audit_db).runs() == []  # a hint or a field check is not a run


def test_access_rules_naming_unknown_hosts_or_groups_fail_at_load(settings):
    from bot.errors import ConfigError
    from bot.runner.access import access_inventory

    typo = settings.model_copy(update={"runner_access": [
        RunnerAccessRule(hosts=["a100"], users=["U_ALICE"]),
        RunnerAccessRule(hosts=["a10", "gpu01", "h100-pool"], users=["U_BOB"]),
    ]})
    with pytest.raises(ConfigError, match=r"rule 2 \('a10', 'h100-pool'\)") as err:
        access_inventory(typo)
    assert "not in the inventory" in str(err.value) and "a100" not in str(err.value).split("rule 2")[1]
    with pytest.raises(ConfigError, match="rule 2"):
        authorize("U_ALICE", "C_RANDOM", [], "gpu01", typo)  # every authorisation, not only the bad rule's


def _write_runs(path: str, worker: int, n: int) -> None:
    log = AuditLog(path)
    for i in range(n):
        run_id = log.start(user_id=f"U{worker}", channel_id="C", source="slack", target=f"gpu{i:02d}",
                           hosts=[f"gpu{i:02d}"], checks=["gpu.driver"], max_tier=0)
        log.finish(run_id, None)


def test_audit_log_keeps_every_run_under_concurrent_writers(tmp_path):
    path = str(tmp_path / "audit.sqlite3")
    AuditLog(path)
    threads = [threading.Thread(target=_write_runs, args=(path, w, 25)) for w in range(4)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_runs, args=(path, 10 + w, 25)) for w in range(2)]
    for t in threads + procs:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT user_id, COUNT(*), SUM(status = 'done') FROM runs GROUP BY user_id").fetchall()
    assert sorted(rows) == sorted([(f"U{w}", 25, 25) for w in (0, 1, 2, 3, 10, 11)])


def test_parse_chat_request():
    from bot.runner import parse_request

    req = parse_request("gpu01 gpu server.metrics tier 1")
    assert (req.target, req.checks, req.max_tier) == ("gpu01", ("gpu", "server.metrics"), 1)
    assert parse_request("  fleet  ").checks == () and parse_request("fleet --tier 2").max_tier == 2
    for bad in ["gpu01; id", "gpu01 $(id)", "gpu01 gpu;reboot", "gpu01 tier 5x", ""]:
        with pytest.raises(InvalidTarget):
            parse_request(bad)


def test_run_diagnosis_works_inside_a_running_event_loop(tmp_path):
    import asyncio
    import sys

    settings = Settings(runner_audit_db=tmp_path / "a.db", runner_local_python=sys.executable)
    messages: list[str] = []

    async def from_async_code():
        return run_diagnosis("", settings=settings, local=True, checks=["system.shm"], progress=messages.append)

    report = asyncio.run(from_async_code())
    assert report.hosts[0].checks[0].id == "system.shm" and report.hosts[0].checks[0].verdict in ("ok", "warn", "fail")
    assert messages[0].endswith(": connected") and any("1/1 system.shm" in m for m in messages)
