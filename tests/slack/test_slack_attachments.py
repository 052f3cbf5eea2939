"""Files after an answer, over real HTTP against the fake Slack: the GPU memory picture when the log states
the numbers, a bug-report draft for a log the KB cannot explain, and the "Draft a vLLM issue" button."""

from __future__ import annotations

import json
from typing import Any

from fake_slack import FakeSlack
from test_redact import CORPUS

from bot.slack.reply import kit
from kb.loader import load_kb
from tests.conftest import EVAL_DIR

DM, ALICE = "D0DM0001", "U0ALICE1"
KB = load_kb()


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def paste(sender: Any, text: str, ts: str, event_id: str) -> None:
    sender.event({"type": "message", "channel": DM, "channel_type": "im", "user": ALICE,
                  "text": slack_escape(text), "ts": ts, "event_ts": ts}, event_id)


def uploads(fake: FakeSlack, suffix: str, count: int = 1) -> list[Any]:
    """The completed uploads whose file name ends with `suffix`, with the bytes each one sent."""
    def done(calls: list[Any]) -> bool:
        return sum(1 for c in calls if c.method == "files.getUploadURLExternal"
                   and str(c.params.get("filename", "")).endswith(suffix)) >= count and \
            len([c for c in calls if c.method == "files.completeUploadExternal"]) >= count
    calls = fake.wait_for(done, timeout=90)
    return [c for c in calls if c.method == "upload"]


def _profiling_line() -> str:
    for case in KB.cases:
        for ex in case.examples:
            for line in ex.log.splitlines():
                if "total_gpu_memory=" in line and "kv_cache_size=" in line:
                    return line.strip()
    raise AssertionError("no memory-profiling line in the KB examples")


def test_memory_picture_follows_the_answer_in_its_thread(http_bot: Any, fake_slack: FakeSlack) -> None:
    _, sender = http_bot
    log = _profiling_line() + "\nValueError: No available memory for the cache blocks. Try increasing " \
        "`gpu_memory_utilization` when initializing the engine."
    paste(sender, log, "1700003000.000100", "Ev0PIC1")
    sent = uploads(fake_slack, ".png")
    assert any(bytes(c.params["content"]).startswith(b"\x89PNG") for c in sent)
    # the picture comes after the text answer: the answer's chat.update precedes the upload request
    methods = [c.method for c in fake_slack.calls]
    assert methods.index("chat.update") < methods.index("files.getUploadURLExternal")


def test_unexplained_log_gets_a_redacted_issue_draft(http_bot: Any, fake_slack: FakeSlack) -> None:
    _, sender = http_bot
    uncovered = next(json.loads(line)["log"] for line in (EVAL_DIR / "dev.jsonl").read_text().splitlines()
                     if json.loads(line)["expected"] is None and "Error" in json.loads(line)["log"])
    secrets = [(t, s) for _n, t, s in CORPUS if "\n" not in t + s][:12]
    log = "\n".join(t.replace("{s}", s) for t, s in secrets) + "\n" + uncovered
    paste(sender, log, "1700003100.000100", "Ev0DRAFT1")
    sent = uploads(fake_slack, ".md")
    drafts = [bytes(c.params["content"]).decode() for c in sent if b"### Your current environment" in c.params["content"]]
    assert drafts, "no draft uploaded"
    assert "### 🐛 Describe the bug" in drafts[0]
    assert not [s for _t, s in secrets if s in drafts[0]]


def test_draft_button_posts_a_draft_in_the_thread(http_bot: Any, fake_slack: FakeSlack) -> None:
    _, sender = http_bot
    ts = "1700003200.000100"
    paste(sender, KB.by_id()["port-in-use"].examples[0].log, ts, "Ev0DRAFT2")

    def final(calls: list[Any]) -> Any:
        posted = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                  and c.params.get("_ts")]
        edits = [c for c in calls if posted and c.method == "chat.update" and c.params.get("ts") == posted[0].params["_ts"]]
        return edits[-1] if edits and kit.ACTION_DRAFT_ISSUE in json.dumps(edits[-1].params["blocks"]) else None

    update = final(fake_slack.wait_for(lambda calls: final(calls) is not None, timeout=90))
    buttons = update.params["blocks"][-1]["elements"]
    draft = next(b for b in buttons if b["action_id"] == kit.ACTION_DRAFT_ISSUE)
    fake_slack.clear()
    sender.interactive({
        "type": "block_actions", "user": {"id": ALICE, "username": "alice", "team_id": "T0TEST01"},
        "api_app_id": "A0TEST", "team": {"id": "T0TEST01"}, "channel": {"id": DM},
        "container": {"type": "message", "message_ts": update.params["ts"], "channel_id": DM},
        "message": {"ts": update.params["ts"], "thread_ts": ts, "text": "answer"},
        "trigger_id": "1337.42.draft", "response_url": fake_slack.response_url("draft"),
        "actions": [{"action_id": kit.ACTION_DRAFT_ISSUE, "block_id": "answer_actions", "type": "button",
                     "value": draft["value"]}],
    })
    sent = uploads(fake_slack, ".md")
    text = bytes(sent[-1].params["content"]).decode()
    assert "### What vllm-doctor found" in text and "`port-in-use`" in text
    done = [c for c in fake_slack.calls_to("files.completeUploadExternal")]
    assert done and done[-1].params.get("thread_ts") == ts
