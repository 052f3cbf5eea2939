"""The team-learning loop in Slack, over real HTTP to the fake Web API: one unknown failure pasted in two
threads reaches the review channel as a drafted case; a reviewer's Approve makes it live at once; a draft whose
signature fires on a healthy start-up is refused with the offending line, escaped."""

from __future__ import annotations

import json
import time
from typing import Any

import test_kb_growth_slack as base
from kb_growth_support import REVIEWER, STRANGER, KBFakeSlack
from test_kb_growth_learning import plugin_log
from test_kb_growth_slack import REVIEW_CHANNEL, button, slack_escape, wait_view

from bot.kb_growth.candidates import CandidateStore
from bot.kb_growth.db import Database
from bot.kb_growth.submissions import Submission, SubmissionStore
from bot.slack.reply import kb_growth as kbb

fake = base.fake  # the fake Slack Web API and the bot over real HTTP, as in test_kb_growth_slack.py
kb_bot = base.kb_bot
DM_A = "D0LEARN01"
DM_B = "D0LEARN02"


def _sub(store: SubmissionStore, sub_id: str) -> Submission:
    found = store.get(sub_id)
    assert found is not None, sub_id
    return found


def _paste(sender: Any, fake: KBFakeSlack, channel: str, log: str, ts: str, event_id: str, db: Any) -> None:
    """Paste in a DM of its own (a thread of its own) and wait until the answer's candidate is stored."""
    sender.event({"type": "message", "channel": channel, "channel_type": "im", "user": "U0PASTER1",
                  "text": slack_escape(log), "ts": ts, "event_ts": ts}, event_id)
    thread = f"{channel}/{ts}"
    deadline = time.monotonic() + 60
    while not any(thread in [t for t, _ in c.threads] for c in CandidateStore(db).unknowns()):
        assert time.monotonic() < deadline, f"the paste in {thread} was never stored as a candidate"
        time.sleep(0.05)


def test_two_threads_pasting_one_unknown_failure_reach_reviewers_and_approve_makes_it_live(
    kb_bot: Any, fake: KBFakeSlack, grow_settings: Any
) -> None:
    bot, sender = kb_bot
    db = Database(grow_settings.kb_db_path)
    _paste(sender, fake, DM_A, plugin_log(512, 3), "1700001000.000100", "Ev0LEARN01", db)
    store = SubmissionStore(db)
    assert store.list("pending") == []  # one thread: no draft yet
    _paste(sender, fake, DM_B, plugin_log(64, 0), "1700001100.000100", "Ev0LEARN02", db)

    def drafted(calls: list[Any]) -> bool:
        return any(c.method == "chat.postMessage" and c.params.get("channel") == REVIEW_CHANNEL for c in calls)

    fake.wait_for(drafted, 60)
    [request] = [c for c in fake.calls_to("chat.postMessage") if c.params.get("channel") == REVIEW_CHANNEL]
    [sub] = store.list("pending")
    posted = json.dumps(request.params["blocks"])
    assert sub.id in posted and "staging ring of plugin fastpath" in posted.lower() and "Drafted KB case" in posted
    assert "2 pastes in 2 threads" in posted and "/archives/D0LEARN02/p1700001100000100" in posted
    assert [b["action_id"] for b in request.params["blocks"][-1]["elements"]] == [
        kbb.ACTION_REVIEW_APPROVE, kbb.ACTION_REVIEW_EDIT, kbb.ACTION_REVIEW_REJECT]

    review_ts = request.params["_ts"]
    assert sender.interactive(button(fake, kbb.ACTION_REVIEW_APPROVE, sub.id, REVIEWER, review_ts, "ok")).status == 200
    updated = fake.wait_for_call("chat.update", ts=review_ts)[-1].params
    assert "Approved" in updated["blocks"][0]["text"]["text"]
    new_id = _sub(store, sub.id).written_case
    assert new_id and bot.deps.pipeline.match(plugin_log(7, 1)).best.case_id == new_id  # live at once


def test_approving_a_draft_that_fires_on_a_healthy_start_up_is_refused_with_the_line(
    kb_bot: Any, fake: KBFakeSlack, grow_settings: Any
) -> None:
    store = SubmissionStore(Database(grow_settings.kb_db_path))
    sub = store.create_draft(author_id="vllm-doctor", source_text="x")
    case = {
        "id": "fires-on-start-up", "title": "Fires on every start-up", "title_zh": "每次启动都触发",
        "area": "serving", "severity": "high", "signatures": ["Available routes are"],
        "cause": "A drafted signature that a reviewer must not accept.", "fix": [{"text": "Nothing to do."}],
        "examples": [{"source": "https://x.test/1", "log": "INFO Available routes are: /v1"},
                     {"source": "https://x.test/2", "log": "INFO Available routes are: /v2"}],
        "references": [],
    }
    store.stage(sub.id, kind="new", case=case, target_case=None, report={})
    store.submit(sub.id, kind="new")
    assert sender_click(kb_bot, fake, sub.id).status == 200

    def refused(calls: list[Any]) -> bool:
        return any(c.method == "response_url" and "healthy start-up log" in c.params.get("text", "") for c in calls)

    [told] = [c for c in fake.wait_for(refused, 60) if c.method == "response_url"
              and "healthy start-up log" in c.params.get("text", "")]
    text = told.params["text"]
    assert "Available routes are" in text and ", line " in text and told.params["response_type"] == "ephemeral"
    assert "<" not in text.replace("<@", "")  # untrusted text escaped (&lt; &gt;)
    assert _sub(store, sub.id).status == "pending"


