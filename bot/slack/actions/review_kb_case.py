"""Approve / Reject (buttons on a review request): non-reviewers are refused at once; a worker writes and
indexes the case (or rejects it), updates every review message and tells the author by DM."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import InvalidCase, PermissionDenied, ReviewConflict
from bot.kb_growth import KBGrowth
from bot.slack.deps import SlackDeps
from bot.slack.kb_growth_edge import user_of
from bot.slack.reply import kb_growth as kbb
from bot.slack.reply.mrkdwn import escape, escape_limited, user_mention

log = logging.getLogger(__name__)


def review_kb_case(deps: SlackDeps, growth: KBGrowth, *, approve: bool) -> Callable[..., None]:
    def on_review(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        user_id, user_name = user_of(body)
        if not growth.reviewers.is_reviewer(user_id):
            who = ", ".join(user_mention(u) for u in sorted(growth.reviewers.user_ids)[:5])
            group = " or members of the reviewer group" if growth.reviewers.group_id else ""
            text = f"Only KB reviewers ({who or 'none configured'}{group}) can approve or reject cases."
            log.info("refused KB review click by %s on %s", user_id, action.get("value"))
            message = kbb.ephemeral(text, ":lock:")
            respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            return
        deps.workers.submit(_decide, growth, client, respond, str(action.get("value") or ""), user_id, user_name, approve)

    return on_review


def _decide(growth: KBGrowth, client: Any, respond: Any, sub_id: str, user_id: str, user_name: str, approve: bool) -> None:
    def tell(text: str, emoji: str = ":warning:") -> None:
        message = kbb.ephemeral(text, emoji)
        respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)

    try:
        if approve:
            approval = growth.approve(sub_id, user_id, user_name)
            sub, applied = approval.submission, approval.applied
            decided = kbb.decided_message(
                approved=True, reviewer_id=user_id, title=sub.title, case_id=applied.written.case.id,
                live_seconds=applied.live_seconds if applied.live else None, path=_short_path(applied.written.path),
                commit=(f"commit {applied.commit.detail}" if applied.commit and applied.commit.ok
                        else (applied.commit.detail if applied.commit else None)),
            )
            notice = kbb.author_notice(approved=True, title=sub.title, case_id=applied.written.case.id, kind=sub.kind,
                                       reviewer_id=user_id)
        else:
            sub = growth.reject(sub_id, user_id)
            decided = kbb.decided_message(approved=False, reviewer_id=user_id, title=sub.title, case_id=None)
            notice = kbb.author_notice(approved=False, title=sub.title, case_id=None, kind=sub.kind, reviewer_id=user_id)
    except PermissionDenied as exc:
        tell(escape(str(exc)), ":lock:")
        return
    except ReviewConflict as exc:
        tell(escape(str(exc)), ":information_source:")
        return
    except InvalidCase as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.problems.items())
        tell(f"This case cannot be written as it stands ({escape_limited(problems, 1500)[0]}). It stays pending; "
             f"ask the author to propose it again.")
        return
    except Exception:
        log.exception("KB review decision failed for %s", sub_id)
        tell("Sorry, that failed on my side; the case stays pending. Try again.", ":rotating_light:")
        return
    updated = False
    for channel, ts in sub.review_messages:
        try:
            client.chat_update(channel=channel, ts=ts, **decided.as_kwargs())
            updated = True
        except SlackApiError as exc:
            log.warning("could not update review message %s/%s: %s", channel, ts, exc.response.get("error"))
    if not updated:
        respond(text=decided.text, blocks=decided.blocks, replace_original=True)
    try:
        client.chat_postMessage(channel=sub.author_id, **notice.as_kwargs())
    except SlackApiError as exc:
        log.warning("could not tell %s about the decision on %s: %s", sub.author_id, sub.id, exc.response.get("error"))


def _short_path(path: Any) -> str:
    parts = str(path).split("/")
    return "/".join(parts[-3:])

