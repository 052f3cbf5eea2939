"""Turn Slack's formatted message text back into the log the user pasted.

Slack escapes `&`, `<`, `>` in message and command text, wraps URLs as `<http://x|label>` and mentions as
`<@U…>`, and users often wrap logs in ``` fences. The pipeline wants the raw log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Where:
    """Where a request came from and where its answer goes."""

    channel: str
    user: str | None
    thread_ts: str | None  # None: post the answer top-level (slash command); it becomes the thread root
    respond: Callable[..., Any] | None = None  # response_url sender (commands, shortcuts, actions)


_LINK_RE = re.compile(r"<((?:https?|mailto):[^|>\s]+)(?:\|([^>]*))?>")
_MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_SPECIAL_RE = re.compile(r"<!([a-z]+)(?:\^[A-Z0-9]+)?(?:\|([^>]*))?>")
_CHANNEL_RE = re.compile(r"<#([CGD][A-Z0-9]+)(?:\|([^>]*))?>")
_HOST_COMMAND_RE = re.compile(r"^\s*diagnose\s+([A-Za-z0-9][A-Za-z0-9._:-]{0,100})((?:\s+[\w.:-]{1,64}){0,20})\s*$", re.I)


def slack_to_plain(text: str) -> str:
    """Undo Slack's formatting: links → their text, entities → characters, code fences removed."""
    text = _LINK_RE.sub(lambda m: m.group(2) or m.group(1), text)
    text = _CHANNEL_RE.sub(lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = _SPECIAL_RE.sub(lambda m: "@" + (m.group(2) or m.group(1)), text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.replace("```", "\n")


def strip_bot_mention(text: str, bot_user_id: str | None) -> str:
    """Remove mentions of the bot itself (anywhere), keep other mentions as text."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", " ", text)
    return text.strip()


def mentions_user(text: str, user_id: str | None) -> bool:
    return bool(user_id) and any(m.group(1) == user_id for m in _MENTION_RE.finditer(text or ""))


def host_request(text: str) -> tuple[str, list[str]] | None:
    """`diagnose host01 [check…]` (one short line) → ("host01", ["check", …]); anything else → None."""
    if "\n" in text.strip() or len(text) > 600:
        return None
    match = _HOST_COMMAND_RE.match(text)
    if not match:
        return None
    return match.group(1), match.group(2).split()