def sender_click(kb_bot: Any, fake: KBFakeSlack, sub_id: str) -> Any:
    _, sender = kb_bot
    return sender.interactive(button(fake, kbb.ACTION_REVIEW_APPROVE, sub_id, REVIEWER, "1700009999.000100", "healthy"))


def test_a_reviewer_edits_a_drafted_case_in_the_case_form_and_others_are_refused(
    kb_bot: Any, fake: KBFakeSlack, grow_settings: Any
) -> None:
    _, sender = kb_bot
    db = Database(grow_settings.kb_db_path)
    _paste(sender, fake, DM_A, plugin_log(512, 3), "1700002000.000100", "Ev0LEARN11", db)
    _paste(sender, fake, DM_B, plugin_log(64, 0), "1700002100.000100", "Ev0LEARN12", db)
    fake.wait_for(lambda calls: any(c.method == "chat.postMessage" and c.params.get("channel") == REVIEW_CHANNEL
                                    for c in calls), 60)
    store = SubmissionStore(Database(grow_settings.kb_db_path))
    [draft] = store.list("pending")
    assert draft.case is not None
    signature = draft.case["signatures"][0]

    sender.interactive(button(fake, kbb.ACTION_REVIEW_EDIT, draft.id, STRANGER, "1700002200.000100", "edit-no"))
    fake.wait_for(lambda calls: any(c.method == "response_url" and "Only KB reviewers can edit" in c.params.get("text", "")
                                    for c in calls))
    assert _sub(store, draft.id).status == "pending"

    sender.interactive(button(fake, kbb.ACTION_REVIEW_EDIT, draft.id, REVIEWER, "1700002200.000100", "edit-ok"))
    form = wait_view(fake, lambda v: v.get("callback_id") == kbb.VIEW_CASE_FORM)
    assert json.dumps(signature)[1:-1] in json.dumps(form)  # the drafted signature, pre-filled
    edited = _sub(store, form["private_metadata"])
    assert edited.status == "draft" and edited.author_id == REVIEWER
    dismissed = _sub(store, draft.id)
    assert dismissed.status == "rejected" and dismissed.note == f"edited as {edited.id}"


def test_reviewers_retrain_the_ranker_from_app_home_and_others_are_refused(
    fake: KBFakeSlack, grow_settings: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    from kb_growth_support import make_engine
    from slack_support import SlackSender, bot_settings

    import bot.evaluation.ranker_train
    from bot.evaluation.evaluate import load_labelled
    from bot.slack.server import SlackBot

    artifact = tmp_path / "ranker.json"
    settings = grow_settings.model_copy(update={"ranker_path": artifact})
    dev = load_labelled(bot.evaluation.ranker_train.DEFAULT_LABELLED)[:30]  # a small labelled file keeps the test short
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(r) + "\n" for r in dev), encoding="utf-8")
    monkeypatch.setattr(bot.evaluation.ranker_train, "DEFAULT_LABELLED", small)
    engine = make_engine(settings)
    cfg = bot_settings(fake, settings, kb_reviewers=[REVIEWER], kb_review_channel=REVIEW_CHANNEL)
    slack_bot = SlackBot(cfg, engine, http=True).start()
    try:
        sender = SlackSender(slack_bot.url + "/slack/events")
        engine_growth = slack_bot.deps.kb_growth
        assert engine_growth is not None
        engine_growth.vote(answer_id="r1", user_id="U1", value="fixed", case_id=dev[0]["expected"] or
                           engine.kb.cases[0].id, verdict="match", channel="C1", evidence=dev[0]["log"])
        for n, user in enumerate((REVIEWER, STRANGER)):
            sender.event({"type": "app_home_opened", "user": user, "channel": f"D0HOME0{n}", "tab": "home",
                          "event_ts": f"170000300{n}.000100"}, f"Ev0HOME0{n}")
        home = {c.params["user_id"]: json.dumps(c.params["view"])
                for c in fake.wait_for(lambda calls: sum(c.method == "views.publish" for c in calls) >= 2, 60)
                if c.method == "views.publish"}
        assert kbb.ACTION_RETRAIN in home[REVIEWER] and kbb.ACTION_RETRAIN not in home[STRANGER]

        for user in (STRANGER, REVIEWER):
            click = button(fake, kbb.ACTION_RETRAIN, "retrain", user, "1700003100.000100", f"retrain-{user}")
            click.pop("channel"), click.pop("container"), click.pop("message"), click.pop("response_url")
            click["view"] = {"id": "VHOME", "type": "home"}
            assert sender.interactive(click).status == 200
        refused = fake.wait_for_call("chat.postMessage", channel=STRANGER)[-1].params
        assert "Only KB reviewers can retrain" in refused["text"]
        done = fake.wait_for_call("chat.postMessage", channel=REVIEWER, timeout=240)[-1].params
        assert "ranker trained on" in done["text"] and "rows with the team's feedback" in done["text"]
        assert json.loads(artifact.read_text())["trained_on"]["logs"] >= 30
    finally:
        slack_bot.stop(drain_s=30)
