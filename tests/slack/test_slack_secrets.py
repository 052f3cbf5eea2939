"""No secret of the corpus (tests/secret_corpus.py) leaves through Slack: not in the answer's blocks or
fallback text, not in the uploaded "distilled log" file, not in the LLM prompt (captured at the HTTP seam
by the fake OpenAI server), not in the bot's SQLite files or log records; both for a pasted message and
for a shared file (UTF-16 with a BOM, as PowerShell writes it)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from fake_slack import FakeFile, FakeSlack
from secret_corpus import SHAPES, corpus_paste, leaks
from slack_logs import KV_CACHE_CASE

from bot.pipeline import Pipeline
from bot.present.i18n import t


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    # in Chinese: the corpus's Chinese secret keys (密码, API密钥) make the paste read as Chinese, and a Chinese
    # answer is accepted whatever the paste's language
    answer = {"case_id": KV_CACHE_CASE, "summary": "KV 缓存没有剩余空间了。", "why": "模型权重占满了显存。",
              "fix_steps": ["调低 --max-model-len。"], "confidence": "high"}
    server = FakeOpenAI(answer, pieces=4, delay_s=0.01).start()
    yield server
    server.stop()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _final_answer(fake: FakeSlack, ts: str) -> list[Any]:
    def done(calls: list[Any]) -> bool:
        placeholder = next((c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts
                            and c.params.get("_ts")), None)
        if placeholder is None:
            return False
        updates = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == placeholder.params["_ts"]]
        marks = (t("slack.by_llm", "en"), t("slack.by_llm", "zh"))
        return any(m in json.dumps(u.params.get("blocks"), ensure_ascii=False) for u in updates for m in marks)

    return fake.wait_for(done, timeout=180)


@pytest.mark.parametrize("how", ["message", "utf16-file"])
def test_nothing_secret_reaches_slack_the_llm_or_the_stores(how: str, make_http_bot: Any, fake_slack: FakeSlack,
                                                           fake_llm: FakeOpenAI, settings: Any, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm_settings = settings.model_copy(update={"vllm_base_url": fake_llm.base_url, "llm_timeout_s": 60.0})
    engine = Pipeline.from_settings(llm_settings)
    _, sender = make_http_bot(engine=engine, vllm_base_url=fake_llm.base_url)
    paste = corpus_paste(pad=300)  # long lines: the answer is cut and the distilled log uploaded
    ts = "1700000300.000100"
    event: dict[str, Any] = {"type": "message", "channel": "D0DM0001", "channel_type": "im", "user": "U0ALICE1",
                             "ts": ts, "event_ts": ts}
    if how == "message":
        event["text"] = _escape(paste)
    else:
        info = fake_slack.add_file(FakeFile("F0SECRET", "crash.log", b"\xff\xfe" + paste.encode("utf-16-le")))
        event.update(text="log attached", subtype="file_share", files=[info])
    sender.event(event, f"Ev0SECRET{how}")
    calls = _final_answer(fake_slack, ts)

    posted = json.dumps([c.params for c in calls if c.method != "upload"], ensure_ascii=False)
    assert KV_CACHE_CASE in posted
    assert leaks(posted) == []
    uploads = fake_slack.wait_for_call("upload", timeout=60)
    content = b"".join(c.params["content"] for c in uploads).decode("utf-8")
    assert leaks(content) == []
    # the file holds the cleaned lines: the lines that carried the secrets are there, without them
    assert [s.name for s in SHAPES if s.marker not in content] == []
    assert fake_llm.chat_requests, "the LLM was never asked"
    assert leaks(json.dumps(fake_llm.requests, ensure_ascii=False)) == []
    for db in tmp_path.glob("*.sqlite3*"):
        assert leaks(db.read_bytes().decode("utf-8", "replace")) == [], db.name
    assert leaks("\n".join(r.getMessage() for r in caplog.records)) == []
