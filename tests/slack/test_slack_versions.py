"""The versions a /vllm-diagnose run found in a Slack thread reach the answer to a log pasted there later
("fixed in vllm 0.10.0; host gpu-01 has 0.9.2 — upgrading is the fix"); the same log in another thread gets
no such note. Real HTTP to the fake Slack Web API, real KB and embedding model, no LLM (KB-only answer)."""

from __future__ import annotations

import json
from typing import Any

from fake_slack import BOT_USER_ID, FakeSlack

from bot.runner.report import CheckResult, DiagnosisReport, HostReport
from bot.slack.thread_facts import ThreadHostFacts
from kb.loader import load_kb

ALICE = "U0ALICE1"
CHANNEL = "C0CHAN01"
CASE = "transformers-aimv2-config-clash"  # fixed_in {vllm: 0.10.0}
LOG = load_kb().by_id()[CASE].examples[1].log
NOTE = "fixed in vllm 0.10.0; host gpu-01 has 0.9.2 — upgrading is the fix"


def mention(thread_ts: str, ts: str, text: str) -> dict[str, Any]:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"type": "app_mention", "channel": CHANNEL, "user": ALICE, "text": f"<@{BOT_USER_ID}> {text}",
            "ts": ts, "thread_ts": thread_ts, "event_ts": ts}


def final_answer(fake: FakeSlack, thread_ts: str) -> str:
    def answer(calls: list[Any]) -> Any:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == thread_ts
                  and c.params.get("_ts")]
        if not posted:
            return None
        edits = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == posted[0].params["_ts"]
                 and CASE in json.dumps(c.params.get("blocks"))]
        return edits[-1] if edits else None

    return json.dumps(answer(fake.wait_for(lambda calls: answer(calls) is not None, timeout=90)).params["blocks"],
                      ensure_ascii=False)


def test_host_versions_of_the_thread_reach_the_log_answer(make_http_bot: Any, fake_slack: FakeSlack) -> None:
    bot, sender = make_http_bot()
    diagnosed, elsewhere = "1700000700.000100", "1700000800.000100"
    report = DiagnosisReport(target="gpu-01", hosts=[HostReport(host="gpu-01", checks=[
        CheckResult(id="python.vllm_install", title="vLLM install", verdict="ok", message="vllm 0.9.2",
                    facts={"installed": True, "version": "0.9.2"})])])
    facts = ThreadHostFacts.from_report(CHANNEL, diagnosed, report)
    assert facts is not None
    bot.deps.thread_facts.remember(facts)  # what bot/slack/hosts.py does after a /vllm-diagnose run

    sender.event(mention(diagnosed, "1700000700.000200", LOG), "Ev0VERSIONS1")
    assert NOTE in final_answer(fake_slack, diagnosed)

    sender.event(mention(elsewhere, elsewhere, LOG), "Ev0VERSIONS2")
    assert "upgrading is the fix" not in final_answer(fake_slack, elsewhere)
