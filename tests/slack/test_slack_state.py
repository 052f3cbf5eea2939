"""The Slack bot's state file (bot/slack/store.py): answers the buttons need and thread host facts
survive a restart; WAL, bounded retention, concurrent writers, clear errors."""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG

from bot.errors import ConfigError
from bot.runner.report import report_from_dict
from bot.slack.recent import AnswerRecord, RecentAnswers
from bot.slack.store import MAX_ROWS, SlackStateDB
from bot.slack.thread_facts import MAX_AGE_S, ThreadFacts, ThreadHostFacts

DM, ALICE = "D0DM0001", "U0ALICE1"
DAY = 86400.0


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def paste_and_get_answer_id(sender: Any, fake: FakeSlack, ts: str, event_id: str) -> str:
    sender.event({"type": "message", "channel": DM, "channel_type": "im", "user": ALICE,
                  "text": slack_escape(KV_CACHE_LOG), "ts": ts, "event_ts": ts}, event_id)

    def final(calls: list[Any]) -> Any:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                  and c.params.get("_ts")]
        edits = [c for c in calls if posted and c.method == "chat.update" and c.params.get("ts") == posted[0].params["_ts"]]
        return edits[-1] if edits and KV_CACHE_CASE in json.dumps(edits[-1].params["blocks"]) else None

    update = final(fake.wait_for(lambda calls: final(calls) is not None))
    return update.params["blocks"][-1]["elements"][0]["value"]  # the buttons carry the answer id


def press(sender: Any, fake: FakeSlack, action_id: str, answer_id: str, reply_to: str) -> dict[str, Any]:
    sender.interactive({
        "type": "block_actions", "user": {"id": ALICE, "username": "alice", "team_id": "T0TEST01"},
        "api_app_id": "A0TEST", "team": {"id": "T0TEST01"}, "channel": {"id": DM},
        "container": {"type": "message", "message_ts": "1700000800.000200", "channel_id": DM},
        "message": {"ts": "1700000800.000200", "thread_ts": "1700000800.000100", "text": "answer"},
        "trigger_id": "1337.42.restart", "response_url": fake.response_url(reply_to),
        "actions": [{"action_id": action_id, "block_id": "answer_actions", "type": "button", "value": answer_id}],
    })
    return fake.wait_for_call("response_url", timeout=30)[-1].params  # callers clear the fake first


def test_answer_buttons_work_after_a_restart(make_http_bot: Any, fake_slack: FakeSlack, tmp_path: Path) -> None:
    state = tmp_path / "slack-state.sqlite3"
    first, sender = make_http_bot(slack_state_db=state)
    answer_id = paste_and_get_answer_id(sender, fake_slack, "1700000800.000100", "Ev0STATE1")
    first.stop(drain_s=30)
    fake_slack.clear()

    second, sender = make_http_bot(slack_state_db=state)
    reply = press(sender, fake_slack, "feedback_fixed", answer_id, "after-restart")
    assert "too old" not in reply["text"]
    assert f"Noted that KB case `{KV_CACHE_CASE}` fixed it" in reply["text"]
    assert second.deps.kb_growth.outcome_text(KV_CACHE_CASE) == "solved 1 of 1"

    sender.event({"type": "app_home_opened", "user": ALICE, "channel": DM, "tab": "home",
                  "event_ts": "1700000801.000100"}, "Ev0STATE2")
    home = json.dumps(fake_slack.wait_for_call("views.publish")[0].params["view"])
    assert KV_CACHE_CASE in home and "fixed" in home  # the Home tab remembers it too

    fake_slack.clear()  # control: a bot with another state file has never seen that answer
    _, sender = make_http_bot(slack_state_db=tmp_path / "other.sqlite3")
    assert "too old" in press(sender, fake_slack, "feedback_fixed", answer_id, "fresh-state")["text"]


def record(answer_id: str, created: float, user: str = ALICE) -> AnswerRecord:
    return AnswerRecord(answer_id=answer_id, user_id=user, channel_id=DM, thread_ts="1.1", message_ts="1.2",
                        verdict="match", case_id=KV_CACHE_CASE, title="KV cache", evidence="L1: boom",
                        created=created)


