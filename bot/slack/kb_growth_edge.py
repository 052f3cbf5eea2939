"""What the KB-growth listeners share (the Slack edge of bot.kb_growth); the listeners themselves are
one per file: shortcuts/add_to_kb.py, actions/add_kb_case.py, actions/answer_feedback.py,
actions/review_kb_case.py, views/kb_case_form.py, views/kb_case_duplicate.py.

    shortcut / button ─ack─▶ views.open(loading) ─worker─▶ thread (conversations.replies) → draft →
                                                           views.update(form pre-filled)
    form submitted ─ack: errors inline (schema + KB rules), or "checking…"─▶ worker: nearest cases →
                     duplicate choice view, or pending → review requests (channel or reviewers' DMs)
    Approve / Reject ─ack─▶ reviewer check (non-reviewers refused at once) ─worker─▶ write + index →
                     review messages updated, author told by DM

Acks never wait for the engine: trigger_id lives 3 s, and the embedding model may be busy.
`setup(app, deps)` builds the KBGrowth façade once (bot/slack/app.py calls it before any area registers);
the areas hand `growth_of(deps)` to these listeners.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import UserInputError
from bot.kb_growth import KBGrowth
from bot.kb_growth.duplicates import Similar
from bot.kb_growth.growth import LOOP_AUTHOR
from bot.kb_growth.submissions import Submission
from bot.present.i18n import Language, t
from bot.slack.deps import SlackDeps
from bot.slack.files import fetch_file_text
from bot.slack.heuristics import looks_like_error_log
from bot.slack.incoming import slack_to_plain
from bot.slack.reply import kb_growth as kbb

log = logging.getLogger(__name__)

MAX_EXTRA_EXAMPLES = 2
ERROR_TEXT_MAX = 500
_DOMAIN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class Source:
    """Where a proposed case comes from."""

    channel: str
    ts: str | None  # the message itself (None: find it in the thread)
    thread_ts: str | None  # root of its thread, when it has one
    text: str
    files: list[dict[str, Any]] = field(default_factory=list)
    author_id: str = ""
    author_name: str = ""
    team_domain: str = ""


def setup(app: Any, deps: SlackDeps) -> KBGrowth:
    """deps.kb_growth, built from settings unless given (tests, server.py); warmed on a worker."""
    growth = deps.kb_growth or KBGrowth.from_settings(deps.settings, deps.pipeline, group_members=_group_lookup(app.client))
    deps.kb_growth = growth  # answers read outcomes and note unknown logs through it (conversation.py)
    deps.workers.submit(_warm, growth)
    return growth


def _warm(growth: KBGrowth) -> None:
    """Distil the healthy logs and the KB examples once, so the first form check fits in the 3 s ack."""
    _ = growth.healthy
    for case in growth.pipeline.kb.cases[:1]:
        growth.lint(case, replacing=case.id)


def _group_lookup(client: Any) -> Callable[[str], Collection[str]]:
    def members(group_id: str) -> Collection[str]:
        return list(client.usergroups_users_list(usergroup=group_id).get("users") or [])

    return members


def user_of(body: dict[str, Any]) -> tuple[str, str]:
    user = body.get("user") or {}
    return str(user.get("id") or ""), str(user.get("name") or user.get("username") or "")


def growth_of(deps: SlackDeps) -> KBGrowth:
    """The façade `setup` put on deps, for the areas that register the KB-growth listeners."""
    growth: KBGrowth | None = deps.kb_growth
    if growth is None:
        raise RuntimeError("bot.slack.kb_growth_edge.setup(app, deps) must run before the listeners register")
    return growth


def language_of(deps: SlackDeps, client: Any, user_id: str | None) -> Language:
    """The clicking user's language (Slack locale, cached); the form has no text of theirs to go by."""
    return deps.locales.language_of(client, user_id) or "en"


def prefill(deps: SlackDeps, growth: KBGrowth, client: Any, view_id: str, source: Source,
            lang: Language = "en") -> None:
    try:
        thread = _thread(client, source)
        text, ts, files = source.text, source.ts, list(source.files)
        if not ts or not (text.strip() or files):  # the button: the log is the thread's first human message
            first = next((m for m in thread if _human(m, deps)), None)
            if first is not None:
                text, ts, files = slack_to_plain(first.get("text") or ""), first.get("ts"), list(first.get("files") or [])
        for file in files[:2]:
            try:
                shared = fetch_file_text(client, file, token=deps.bot_token, api_url=deps.settings.slack_api_url,
                                         limit=deps.max_bytes)
                text = f"{text}\n{shared.text}" if text.strip() else shared.text
            except UserInputError as exc:
                log.info("KB form: skipping a shared file: %s", exc)
        if not text.strip():
            client.views_update(view_id=view_id, view=kbb.notice_view(t("kbform.no_log", lang), lang=lang))
            return
        more = [
            (_permalink(client, source, m.get("ts", "")), slack_to_plain(m.get("text") or ""))
            for m in thread
            if m.get("ts") != ts and _human(m, deps) and looks_like_error_log(slack_to_plain(m.get("text") or ""))
        ][:MAX_EXTRA_EXAMPLES]
        draft = growth.draft_from_log(
            text,
            author_id=source.author_id,
            author_name=source.author_name,
            channel=source.channel,
            message_ts=ts,
            permalink=_permalink(client, source, ts or ""),
            more_examples=more,
        )
        note = t("kbform.source", lang, channel=source.channel) + (t("kbform.source_more", lang, n=len(more)) if more else "")
        client.views_update(view_id=view_id, view=kbb.case_form_view(draft.submission.id, draft.form, draft.nearest, note,
                                                                     lang))
    except Exception:
        log.exception("could not pre-fill the KB case form")
        safe_update(client, view_id, kbb.notice_view(t("kbform.read_failed", lang), lang=lang))


