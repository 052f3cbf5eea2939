"""Escaping and limits of untrusted text in mrkdwn."""

from __future__ import annotations

import pytest

from bot.slack.reply.mrkdwn import channel_link, code_block, escape, escape_limited, inline_code, user_mention


def test_escape_only_the_three_control_characters() -> None:
    assert escape("<!channel> & <@U123> > \"'é") == "&lt;!channel&gt; &amp; &lt;@U123&gt; &gt; \"'é"


def test_already_escaped_text_is_escaped_again_so_it_shows_literally() -> None:
    assert escape("&lt;!here&gt;") == "&amp;lt;!here&amp;gt;"


@pytest.mark.parametrize("limit", [1, 2, 5, 10, 11, 12, 50])
def test_escape_limited_never_cuts_an_entity_and_respects_the_limit(limit: int) -> None:
    text = "<<&&>>" * 10
    out, cut = escape_limited(text, limit)
    assert len(out) <= limit
    assert cut
    body = out.removesuffix("…")
    assert body.replace("&lt;", "").replace("&gt;", "").replace("&amp;", "") == ""


def test_escape_limited_keeps_short_text_whole() -> None:
    assert escape_limited("a < b", 100) == ("a &lt; b", False)


def test_code_block_neutralises_fences_and_escapes() -> None:
    out, cut = code_block("before\n```\n<!channel>\n```\nafter", 3000)
    assert not cut
    assert out.startswith("```\n") and out.endswith("\n```")
    assert out.count("```") == 2
    assert "&lt;!channel&gt;" in out


def test_code_block_keeps_the_tail_of_a_long_log() -> None:
    lines = [f"line {i} <x>" for i in range(2000)]
    out, cut = code_block("\n".join(lines), 3000)
    assert cut and len(out) <= 3000
    assert "line 1999 &lt;x&gt;" in out and "line 0 " not in out
    assert "earlier lines cut" in out


def test_code_block_with_one_enormous_line() -> None:
    out, cut = code_block("<" * 10_000, 500)
    assert cut and len(out) <= 500 and "&lt;" in out and "<<" not in out


def test_inline_code_cannot_be_broken_out_of() -> None:
    out = inline_code("a`b <!here>")
    assert out.count("`") == 2 and "&lt;!here&gt;" in out


def test_mentions_are_only_built_from_well_formed_ids() -> None:
    assert user_mention("U0ALICE1") == "<@U0ALICE1>"
    assert user_mention("U1> <!channel") == "U1&gt; &lt;!channel"
    assert channel_link("C0123ABC") == "<#C0123ABC>"
    assert channel_link("<!everyone>") == "&lt;!everyone&gt;"
