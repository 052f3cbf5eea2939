"""Making untrusted text safe and bounded for Slack mrkdwn.

Slack treats only `&`, `<` and `>` as control characters. Escaping them at the one place untrusted text
(pasted logs, LLM output, host output, even KB titles grown from Slack) enters a text object is what keeps
an injected `<!channel>` or `<https://evil|click me>` inert: it renders literally and pings nobody.
Every function here escapes; callers never pre-escape. Limits are counted on the escaped text, because
that is what Slack counts.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
# There is no escape for a backtick run inside a ``` block; a look-alike keeps the text readable.
_FENCE = "```"
_FENCE_LOOKALIKE = "ˋˋˋ"  # U+02CB MODIFIER LETTER GRAVE ACCENT ×3
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SLACK_ID_RE = re.compile(r"^[A-Z][A-Z0-9]{2,30}$")


def escape(text: str) -> str:
    """Escape the three mrkdwn control characters and nothing else."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_limited(text: str, limit: int, suffix: str = ELLIPSIS) -> tuple[str, bool]:
    """Escape `text` so the result is at most `limit` characters; cut on a character boundary of the
    original (never inside `&amp;`) and append `suffix` when cut. Returns (escaped, was_cut)."""
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped, False
    budget = max(0, limit - len(suffix))
    out: list[str] = []
    used = 0
    for ch in text:
        piece = _ENTITIES.get(ch, ch)
        if used + len(piece) > budget:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + suffix, True


def plain_limited(text: str, limit: int) -> str:
    """For plain_text objects (no mrkdwn parsing): only the length needs bounding."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def code_block(text: str, limit: int) -> tuple[str, bool]:
    """A ``` block of untrusted text, escaped and fence-neutralised, at most `limit` chars in total.

    When the text is too long the *first* lines are dropped (log tails carry the error) and a marker
    line says so. Returns (mrkdwn, was_cut)."""
    body = text.replace(_FENCE, _FENCE_LOOKALIKE).strip("\n") or " "
    overhead = len(_FENCE) * 2 + 2  # fences plus the newlines inside them
    escaped = escape(body)
    if len(escaped) + overhead <= limit:
        return f"{_FENCE}\n{escaped}\n{_FENCE}", False
    marker = "… (earlier lines cut; full text in the thread file)\n"
    budget = max(0, limit - overhead - len(marker))
    lines = body.split("\n")
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        piece = escape(line)
        if used + len(piece) + 1 > budget:
            if not kept:  # a single enormous line: keep its tail
                tail, _ = _escape_tail(line, budget)
                kept.append(tail)
            break
        kept.append(piece)
        used += len(piece) + 1
    kept.reverse()
    return f"{_FENCE}\n{marker}{chr(10).join(kept)}\n{_FENCE}", True


def _escape_tail(text: str, budget: int) -> tuple[str, bool]:
    out: list[str] = []
    used = 0
    for ch in reversed(text):
        piece = _ENTITIES.get(ch, ch)
        if used + len(piece) > budget:
            return "".join(reversed(out)), True
        out.append(piece)
        used += len(piece)
    return "".join(reversed(out)), False


def inline_code(text: str, limit: int = 500) -> str:
    """`text` as inline code; a backtick inside would end it, so it becomes a look-alike."""
    escaped, _ = escape_limited(text.replace("`", "ˋ").replace("\n", " "), limit - 2)
    return f"`{escaped}`"


def user_mention(user_id: str | None) -> str:
    """`<@U…>` for a well-formed Slack user id; anything else is rendered inert."""
    if user_id and _SLACK_ID_RE.match(user_id):
        return f"<@{user_id}>"
    return escape(user_id or "someone")


def channel_link(channel_id: str | None) -> str:
    if channel_id and _SLACK_ID_RE.match(channel_id):
        return f"<#{channel_id}>"
    return escape(channel_id or "a channel")
