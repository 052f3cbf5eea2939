"""Block Kit for KB growth within Slack's limits (checked by the fake Slack's own validator) and with
every untrusted string inert."""

from __future__ import annotations

import json
import re

from fake_slack import block_errors
from kb_growth_support import widget_case_data

from bot.kb_growth.candidates import Candidate
from bot.kb_growth.duplicates import Similar
from bot.kb_growth.form import CaseForm
from bot.slack.reply import kb_growth as kbb

BROADCAST = re.compile(r"<!(?:channel|here|everyone|subteam)|<https?://evil")
EVIL = "<!here> <https://evil.example|click> & co"


def test_form_view_fits_slack_limits_even_with_huge_prefill() -> None:
    form = CaseForm(title=EVIL * 20, area="memory", severity="high", signatures="x" * 5000,
                    examples="https://example.invalid/1\n" + "ERROR boom\n" * 2000)
    nearest = [Similar(f"case-{n}", EVIL * 30, "memory", 0.5, False) for n in range(5)]
    view = kbb.case_form_view("kb123", form, nearest, source_note=EVIL * 200)
    assert block_errors(view["blocks"], 100) == []
    assert len(view["title"]["text"]) <= 24 and len(view["submit"]["text"]) <= 24
    for block in view["blocks"]:
        if block["type"] == "input" and block["element"]["type"] == "plain_text_input":
            element = block["element"]
            assert len(element.get("initial_value", "")) <= element["max_length"] <= 3000
    mrkdwn = [b["text"]["text"] for b in view["blocks"] if b["type"] == "section"]
    assert not any(BROADCAST.search(t) for t in mrkdwn)


def test_review_message_escapes_and_bounds_everything() -> None:
    case = widget_case_data(1) | {"title": EVIL, "cause": EVIL * 200,
                                  "fix": [{"text": EVIL, "command": "rm -rf ``` " + EVIL}] * 30}
    case["examples"][0]["log"] = ("ERROR " + EVIL + "\n") * 500
    message = kbb.review_message(submission_id="kb1", kind="new", author_id="U0ALICE1", case=case, target_case=None,
                                 nearest=[Similar("kv-cache-no-memory", EVIL, "memory", 0.91, True)],
                                 warnings=[EVIL * 50], permalink="https://evil.example/archives/C1/p1|x>")
    assert block_errors(message.blocks, 50) == []
    posted = json.dumps(message.blocks) + message.text
    assert not BROADCAST.search(posted)
    assert "<@U0ALICE1>" in posted  # our own mention of the author is a real mention
    assert "evil.example/archives" not in posted  # a malformed permalink is dropped, not linked
    actions = message.blocks[-1]["elements"]
    assert [a["value"] for a in actions] == ["kb1", "kb1"]
    good = kbb.review_message(submission_id="kb1", kind="example", author_id="U0ALICE1", case=case,
                              target_case="kv-cache-no-memory",
                              permalink="https://test.slack.com/archives/C0CHAN01/p1700000001000100")
    assert "<https://test.slack.com/archives/C0CHAN01/p1700000001000100|source message>" in json.dumps(good.blocks)


def test_duplicate_view_options_fit() -> None:
    dups = [Similar(f"case-{n}-" + "x" * 100, "A very long title " * 10, "memory", 0.8, True) for n in range(3)]
    view = kbb.duplicate_view("kb9", EVIL, dups, [EVIL])
    assert block_errors(view["blocks"], 100) == []
    choice = next(b for b in view["blocks"] if b.get("block_id") == kbb.CHOICE_BLOCK)
    for option in choice["element"]["options"]:
        assert len(option["text"]["text"]) <= 75 and len(option["value"]) <= 150
        assert len(option.get("description", {}).get("text", "")) <= 75
    assert not BROADCAST.search(json.dumps([b for b in view["blocks"] if b["type"] != "input"]))


def test_home_section_lists_candidates() -> None:
    candidates = [Candidate(1, "unknown", "OSError: " + EVIL, "text", None, "C1", "U1", "a1", 3, 1.0, 2.0, None),
                  Candidate(2, "not_helpful", "ValueError: x", "t", "port-in-use", "C1", "U1", "a2", 1, 1.0, 2.0, None)]
    blocks = kbb.home_section(candidates, pending=2)
    text = json.dumps(blocks)
    assert "2 case(s) waiting for review" in text and "seen 3" in text and "port-in-use" in text
    assert not BROADCAST.search(text) and block_errors(blocks, 100) == []
    assert "None: every recent log" in json.dumps(kbb.home_section([], pending=0))


def test_feedback_thanks_text() -> None:
    fixed = kbb.feedback_thanks(value="fixed", case_id="kv-cache-no-memory", outcome="solved 9 of 10", changed_from=None)
    assert "`kv-cache-no-memory` fixed it" in fixed.text and "solved 9 of 10" in fixed.text
    changed = kbb.feedback_thanks(value="not_helpful", case_id=None, outcome=None, changed_from="fixed")
    assert "did not help" in changed.text and "earlier rating" in changed.text
    assert kbb.outcome_context(None) is None
    assert "solved 9 of 10" in json.dumps(kbb.outcome_context("solved 9 of 10"))


def test_review_shows_a_case_without_chinese_text() -> None:
    case = widget_case_data(1)
    english_only = kbb.review_message(submission_id="kb1", kind="new", author_id="U0ALICE1", case=case,
                                      target_case=None)
    assert "No Chinese text yet" in json.dumps(english_only.blocks)
    translated = case | {"cause_zh": "原因说明", "fix": [step | {"text_zh": "中文步骤"} for step in case["fix"]]}
    complete = kbb.review_message(submission_id="kb1", kind="new", author_id="U0ALICE1", case=translated,
                                  target_case=None)
    assert "No Chinese text yet" not in json.dumps(complete.blocks)
    assert block_errors(english_only.blocks, 50) == []
