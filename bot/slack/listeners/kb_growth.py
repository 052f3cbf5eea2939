"""Growing the KB from Slack: the "Add to vLLM KB" message shortcut, the "Add as a KB case" button, the
case form and its duplicate check, review by reviewers, and "Fixed it" / "Didn't help" on every answer.

    shortcut / button ─ack─▶ views.open(loading) ─worker─▶ thread (conversations.replies) → draft →
                                                           views.update(form pre-filled)
    form submitted ─ack: errors inline (schema + KB rules), or "checking…"─▶ worker: nearest cases →
                     duplicate choice view, or pending → review requests (channel or reviewers' DMs)
    Approve / Reject ─ack─▶ reviewer check (non-reviewers refused at once) ─worker─▶ write + index →
                     review messages updated, author told by DM

Acks never wait for the engine: trigger_id lives 3 s, and the embedding model may be busy.
Registered BEFORE the Slack helper's placeholder listeners for the same buttons (bolt runs the first
matching listener), see bot/slack/app.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import InvalidCase, PermissionDenied, ReviewConflict, UserInputError
from bot.i18n import Language, t
from bot.kb_growth import KBGrowth
from bot.kb_growth.duplicates import Similar
from bot.kb_growth.submissions import Submission
from bot.slack.deps import SlackDeps
from bot.slack.files import fetch_file_text
from bot.slack.heuristics import looks_like_error_log
from bot.slack.incoming import slack_to_plain
from bot.slack.reply import kb_growth as kbb
from bot.slack.reply import kit
from bot.slack.reply.mrkdwn import escape, escape_limited, user_mention

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


def register(app: Any, deps: SlackDeps, growth: KBGrowth | None = None) -> KBGrowth:
    growth = growth or KBGrowth.from_settings(deps.settings, deps.pipeline, group_members=_group_lookup(app.client))
    deps.kb_growth = growth  # answers read outcomes and note unknown logs through it (conversation.py)
    deps.workers.submit(_warm, growth)
    app.shortcut(kbb.SHORTCUT_ADD_TO_KB)(_open_from_shortcut(deps, growth))
    app.action(kit.ACTION_ADD_KB_CASE)(_open_from_answer(deps, growth))
    app.action(kit.ACTION_FIXED)(_feedback(deps, growth, "fixed"))
    app.action(kit.ACTION_NOT_HELPFUL)(_feedback(deps, growth, "not_helpful"))
    app.view(kbb.VIEW_CASE_FORM)(_form_submitted(deps, growth))
    app.view(kbb.VIEW_DUPLICATE)(_duplicate_chosen(deps, growth))
    app.action(kbb.ACTION_REVIEW_APPROVE)(_review(deps, growth, approve=True))
    app.action(kbb.ACTION_REVIEW_REJECT)(_review(deps, growth, approve=False))
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


def _user(body: dict[str, Any]) -> tuple[str, str]:
    user = body.get("user") or {}
    return str(user.get("id") or ""), str(user.get("name") or user.get("username") or "")


# --- opening the form ----------------------------------------------------------------------------------------


def _open_from_shortcut(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_add_to_kb(ack: Any, shortcut: dict[str, Any], client: Any) -> None:
        ack()
        message = shortcut.get("message") or {}
        author_id, author_name = _user(shortcut)
        source = Source(
            channel=(shortcut.get("channel") or {}).get("id", ""),
            ts=message.get("ts"),
            thread_ts=message.get("thread_ts"),
            text=slack_to_plain(message.get("text") or ""),
            files=list(message.get("files") or []),
            author_id=author_id,
            author_name=author_name,
            team_domain=str((shortcut.get("team") or {}).get("domain") or ""),
        )
        lang = _lang(deps, client, author_id)
        view_id = client.views_open(trigger_id=shortcut["trigger_id"], view=kbb.loading_view(lang))["view"]["id"]
        deps.workers.submit(_prefill, deps, growth, client, view_id, source, lang)

    return on_add_to_kb


def _open_from_answer(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_add_kb_case(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any) -> None:
        ack()
        record = deps.recent.get(str(action.get("value") or ""))
        message = body.get("message") or {}
        container = body.get("container") or {}
        channel = (record.channel_id if record else None) or (body.get("channel") or {}).get("id") or container.get("channel_id", "")
        root = (record.thread_ts if record else None) or message.get("thread_ts") or container.get("thread_ts")
        author_id, author_name = _user(body)
        source = Source(
            channel=channel,
            ts=None,
            thread_ts=root,
            text="",
            author_id=author_id,
            author_name=author_name,
            team_domain=str((body.get("team") or {}).get("domain") or ""),
        )
        lang = _lang(deps, client, author_id)
        view_id = client.views_open(trigger_id=body["trigger_id"], view=kbb.loading_view(lang))["view"]["id"]
        deps.workers.submit(_prefill, deps, growth, client, view_id, source, lang)

    return on_add_kb_case


def _lang(deps: SlackDeps, client: Any, user_id: str | None) -> Language:
    """The clicking user's language (Slack locale, cached); the form has no text of theirs to go by."""
    return deps.locales.language_of(client, user_id) or "en"


