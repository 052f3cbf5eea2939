"""Host facts in the explanation: a host diagnosed in a thread (real runner over a real OpenSSH sshd with a
stand-in GPU host whose /dev/shm is 64 MB) → a log pasted, mentioned or sent with "Diagnose this message"
in that thread is explained with the host's findings in the LLM prompt (stdlib OpenAI-compatible server
recording what it is sent); a log in another thread is not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from fake_slack import BOT_USER_ID, FakeSlack
from host_support import final_report
from runner_support import start_fleet
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG
from sshd_support import require_sshd

from bot.pipeline import Pipeline
from bot.settings import RunnerAccessRule

pytestmark = pytest.mark.sshd

ALICE, BOB = "U0ALICE1", "U0BOB001"
CHANNEL = "C0CHAN01"
HOST = "gpu-small-shm"
SHM_FACT = f"{HOST} system.shm [fail]: /dev/shm is only 64 MiB"
FACTS_HEADING = "## Facts collected on the host"


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_sshd()
    fleet = start_fleet(tmp_path_factory.mktemp("slack-fleet"), {HOST: ("127.0.0.1", "shm-64mb")},
                        access=[RunnerAccessRule(hosts=["*"], users=[ALICE])])
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    answer = {"case_id": KV_CACHE_CASE, "summary": "The KV cache had no room left.", "why": "Weights took it all.",
              "fix_steps": ["Raise --gpu-memory-utilization."], "confidence": "high"}
    server = FakeOpenAI(answer, pieces=4, delay_s=0.01).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llm_engine(settings: Any, fake_llm: FakeOpenAI) -> Pipeline:
    # no explanation cache: the same log explained twice must reach the server twice
    return Pipeline.from_settings(settings.model_copy(update={"vllm_base_url": fake_llm.base_url,
                                                            "llm_timeout_s": 30.0, "llm_cache_size": 0}))


def runner_overrides(fleet: Any) -> dict[str, Any]:
    s = fleet.settings
    return {"runner_inventory": s.runner_inventory, "runner_known_hosts": s.runner_known_hosts,
            "runner_ssh_config": s.runner_ssh_config, "runner_audit_db": s.runner_audit_db,
            "runner_connect_timeout_s": s.runner_connect_timeout_s, "runner_access": s.runner_access}


def explained_answer(fake: FakeSlack, thread_ts: str, nth: int = 1) -> Any:
    """The final edit of the `nth` log answer in `thread_ts`, once the LLM's explanation is in."""
    def answers(calls: list[Any]) -> list[Any]:
        return [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == thread_ts
                and "Reading your log" in c.params.get("text", "") and c.params.get("_ts")]

    def final(calls: list[Any]) -> Any:
        posted = answers(calls)
        if len(posted) < nth:
            return None
        ts = posted[nth - 1].params["_ts"]
        edits = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == ts]
        done = [e for e in edits if "Explained by the team" in json.dumps(e.params["blocks"])]
        return done[-1] if done else None

    return final(fake.wait_for(lambda calls: final(calls) is not None, timeout=90))


def source_line(update: Any) -> str:
    return json.dumps(next(b for b in update.params["blocks"] if b.get("block_id") == "source"))


def prompt_of(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")


def mention(thread_ts: str, ts: str, text: str, user: str = ALICE) -> dict[str, Any]:
    return {"type": "app_mention", "channel": CHANNEL, "user": user, "text": f"<@{BOT_USER_ID}> {text}",
            "ts": ts, "thread_ts": thread_ts, "event_ts": ts}


def test_a_log_in_a_diagnosed_thread_is_explained_with_the_host_facts(
        make_http_bot: Any, fake_slack: FakeSlack, fleet: Any, fake_llm: FakeOpenAI, llm_engine: Pipeline) -> None:
    _, sender = make_http_bot(engine=llm_engine, vllm_base_url=fake_llm.base_url, **runner_overrides(fleet))
    diagnosed, elsewhere = "1700000500.000100", "1700000600.000100"

    sender.event(mention(diagnosed, "1700000500.000200", f"diagnose {HOST}"), "Ev0FACTS1")
    assert "/dev/shm" in json.dumps(final_report(fake_slack).params["blocks"])
    asked_before = len(fake_llm.chat_requests)

    # 1. a log mentioned in that thread
    sender.event(mention(diagnosed, "1700000500.000300", slack_escape(KV_CACHE_LOG)), "Ev0FACTS2")
    answer = explained_answer(fake_slack, diagnosed)
    prompt = prompt_of(fake_llm.chat_requests[-1])
    assert len(fake_llm.chat_requests) == asked_before + 1
    assert FACTS_HEADING in prompt and SHM_FACT in prompt
    assert "No available memory for the cache blocks" in prompt  # and it is still about the log
    assert f"Using host facts from the diagnosis of {HOST} at <!date^" in source_line(answer)

    # 2. "Diagnose this message" on a message of that thread
    shortcut = {
        "type": "message_action", "callback_id": "diagnose_message", "trigger_id": "1337.42.facts",
        "team": {"id": "T0TEST01"}, "user": {"id": BOB, "name": "bob"}, "channel": {"id": CHANNEL, "name": "ops"},
        "message": {"type": "message", "user": ALICE, "ts": "1700000500.000400", "thread_ts": diagnosed,
                    "text": slack_escape(KV_CACHE_LOG)},
        "response_url": fake_slack.response_url("facts"),
    }
    assert sender.interactive(shortcut).status == 200
    answer = explained_answer(fake_slack, diagnosed, nth=2)
    assert len(fake_llm.chat_requests) == asked_before + 2
    assert SHM_FACT in prompt_of(fake_llm.chat_requests[-1])
    assert "Using host facts" in source_line(answer)

    # 3. the same log in a thread without a diagnosis: no host facts
    sender.event(mention(elsewhere, elsewhere, slack_escape(KV_CACHE_LOG)), "Ev0FACTS3")
    answer = explained_answer(fake_slack, elsewhere)
    assert len(fake_llm.chat_requests) == asked_before + 3
    prompt = prompt_of(fake_llm.chat_requests[-1])
    assert FACTS_HEADING not in prompt and HOST not in prompt
    assert "Using host facts" not in source_line(answer)
    assert fake_slack.special_mentions() == []


def test_host_facts_survive_a_bot_restart(make_http_bot: Any, fake_slack: FakeSlack, fleet: Any,
                                          fake_llm: FakeOpenAI, llm_engine: Pipeline, tmp_path: Path) -> None:
    state = tmp_path / "slack-state.sqlite3"
    overrides = {"engine": llm_engine, "vllm_base_url": fake_llm.base_url, "slack_state_db": state,
                 **runner_overrides(fleet)}
    first, sender = make_http_bot(**overrides)
    thread = "1700000700.000100"
    sender.event(mention(thread, "1700000700.000200", f"diagnose {HOST}"), "Ev0RESTART1")
    final_report(fake_slack)
    first.stop(drain_s=30)

    _, sender = make_http_bot(**overrides)  # a new process would start the same way: same state file
    sender.event(mention(thread, "1700000700.000300", slack_escape(KV_CACHE_LOG)), "Ev0RESTART2")
    answer = explained_answer(fake_slack, thread)
    assert SHM_FACT in prompt_of(fake_llm.chat_requests[-1])
    assert "Using host facts" in source_line(answer)
