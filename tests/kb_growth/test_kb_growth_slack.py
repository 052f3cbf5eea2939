"""Growing the KB from Slack, end to end over real HTTP: the bot's real HTTP server and bolt App, signed
requests in, Web API calls out to the fake Slack; the real engine, index, model and SQLite on a temporary
KB copy. Shortcut → pre-filled modal, submission errors inline, duplicate warning, review by reviewers
(a user id and a user-group member) with refusal for everyone else, and the new case matched by the
very next paste."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kb_growth_support import (
    AUTHOR,
    GROUP_REVIEWER,
    NOFILE_LOG,
    NOFILE_LOG_2,
    REVIEWER,
    REVIEWER_GROUP,
    STRANGER,
    KBFakeSlack,
)
from slack_logs import KV_CACHE_CASE, KV_CACHE_LOG
from slack_support import SlackSender, bot_settings

from bot.kb_growth.db import Database
from bot.kb_growth.submissions import SubmissionStore
from bot.slack.reply import kb_growth as kbb
from kb.loader import load_kb

CHANNEL = "C0CHAN01"
REVIEW_CHANNEL = "C0REVIEW1"
PASTER = "U0PASTER1"
DM = "D0DM0001"


BROADCAST = re.compile(r"<!(?:channel|here|everyone|subteam)")


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture
def fake() -> Iterator[KBFakeSlack]:
    fake = KBFakeSlack().start()
    fake.groups[REVIEWER_GROUP] = [GROUP_REVIEWER]
    yield fake
    fake.stop()


@pytest.fixture
def kb_bot(fake: KBFakeSlack, grow_settings: Any, engine: Any) -> Iterator[tuple[Any, SlackSender]]:
    from bot.slack.server import SlackBot

    cfg = bot_settings(fake, grow_settings, kb_reviewers=[REVIEWER], kb_reviewer_group=REVIEWER_GROUP,
                       kb_review_channel=REVIEW_CHANNEL)
    bot = SlackBot(cfg, engine, http=True).start()  # the KB-growth store is built by build_app from settings
    yield bot, SlackSender(bot.url + "/slack/events")
    bot.stop(drain_s=30)


# -- payloads ------------------------------------------------------------------------------------------------


def shortcut(fake: KBFakeSlack, log: str, ts: str, user: str = AUTHOR) -> dict[str, Any]:
    return {
        "type": "message_action",
        "callback_id": kbb.SHORTCUT_ADD_TO_KB,
        "trigger_id": "1337.42.kbshortcut",
        "team": {"id": "T0TEST01", "domain": "test"},
        "user": {"id": user, "name": "alice"},
        "channel": {"id": CHANNEL, "name": "vllm-ops"},
        "message": {"type": "message", "user": PASTER, "ts": ts, "text": slack_escape(log)},
        "response_url": fake.response_url("shortcut"),
    }


def view_submission(view: dict[str, Any], values: dict[str, Any], user: str = AUTHOR) -> dict[str, Any]:
    return {
        "type": "view_submission",
        "team": {"id": "T0TEST01", "domain": "test"},
        "user": {"id": user, "name": "alice"},
        "api_app_id": "A0TEST",
        "trigger_id": "1337.42.submit",
        "view": {**view, "id": "V0001", "state": {"values": values}, "hash": "h1"},
    }


def button(fake: KBFakeSlack, action_id: str, value: str, user: str, message_ts: str, tag: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0TEST01"},
        "api_app_id": "A0TEST",
        "team": {"id": "T0TEST01", "domain": "test"},
        "channel": {"id": REVIEW_CHANNEL, "name": "kb-review"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": REVIEW_CHANNEL},
        "message": {"ts": message_ts, "text": "review"},
        "trigger_id": "1337.42.review",
        "response_url": fake.response_url(tag),
        "actions": [{"action_id": action_id, "block_id": "review_actions", "type": "button", "value": value,
                     "action_ts": str(time.time())}],
    }


def form_values(view: dict[str, Any], **override: str) -> dict[str, Any]:
    """state.values as Slack sends them: the pre-filled values, with some fields typed over."""
    values: dict[str, Any] = {}
    for block in view["blocks"]:
        if block.get("type") != "input":
            continue
        element = block["element"]
        name = block["block_id"]
        if element["type"] == "static_select":
            chosen = override.get(name) or (element.get("initial_option") or {}).get("value")
            values[name] = {kbb.INPUT_ACTION: {"type": "static_select",
                                               "selected_option": {"value": chosen} if chosen else None}}
        else:
            text = override[name] if name in override else element.get("initial_value", "")
            values[name] = {kbb.INPUT_ACTION: {"type": "plain_text_input", "value": text or None}}
    return values


def wait_view(fake: KBFakeSlack, predicate: Any, timeout: float = 60.0) -> dict[str, Any]:
    def found(calls: list[Any]) -> bool:
        return any(c.method == "views.update" and predicate(c.params["view"]) for c in calls)

    calls = fake.wait_for(found, timeout)
    return [c.params["view"] for c in calls if c.method == "views.update" and predicate(c.params["view"])][-1]


def is_form(view: dict[str, Any]) -> bool:
    return any(b.get("block_id") == "title" for b in view.get("blocks", []))


def initial(view: dict[str, Any], block_id: str) -> str:
    block = next(b for b in view["blocks"] if b.get("block_id") == block_id)
    element = block["element"]
    return element.get("initial_value") or (element.get("initial_option") or {}).get("value", "")


def open_form(fake: KBFakeSlack, sender: SlackSender, log: str, ts: str) -> dict[str, Any]:
    with fake.holding():  # acked while views.open waits: the ack does not wait for the form
        sent = sender.interactive(shortcut(fake, log, ts))
        assert sent.status == 200
    assert not fake.held_too_long
    opened = fake.wait_for_call("views.open")[-1].params
    assert opened["trigger_id"] == "1337.42.kbshortcut" and opened["view"]["callback_id"] == kbb.VIEW_CASE_FORM
    return wait_view(fake, is_form)


def review_request(fake: KBFakeSlack, sub_id: str) -> Any:
    def posted(calls: list[Any]) -> bool:
        return any(c.method == "chat.postMessage" and sub_id in json.dumps(c.params.get("blocks")) for c in calls)

    return [c for c in fake.wait_for(posted, 60) if c.method == "chat.postMessage"
            and sub_id in json.dumps(c.params.get("blocks"))][0]


def nofile_form(view: dict[str, Any], **override: str) -> dict[str, Any]:
    fields = {
        "title": "The server runs out of file descriptors <!channel>",
        "title_zh": "文件描述符耗尽",
        "cause": "Every request and ZMQ socket holds a file descriptor; the container's soft limit runs out under load.",
        "fix": "Raise the open-files limit of the server process.\n$ ulimit -n 65535",
    }
    fields.update(override)
    return form_values(view, **fields)


# -- tests ---------------------------------------------------------------------------------------------------


def test_shortcut_opens_a_form_prefilled_from_the_message_and_its_thread(kb_bot: Any, fake: KBFakeSlack) -> None:
    _, sender = kb_bot
    ts = "1700000100.000100"
    fake.thread_messages[(CHANNEL, ts)] = [
        {"type": "message", "user": PASTER, "ts": ts, "text": slack_escape(NOFILE_LOG)},
        {"type": "message", "user": "U0OTHER01", "ts": "1700000101.000100", "thread_ts": ts,
         "text": "same here:\n```" + slack_escape(NOFILE_LOG_2) + "```"},
        {"type": "message", "bot_id": "BBOT0001", "user": "UBOT0001", "ts": "1700000102.000100", "thread_ts": ts,
         "text": "No confident match"},
    ]
    fake.thread_messages[(CHANNEL, ts)][0]["thread_ts"] = ts
    payload = shortcut(fake, NOFILE_LOG, ts)
    payload["message"]["thread_ts"] = ts
    with fake.holding():  # acked while every Slack call of the work waits: ack before work
        sent = sender.interactive(payload)
        assert sent.status == 200
    assert not fake.held_too_long
    view = wait_view(fake, is_form)
    replies = fake.calls_to("conversations.replies")[0].params
    assert replies["channel"] == CHANNEL and replies["ts"] == ts
    assert initial(view, "title") == "Too many open files"
    assert "Too many open files" in initial(view, "signatures") and "\\d+" in initial(view, "signatures")
    examples = initial(view, "examples")
    assert examples.startswith(f"https://test.slack.com/archives/{CHANNEL}/p{ts.replace('.', '')}\n")
    assert "OSError: [Errno 24] Too many open files" in examples
    assert "\n---\nhttps://test.slack.com/archives/" in examples and "tokenizer.json" in examples  # the thread's log
    assert initial(view, "area") in ("serving", "install", "cuda", "memory", "model", "distributed", "hardware", "performance")
    assert len(view["blocks"]) <= 100 and len(json.dumps(view)) < 30_000
    assert not [c for c in fake.calls if c.params.get("_rejected")]


def test_submission_with_errors_shows_them_on_the_fields(kb_bot: Any, fake: KBFakeSlack, grow_settings: Any) -> None:
    _, sender = kb_bot
    view = open_form(fake, sender, NOFILE_LOG, "1700000200.000100")
    first_example = initial(view, "examples").split("\n---\n")[0]
    values = form_values(view, title_zh="", cause="too short", signatures="(unclosed", examples=first_example)
    sent = sender.interactive(view_submission(view, values))
    assert sent.status == 200
    body = sent.json()
    assert body["response_action"] == "errors"
    errors = body["errors"]
    assert set(errors) >= {"title_zh", "cause", "signatures", "examples"}
    assert "bad regex" in errors["signatures"] and "at least two" in errors["examples"]
    assert "20" in errors["cause"]
    assert not list(Path(grow_settings.kb_dir).glob("*/too-many-open-files*.yaml"))

    two = first_example + "\n---\nhttps://github.com/example-org/vllm-notes/issues/2\n" + NOFILE_LOG_2
    healthy = form_values(view, title_zh="文件描述符耗尽", cause="x" * 30, fix="Raise the limit.", examples=two,
                          signatures="Too many open files\nAutomatically detected platform")
    body = sender.interactive(view_submission(view, healthy)).json()
    assert body["response_action"] == "errors" and list(body["errors"]) == ["signatures"]
    assert "healthy start-up log" in body["errors"]["signatures"]


def test_reviewer_approves_others_are_refused_and_the_next_paste_gets_the_new_case(
    kb_bot: Any, fake: KBFakeSlack, grow_settings: Any
) -> None:
    bot, sender = kb_bot
    view = open_form(fake, sender, NOFILE_LOG, "1700000300.000100")
    sub_id = view["private_metadata"]
    examples = initial(view, "examples") + "\n---\nhttps://github.com/example-org/vllm-notes/issues/2\n" + NOFILE_LOG_2
    body = sender.interactive(view_submission(view, nofile_form(view, examples=examples))).json()
    assert body["response_action"] == "update"  # "checking…", then the result arrives by views.update
    done = wait_view(fake, lambda v: "Sent" in json.dumps(v) and "for review" in json.dumps(v))
    assert "<!channel>" not in json.dumps(done)

    request = review_request(fake, sub_id)
    assert request.params["channel"] == REVIEW_CHANNEL
    review_ts = request.params["_ts"]
    buttons = request.params["blocks"][-1]["elements"]
    assert [b["action_id"] for b in buttons] == [kbb.ACTION_REVIEW_APPROVE, kbb.ACTION_REVIEW_REJECT]
    assert "&lt;!channel&gt;" in json.dumps(request.params["blocks"])  # the author's text is inert

    cases_dir = Path(grow_settings.kb_dir)
    for n, outsider in enumerate((STRANGER, AUTHOR), start=1):
        with fake.holding():  # acked while the refusal waits: ack before work
            sent = sender.interactive(button(fake, kbb.ACTION_REVIEW_APPROVE, sub_id, outsider, review_ts, f"no-{outsider}"))
            assert sent.status == 200
        assert not fake.held_too_long
        fake.wait_for(lambda calls, n=n: sum(  # this outsider's refusal, not the previous one's
            c.method == "response_url" and c.params.get("text", "").startswith("Only KB reviewers") for c in calls) >= n)
    refusals = [c for c in fake.calls_to("response_url") if "Only KB reviewers" in c.params.get("text", "")]
    assert len(refusals) == 2 and all(c.params["response_type"] == "ephemeral" for c in refusals)
    # the refusals end the handling of those clicks (no sleep): nothing was written
    assert not list(cases_dir.glob("*/*file-descriptors*.yaml"))
    assert SubmissionStore(Database(grow_settings.kb_db_path)).get(sub_id).status == "pending"

    sent = sender.interactive(button(fake, kbb.ACTION_REVIEW_APPROVE, sub_id, GROUP_REVIEWER, review_ts, "ok"))
    assert sent.status == 200
    updated = fake.wait_for_call("chat.update", ts=review_ts)[-1].params
    assert "Approved" in updated["blocks"][0]["text"]["text"] and f"<@{GROUP_REVIEWER}>" in updated["blocks"][0]["text"]["text"]
    assert fake.calls_to("usergroups.users.list")[0].params["usergroup"] == REVIEWER_GROUP
    told = fake.wait_for_call("chat.postMessage", channel=AUTHOR)[-1].params
    assert "is live as" in told["blocks"][0]["text"]["text"]
    decided = SubmissionStore(Database(grow_settings.kb_db_path)).get(sub_id)
    assert decided.status == "approved" and decided.reviewer_id == GROUP_REVIEWER
    new_id = decided.written_case
    assert new_id == "server-runs-out-file-descriptors-channel"  # from the title, stop words dropped
    assert f"`{new_id}`" in told["blocks"][0]["text"]["text"] and f"`{new_id}`" in updated["blocks"][0]["text"]["text"]
    case = load_kb(cases_dir).by_id()[new_id]
    assert Path(decided.written_path) == cases_dir / case.area / f"{new_id}.yaml"
    assert case.title == "The server runs out of file descriptors <!channel>"  # stored as typed, escaped on display
    assert case.examples[0].source.startswith("https://test.slack.com/archives/")

    # the very next paste, in a DM, is answered with the new case: live without a restart
    ts = "1700000399.000100"
    sender.event({"type": "message", "channel": DM, "channel_type": "im", "user": PASTER,
                  "text": slack_escape(NOFILE_LOG), "ts": ts, "event_ts": ts}, "Ev0KBNEXT1")

    def answered(calls: list[Any]) -> bool:
        return any(c.method == "chat.update" and c.params.get("channel") == DM
                   and new_id in json.dumps(c.params.get("blocks")) for c in calls)

    fake.wait_for(answered, 60)
    assert bot.deps.pipeline.match(NOFILE_LOG).verdict == "match"

    again = sender.interactive(button(fake, kbb.ACTION_REVIEW_REJECT, sub_id, REVIEWER, review_ts, "late"))
    assert again.status == 200
    late = fake.wait_for(lambda calls: any(c.method == "response_url" and "already approved" in c.params.get("text", "")
                                            for c in calls))
    assert late
    assert not [t for t in fake.posted_texts() if BROADCAST.search(t)]


def test_duplicate_warning_and_adding_the_log_as_an_example(kb_bot: Any, fake: KBFakeSlack, grow_settings: Any, engine: Any) -> None:
    _, sender = kb_bot
    view = open_form(fake, sender, KV_CACHE_LOG, "1700000400.000100")
    sub_id = view["private_metadata"]
    kv = engine.case(KV_CACHE_CASE)
    before = len(kv.examples)
    second = kv.examples[1]
    examples = initial(view, "examples") + f"\n---\n{second.source}\n{second.log}"
    signatures = initial(view, "signatures") + "\n" + "\n".join(kv.signatures)  # so both examples are hit
    values = nofile_form(view, title="KV cache has no room", examples=examples, signatures=signatures)
    sent = sender.interactive(view_submission(view, values)).json()
    assert sent["response_action"] == "update", sent
    dup = wait_view(fake, lambda v: v.get("callback_id") == kbb.VIEW_DUPLICATE and any(
        b.get("block_id") == kbb.CHOICE_BLOCK for b in v.get("blocks", [])))
    text = json.dumps(dup)
    assert KV_CACHE_CASE in text and "% similar" in text
    choice = next(b for b in dup["blocks"] if b.get("block_id") == kbb.CHOICE_BLOCK)
    options = [o["value"] for o in choice["element"]["options"]]
    assert options[0] == kbb.CHOICE_EXAMPLE_PREFIX + KV_CACHE_CASE and options[-1] == kbb.CHOICE_NEW

    values = {kbb.CHOICE_BLOCK: {kbb.INPUT_ACTION: {"type": "radio_buttons",
                                                    "selected_option": {"value": options[0]}}}}
    body = sender.interactive(view_submission(dup, values)).json()
    assert body["response_action"] == "update" and KV_CACHE_CASE in json.dumps(body["view"])
    request = review_request(fake, sub_id)
    assert f"New example for KB case `{KV_CACHE_CASE}`" in json.dumps(request.params["blocks"])

    sender.interactive(button(fake, kbb.ACTION_REVIEW_APPROVE, sub_id, REVIEWER, request.params["_ts"], "dup-ok"))
    fake.wait_for_call("chat.update", ts=request.params["_ts"])
    updated = load_kb(grow_settings.kb_dir).by_id()[KV_CACHE_CASE]
    assert len(updated.examples) == before + 1  # the identical second example was not duplicated
    assert updated.examples[-1].source.startswith("https://test.slack.com/archives/")
    assert updated.examples[-1].source in updated.references
    assert not list(Path(grow_settings.kb_dir).glob("*/kv-cache-has-no-room*.yaml"))


def test_feedback_buttons_store_votes_outcomes_and_candidates(kb_bot: Any, fake: KBFakeSlack) -> None:
    bot, sender = kb_bot
    answers = []
    for n, log in enumerate([KV_CACHE_LOG, KV_CACHE_LOG, "RuntimeError: flux capacitor desynchronised on rank 3"]):
        ts = f"17000005{n:02d}.000100"
        sender.event({"type": "message", "channel": DM, "channel_type": "im", "user": PASTER,
                      "text": slack_escape(log), "ts": ts, "event_ts": ts}, f"Ev0FB{n}")

        def final(calls: list[Any], ts: str = ts) -> bool:
            posts = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts]
            return bool(posts) and any(c.method == "chat.update" and c.params.get("ts") == posts[0].params.get("_ts")
                                       and "answer_actions" in json.dumps(c.params.get("blocks")) for c in calls)

        calls = fake.wait_for(final, 60)
        post_ts = [c for c in calls if c.method == "chat.postMessage" and c.params.get("thread_ts") == ts][0].params["_ts"]
        update = [c for c in calls if c.method == "chat.update" and c.params.get("ts") == post_ts][-1]
        answers.append(update.params["blocks"][-1]["elements"][0]["value"])

    def click(action: str, answer: str, user: str, tag: str) -> str:
        """Press a button and return the ephemeral reply it got."""
        before = len(fake.calls_to("response_url"))
        payload = button(fake, action, answer, user, "1700000599.000100", tag)
        payload["channel"] = {"id": DM}
        assert sender.interactive(payload).status == 200
        fake.wait_for(lambda calls: sum(c.method == "response_url" for c in calls) > before)
        return fake.calls_to("response_url")[before].params["text"]

    replies = []
    for user in ("U0VOTER01", "U0VOTER02"):
        for answer in answers[:2]:  # each voter clicks on both answers: counted once per person
            replies.append(click("feedback_fixed", answer, user, f"{user}-{answer}"))
    assert "Outcome so far: solved 1 of 1" in replies[0] and "Outcome so far: solved 1 of 1" in replies[1]
    assert "Outcome so far: solved 2 of 2" in replies[3]
    replies.append(click("feedback_fixed", answers[0], "U0VOTER01", "again"))  # the same click twice: one vote
    assert "solved 2 of 2" in replies[-1]
    assert "did not help" in click("feedback_not_helpful", answers[0], "U0VOTER03", "v3")
    growth = bot.deps.kb_growth
    assert growth.outcome_text(KV_CACHE_CASE) == "solved 2 of 3"
    assert "too old" in click("feedback_fixed", "no-such-answer", "U0VOTER04", "old")
    assert growth.outcome_text(KV_CACHE_CASE) == "solved 2 of 3"
    candidates = growth.candidates.open()
    reasons = {c.reason for c in candidates}
    assert "not_helpful" in reasons  # the log whose answer did not help
    unknown = [c for c in candidates if c.reason == "unknown"]  # the log nobody could answer
    assert any(c.summary.startswith("RuntimeError: flux capacitor desynchronised") for c in unknown), unknown


def test_the_case_form_speaks_the_authors_language(kb_bot: Any, fake: KBFakeSlack) -> None:
    """A zh-CN author gets the modal, its checking and its "sent" views in Chinese; an en-US one in English."""
    _, sender = kb_bot
    fake.locales[AUTHOR] = "zh-CN"
    view = open_form(fake, sender, NOFILE_LOG, "1700000700.000100")
    loading = fake.calls_to("views.open")[-1].params["view"]
    assert loading["title"]["text"] == "添加到 vLLM 知识库" and "正在读取这条消息" in json.dumps(loading, ensure_ascii=False)
    text = json.dumps(view, ensure_ascii=False)
    assert view["title"]["text"] == "添加到 vLLM 知识库" and view["submit"]["text"] == "检查并提交"
    assert view["close"]["text"] == "取消"
    labels = {b["block_id"]: b["label"]["text"] for b in view["blocks"] if b.get("type") == "input"}
    assert labels["cause"] == "原因" and labels["fix"] == "解决步骤" and labels["examples"] == "示例日志"
    assert "知识库审核人批准后才会生效" in text and "Describe the failure" not in text and "Fix steps" not in text
    assert initial(view, "title") == "Too many open files"  # the author's (and the log's) text is not translated
    examples = initial(view, "examples") + "\n---\nhttps://github.com/example-org/vllm-notes/issues/2\n" + NOFILE_LOG_2
    body = sender.interactive(view_submission(view, nofile_form(view, examples=examples))).json()
    assert body["response_action"] == "update" and "正在知识库中查找类似的案例" in json.dumps(body, ensure_ascii=False)
    done = wait_view(fake, lambda v: "已提交审核" in json.dumps(v, ensure_ascii=False))
    assert done["close"]["text"] == "完成" and "Sent" not in json.dumps(done)

    payload = shortcut(fake, NOFILE_LOG, "1700000701.000100", user=STRANGER)  # en-US, Slack's default
    assert sender.interactive(payload).status == 200
    english = wait_view(fake, lambda v: is_form(v) and v["submit"]["text"] == "Check and send")
    labels = {b["block_id"]: b["label"]["text"] for b in english["blocks"] if b.get("type") == "input"}
    assert english["title"]["text"] == "Add to vLLM KB" and labels["fix"] == "Fix steps"
    assert "审核" not in json.dumps(english, ensure_ascii=False)