def test_answers_and_feedback_round_trip_through_a_new_process_view(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    recent = RecentAnswers(store=SlackStateDB(path, retention_s=30 * DAY))
    recent.add(record("a1", created=1000.0 + 0))
    recent.add(record("a2", created=1000.0 + 1))
    recent.record_feedback("a1", ALICE, "not_helpful")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    later = RecentAnswers(store=SlackStateDB(path, retention_s=1e12))  # another process, after a restart
    assert later.get("a1") == replace(record("a1", 1000.0), feedback={ALICE: "not_helpful"})
    assert later.record_feedback("a2", "U0BOB001", "fixed").feedback == {"U0BOB001": "fixed"}
    assert [r.answer_id for r in later.for_user(ALICE)] == ["a2", "a1"]
    assert RecentAnswers(store=SlackStateDB(path, retention_s=1e12)).get("a2").feedback == {"U0BOB001": "fixed"}
    assert later.get("never-given") is None and later.record_feedback("never-given", ALICE, "fixed") is None


def test_retention_and_row_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100 * DAY]
    path = tmp_path / "state.sqlite3"
    db = SlackStateDB(path, retention_s=30 * DAY, clock=lambda: now[0])
    db.save_answer(record("old", created=now[0] - 31 * DAY))
    db.save_answer(record("new", created=now[0] - 1 * DAY))
    assert db.load_answer("old") is None  # past the retention: expired even before it is pruned
    SlackStateDB(path, retention_s=30 * DAY, clock=lambda: now[0])  # pruning at start
    with sqlite3.connect(path) as raw:
        assert [r[0] for r in raw.execute("SELECT answer_id FROM answers")] == ["new"]

    monkeypatch.setattr("bot.slack.store.MAX_ROWS", 3)
    for i in range(5):
        db.save_answer(record(f"n{i}", created=now[0] - 100 + i))
    db.prune()
    with sqlite3.connect(path) as raw:
        kept = sorted(r[0] for r in raw.execute("SELECT answer_id FROM answers"))
    assert kept == ["n2", "n3", "n4"]  # the newest MAX_ROWS
    assert MAX_ROWS > 1000


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    stores = [SlackStateDB(path, retention_s=30 * DAY) for _ in range(2)]  # two "processes"
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            recent = RecentAnswers(capacity=5, store=stores[n % 2])
            for i in range(40):
                recent.add(record(f"t{n}-{i}", created=2e9 + i))
                recent.record_feedback(f"t{n}-{i}", f"U{n}", "fixed")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 240
        assert raw.execute("SELECT COUNT(*) FROM feedback").fetchone()[0] == 240


REPORT_JSON = {
    "target": "fleet", "max_tier": 0, "duration_s": 1.2,
    "hosts": [
        {"host": "gpu-01", "error": None, "duration_s": 0.5, "checks": [
            {"id": "system.shm", "verdict": "fail", "message": "/dev/shm is only 64 MiB", "cases": ["dev-shm-too-small"],
             "duration_s": 0.1},
            {"id": "gpu.inventory", "verdict": "ok", "message": "2 × A100", "cases": [], "duration_s": 0.1}]},
        {"host": "gpu-02", "error": "connection refused", "duration_s": 0.1, "checks": []},
    ],
}


def test_thread_facts_persist_and_age_out(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    facts = ThreadHostFacts.from_report("C1", "1700000900.000100", report_from_dict(REPORT_JSON))
    assert facts is not None and facts.hosts == ("gpu-01",) and facts.label == "gpu-01"
    assert facts.facts[0] == "gpu-01 system.shm [fail]: /dev/shm is only 64 MiB"
    ThreadFacts(store=SlackStateDB(path, retention_s=30 * DAY)).remember(facts)

    now = [facts.created + 60]
    restarted = ThreadFacts(store=SlackStateDB(path, retention_s=30 * DAY), clock=lambda: now[0])
    assert restarted.lookup("C1", "1700000900.000100") == facts
    assert restarted.lookup("C1", "1700000999.000100") is None and restarted.lookup("C1", None) is None
    now[0] = facts.created + MAX_AGE_S + 1
    assert restarted.lookup("C1", "1700000900.000100") is None  # a day-old host state is not trusted

    down = {"hosts": [{"host": "gpu-02", "error": "connection refused", "checks": []}]}
    assert ThreadHostFacts.from_report("C1", "1.2", report_from_dict(down)) is None  # nothing learned


def test_unusable_state_path_is_a_clear_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(ConfigError, match="VLLM_DOCTOR_SLACK_STATE_DB"):
        SlackStateDB(blocker / "state.sqlite3", retention_s=DAY)
