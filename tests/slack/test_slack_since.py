"""What changed since a working run, in Slack (issue 25 item 6): a healthy start-up log pasted in a channel is
kept per model; a failing log of that model pasted there later is answered with the differences first. And the
GPUs a /vllm-diagnose run counted in a thread fill {tp_fit} in the fix commands of a log pasted there. Real
HTTP to the fake Slack Web API, the real KB and embedding model, no LLM (KB-only answers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_slack import BOT_USER_ID, FakeSlack

from bot.diagnosis.facts import read_facts
from bot.diagnosis.since import what_changed
from bot.runner.report import CheckResult, DiagnosisReport, HostReport
from bot.slack.healthy_runs import HealthyRun, HealthyRuns
from bot.slack.store import SlackStateDB
from bot.slack.thread_facts import ThreadHostFacts

ALICE = "U0ALICE1"
CHANNEL, OTHER_CHANNEL = "C0CHAN01", "C0CHAN02"
FIXTURES = Path(__file__).resolve().parents[1] / "fit_fixtures"
GOOD = (FIXTURES / "healthy-tp8-qwen72b.log").read_text(encoding="utf-8")
BAD = (FIXTURES / "kv-shortfall-tp8-qwen72b.log").read_text(encoding="utf-8")
TP_LOG = ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
          "group.\n")


def message(channel: str, ts: str, text: str, thread_ts: str | None = None) -> dict[str, Any]:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    event = {"type": "app_mention", "channel": channel, "user": ALICE, "text": f"<@{BOT_USER_ID}> {text}",
             "ts": ts, "event_ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def final_blocks(fake: FakeSlack, channel: str, thread_ts: str, needle: str) -> str:
    """The blocks of the answer posted in `thread_ts` (its last edit) once they hold `needle`."""
    def found(calls: list[Any]) -> str | None:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("channel") == channel
                  and c.params.get("thread_ts") == thread_ts and c.params.get("_ts")]
        ours = {c.params["_ts"] for c in posted}
        versions = [*(c.params for c in posted),
                    *(c.params for c in calls if c.method == "chat.update" and c.params.get("ts") in ours)]
        texts = [json.dumps(v.get("blocks"), ensure_ascii=False) for v in versions]
        held = [text for text in texts if needle in text]
        return held[-1] if held else None

    fake.wait_for(lambda calls: found(calls) is not None, timeout=90)
    result = found(fake.calls)
    assert result is not None
    return result


def test_a_healthy_run_is_kept_and_its_differences_lead_a_later_failure(make_http_bot: Any,
                                                                        fake_slack: FakeSlack) -> None:
    bot, sender = make_http_bot()
    sender.event(message(CHANNEL, "1700001000.000100", GOOD), "Ev0SINCE0001")
    # kept in the shared store: another replica (or this one after a restart) finds it
    fake_slack.wait_for(lambda _calls: bot.state.load_healthy_run(CHANNEL, "Qwen/Qwen2.5-72B-Instruct") is not None,
                        timeout=90)

    sender.event(message(CHANNEL, "1700001100.000100", BAD), "Ev0SINCE0002")
    blocks = final_blocks(fake_slack, CHANNEL, "1700001100.000100", "What changed since the working run")
    assert "vllm_version" in blocks and "0.8.5.post1" in blocks and "0.9.0.1" in blocks
    assert blocks.index("What changed since the working run") < blocks.index("The error to fix")

    sender.event(message(OTHER_CHANNEL, "1700001200.000100", BAD), "Ev0SINCE0003")
    other = final_blocks(fake_slack, OTHER_CHANNEL, "1700001200.000100", "The error to fix")
    assert "What changed since the working run" not in other  # kept per channel


def test_host_gpu_count_of_the_thread_fills_tp_fit(make_http_bot: Any, fake_slack: FakeSlack) -> None:
    bot, sender = make_http_bot()
    thread = "1700002000.000100"
    report = DiagnosisReport(target="gpu-01", hosts=[HostReport(host="gpu-01", checks=[
        CheckResult(id="gpu.nvidia_smi", title="GPUs", verdict="ok", message="4 GPUs", facts={"gpu_count": 4})])])
    facts = ThreadHostFacts.from_report(CHANNEL, thread, report)
    assert facts is not None and facts.gpus == 4
    bot.deps.thread_facts.remember(facts)  # what bot/slack/hosts.py does after a /vllm-diagnose run

    sender.event(message(CHANNEL, "1700002000.000200", TP_LOG, thread_ts=thread), "Ev0TPFIT0001")
    blocks = final_blocks(fake_slack, CHANNEL, thread, "tp-exceeds-gpus")
    assert "--tensor-parallel-size 4" in blocks

    elsewhere = "1700002100.000100"
    sender.event(message(CHANNEL, elsewhere, TP_LOG, thread_ts=elsewhere), "Ev0TPFIT0002")
    assert "--tensor-parallel-size 4" not in final_blocks(fake_slack, CHANNEL, elsewhere, "tp-exceeds-gpus")


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    if request.param == "sqlite":
        return tmp_path / "state.sqlite3"
    return str(request.getfixturevalue("postgres_url"))  # a real PostgreSQL server (tests/postgres_support.py)


def test_store_keeps_healthy_runs_and_host_gpus(target: str | Path) -> None:
    store = SlackStateDB(target, retention_s=86400.0)
    run = HealthyRun.from_log(CHANNEL, GOOD, read_facts(GOOD), 1_700_000_000.0)
    assert run is not None
    assert store.save_healthy_run(run)
    loaded = store.load_healthy_run(CHANNEL, run.model)
    assert loaded == run
    # the kept lines give the same facts as the whole log: what `explain --since` would compare
    assert what_changed(read_facts(loaded.text()), read_facts(BAD)) == what_changed(read_facts(GOOD), read_facts(BAD))

    facts = ThreadHostFacts(CHANNEL, "1.2", "gpu-01", ("gpu-01",), ("a fact",), created=5.0, gpus=8)
    assert store.save_thread_facts(facts)
    assert store.load_thread_facts(CHANNEL, "1.2") == facts


def test_healthy_runs_expire_and_are_per_model() -> None:
    now = [1_000_000.0]
    runs = HealthyRuns(clock=lambda: now[0])
    assert runs.remember(CHANNEL, GOOD, read_facts(GOOD)) is not None
    assert runs.lookup(CHANNEL, "Qwen/Qwen2.5-72B-Instruct") is not None
    assert runs.lookup(CHANNEL, "meta-llama/Llama-3.1-8B-Instruct") is None
    assert runs.lookup(CHANNEL, None) is None
    now[0] += 31 * 24 * 3600
    assert runs.lookup(CHANNEL, "Qwen/Qwen2.5-72B-Instruct") is None
