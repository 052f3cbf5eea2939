"""Block Kit basics every reply module uses: Slack's limits, action ids, `Message`, small blocks, short
notices. Every dynamic string goes through bot.slack.reply.mrkdwn (escape + limits) where it enters a text
object; nothing upstream pre-escapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bot.present.i18n import Language, t
from bot.slack.reply.mrkdwn import (
    escape,
    escape_limited,
    plain_limited,
)

SECTION_TEXT_MAX = 3000


HEADER_TEXT_MAX = 150


BUTTON_TEXT_MAX = 75


CONTEXT_ELEMENTS_MAX = 10


MESSAGE_BLOCKS_MAX = 50


VIEW_BLOCKS_MAX = 100


MESSAGE_TEXT_MAX = 40_000


FALLBACK_TEXT_MAX = 3000  # our own cap: notifications show a line or two anyway


# action_id → meaning; listeners register exactly these.
ACTION_FIXED = "feedback_fixed"


ACTION_NOT_HELPFUL = "feedback_not_helpful"


ACTION_RUN_DIAGNOSTICS = "run_host_diagnostics"


ACTION_ADD_KB_CASE = "add_kb_case"


ACTION_DRAFT_ISSUE = "draft_vllm_issue"


@dataclass(frozen=True)
class Message:
    """A chat message payload: plain `text` fallback plus blocks. `cut` says some material was shortened
    and belongs in a file in the thread."""

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    cut: bool = False

    def as_kwargs(self) -> dict[str, Any]:
        return {"text": self.text, "blocks": self.blocks}


def _section(mrkdwn: str, block_id: str | None = None) -> dict[str, Any]:
    assert len(mrkdwn) <= SECTION_TEXT_MAX, "callers bound section text"
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(items: Iterable[str], block_id: str | None = None) -> dict[str, Any]:
    elements = [{"type": "mrkdwn", "text": t} for t in items if t][:CONTEXT_ELEMENTS_MAX]
    block: dict[str, Any] = {"type": "context", "elements": elements}
    if block_id:
        block["block_id"] = block_id
    return block


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": plain_limited(text, HEADER_TEXT_MAX)}}


def _button(label: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": plain_limited(label, BUTTON_TEXT_MAX), "emoji": True},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _bounded_join(parts: Iterable[str], limit: int, more: str) -> tuple[str, bool]:
    """Join already-escaped parts with newlines until `limit`; append `more` when something is left out."""
    out: list[str] = []
    used = 0
    for part in parts:
        extra = len(part) + (1 if out else 0)
        if used + extra > limit - len(more) - 1:
            out.append(more)
            return "\n".join(out), True
        out.append(part)
        used += extra
    return "\n".join(out), False


def notice(text: str, emoji: str = ":information_source:") -> Message:
    """A one-section message around an untrusted or user-facing string (escaped)."""
    body, _ = escape_limited(text, SECTION_TEXT_MAX - len(emoji) - 1)
    mrkdwn = f"{emoji} {body}"
    return Message(text=plain_limited(escape(text), FALLBACK_TEXT_MAX), blocks=[_section(mrkdwn)])


def input_error(message: str) -> Message:
    """Bad input (empty, too large, binary): the pipeline's or our own user-facing message."""
    return notice(message, ":warning:")


def internal_error(ref: str, lang: Language = "en") -> Message:
    return notice(t("slack.internal_error", lang, ref=ref), ":rotating_light:")