def _human(message: dict[str, Any], deps: SlackDeps) -> bool:
    return not message.get("bot_id") and message.get("user") not in (None, deps.bot_user_id) and not message.get("subtype")


def _thread(client: Any, source: Source) -> list[dict[str, Any]]:
    root = source.thread_ts or source.ts
    if not root or not source.channel:
        return []
    try:
        return list(client.conversations_replies(channel=source.channel, ts=root, limit=50).get("messages") or [])
    except SlackApiError as exc:  # not in the channel, no history scope: the message itself still works
        log.info("conversations.replies %s/%s: %s", source.channel, root, exc.response.get("error"))
        return []


def _permalink(client: Any, source: Source, ts: str) -> str:
    if ts:
        try:
            link = client.chat_getPermalink(channel=source.channel, message_ts=ts).get("permalink")
            if isinstance(link, str) and link.startswith("https://"):
                return link
        except SlackApiError as exc:
            log.debug("chat.getPermalink failed: %s", exc.response.get("error"))
    domain = source.team_domain if _DOMAIN_RE.match(source.team_domain or "") else ""
    base = f"https://{domain}.slack.com" if domain else "https://slack.com"
    return f"{base}/archives/{source.channel}/p{ts.replace('.', '')}" if ts else f"{base}/archives/{source.channel}"


def safe_update(client: Any, view_id: str, view: dict[str, Any]) -> None:
    try:
        client.views_update(view_id=view_id, view=view)
    except SlackApiError as exc:  # the author closed the modal: nothing to update
        log.info("views.update %s: %s", view_id, exc.response.get("error"))


def request_review(deps: SlackDeps, growth: KBGrowth, client: Any, sub: Submission) -> None:
    channel = deps.settings.kb_review_channel
    targets = [channel] if channel else growth.reviewers.reviewers()[:10]
    if not targets:
        log.warning("KB submission %s is pending but no reviewers are configured", sub.id)
        return
    nearest = [Similar(**s) for s in sub.report.get("nearest", [])]
    message = kbb.review_message(
        submission_id=sub.id,
        kind=sub.kind,
        author_id=sub.author_id,
        case=sub.case or {},
        target_case=sub.target_case,
        nearest=nearest,
        warnings=sub.report.get("warnings", []),
        permalink=sub.permalink,
        editable=sub.author_id == LOOP_AUTHOR,
    )
    for target in targets:
        try:
            resp = client.chat_postMessage(channel=target, **message.as_kwargs())
            growth.submissions.add_review_message(sub.id, str(resp.get("channel") or target), str(resp["ts"]))
        except SlackApiError as exc:
            log.warning("could not post the review request for %s to %s: %s", sub.id, target, exc.response.get("error"))



def note_unknown(deps: SlackDeps, client: Any, *, answer_id: str, diagnosis: Any, evidence: str, channel: str,
                 user_id: str | None, thread_ts: str | None) -> None:
    """After an answer: an unknown paste is kept (redacted) with its root line, component, thread link and
    versions; a cluster of them that reached the draft threshold is posted to the reviewers as a drafted case
    (the review flow: Approve accepts it, Reject dismisses it)."""
    from bot.diagnosis.versions import known_versions

    growth = deps.kb_growth
    if growth is None:
        return
    root = getattr(diagnosis, "root", None)
    versions = {k: str(v.version) for k, v in known_versions(getattr(diagnosis, "facts", None)).items()}
    link = f"https://slack.com/archives/{channel}/p{thread_ts.replace('.', '')}" if thread_ts else None
    growth.note_answer(answer_id=answer_id, verdict=diagnosis.verdict, evidence=evidence, channel=channel,
                       user_id=user_id, root_text=root.text if root else None,
                       component=root.component if root else None,
                       thread=f"{channel}/{thread_ts}" if thread_ts else None, permalink=link, versions=versions)
    if diagnosis.verdict == "match":
        return
    for sub in growth.propose_drafts():
        request_review(deps, growth, client, sub)