def _prefill(deps: SlackDeps, growth: KBGrowth, client: Any, view_id: str, source: Source,
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
        _safe_update(client, view_id, kbb.notice_view(t("kbform.read_failed", lang), lang=lang))


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


def _safe_update(client: Any, view_id: str, view: dict[str, Any]) -> None:
    try:
        client.views_update(view_id=view_id, view=view)
    except SlackApiError as exc:  # the author closed the modal: nothing to update
        log.info("views.update %s: %s", view_id, exc.response.get("error"))


# --- the form and the duplicate choice -------------------------------------------------------------------------


def _form_submitted(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    form_blocks = {"title", "title_zh", "area", "severity", "cause", "fix", "signatures", "examples", "references"}

    def on_case_form(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        sub_id = str(view.get("private_metadata") or "")
        form = kbb.form_from_state((view.get("state") or {}).get("values") or {})
        try:
            case, _report = growth.validate(form)
        except InvalidCase as exc:
            errors: dict[str, str] = {}
            for name, message in exc.problems.items():
                errors.setdefault(name if name in form_blocks else "title", message[:ERROR_TEXT_MAX])
            ack(response_action="errors", errors=errors)
            return
        lang = _lang(deps, client, _user(body)[0])
        ack(response_action="update", view=kbb.checking_view(sub_id, lang))
        deps.workers.submit(_check_and_route, deps, growth, client, (body.get("view") or {}).get("id", ""), sub_id, case,
                            lang)

    return on_case_form


def _check_and_route(deps: SlackDeps, growth: KBGrowth, client: Any, view_id: str, sub_id: str, case: Any,
                     lang: Language = "en") -> None:
    try:
        checked = growth.check(case)
        growth.stage(sub_id, checked)
        if checked.duplicates:
            warnings = [w.message for w in checked.report.warnings]
            _safe_update(client, view_id, kbb.duplicate_view(sub_id, checked.case.title, checked.duplicates, warnings,
                                                             lang))
            return
        sub = growth.submit(sub_id, "new")
        _safe_update(client, view_id, kbb.submitted_view(kind=sub.kind, title=sub.title, target_case=None,
                                                         reviewers_configured=growth.reviewers.configured, lang=lang))
        _request_review(deps, growth, client, sub)
    except (UserInputError, ReviewConflict) as exc:
        _safe_update(client, view_id, kbb.notice_view(str(exc), lang=lang))
    except Exception:
        log.exception("KB case check failed for submission %s", sub_id)
        _safe_update(client, view_id, kbb.notice_view(t("kbform.check_failed", lang), lang=lang))


def _duplicate_chosen(deps: SlackDeps, growth: KBGrowth) -> Callable[..., None]:
    def on_duplicate_choice(ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
        sub_id = str(view.get("private_metadata") or "")
        choice = kbb.choice_from_state((view.get("state") or {}).get("values") or {})
        try:
            sub = growth.submit(sub_id, choice)
        except UserInputError as exc:
            ack(response_action="errors", errors={kbb.CHOICE_BLOCK: str(exc)[:ERROR_TEXT_MAX]})
            return
        ack(response_action="update", view=kbb.submitted_view(
            kind=sub.kind, title=sub.title, target_case=sub.target_case, reviewers_configured=growth.reviewers.configured,
            lang=_lang(deps, client, _user(body)[0])))
        deps.workers.submit(_request_review, deps, growth, client, sub)

    return on_duplicate_choice


def _request_review(deps: SlackDeps, growth: KBGrowth, client: Any, sub: Submission) -> None:
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
    )
    for target in targets:
        try:
            resp = client.chat_postMessage(channel=target, **message.as_kwargs())
            growth.submissions.add_review_message(sub.id, str(resp.get("channel") or target), str(resp["ts"]))
        except SlackApiError as exc:
            log.warning("could not post the review request for %s to %s: %s", sub.id, target, exc.response.get("error"))


# --- review ------------------------------------------------------------------------------------------------


def _review(deps: SlackDeps, growth: KBGrowth, *, approve: bool) -> Callable[..., None]:
    def on_review(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any, respond: Any) -> None:
        ack()
        user_id, user_name = _user(body)
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


# --- feedback ----------------------------------------------------------------------------------------------


def _feedback(deps: SlackDeps, growth: KBGrowth, value: str) -> Callable[..., None]:
    def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any, client: Any) -> None:
        ack()
        user_id, _ = _user(body)
        lang = _lang(deps, client, user_id)
        answer_id = str(action.get("value") or "")
        record = deps.recent.record_feedback(answer_id, user_id, value)  # type: ignore[arg-type]
        if record is None:
            said = t("kbform.said_fixed" if value == "fixed" else "kbform.said_not_helpful", lang)
            message = kbb.ephemeral(t("kbform.too_old", lang, said=said), ":pray:")
            respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            return
        channel = record.channel_id or (body.get("channel") or {}).get("id", "")
        result = growth.vote(
            answer_id=answer_id, user_id=user_id, value=value,  # type: ignore[arg-type]
            case_id=record.case_id, verdict=record.verdict, channel=channel, evidence=record.evidence,
        )
        log.info("feedback answer=%s case=%s user=%s value=%s", answer_id, record.case_id, user_id, value)
        outcome = result.outcome.text() if result.outcome else None
        message = kbb.feedback_thanks(value=value, case_id=record.case_id, outcome=outcome, changed_from=result.previous,
                                      lang=lang)
        respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)

    return on_feedback


__all__ = ["Source", "register"]
