"""Messages: every DM to the bot, and error-log-looking messages in the configured watch channels.

Mentions are left to app_mention (Slack sends both events for one message); edits, deletions, joins and
other bots' messages are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bot.diagnosis.question import is_deployment_question, question_language
from bot.present.i18n import t
from bot.slack.conversation import LogRequest, Where, diagnose_and_answer, tell_user
from bot.slack.deps import SlackDeps
from bot.slack.heuristics import looks_like_error_log
from bot.slack.incoming import mentions_user, slack_to_plain
from bot.slack.locale import answer_language
from bot.slack.reply import kit
from kb.glossary import default_glossary

_ANSWERED_SUBTYPES = {None, "file_share", "thread_broadcast"}
_LOG_FILE_RE = re.compile(r"\.(?:log|txt|out|err|text)$|log|trace|error", re.I)
_ERRORISH_RE = re.compile(r"error|exception|traceback|fail|warn|oom|out of memory|killed|abort|fatal|xid|nccl|cuda", re.I)


def message(deps: SlackDeps) -> Callable[..., None]:
    def on_message(event: dict[str, Any], client: Any, context: Any) -> None:
        if event.get("subtype") not in _ANSWERED_SUBTYPES or event.get("bot_id"):
            return
        bot_user_id = context.get("bot_user_id") or deps.bot_user_id
        if event.get("user") in (None, bot_user_id):
            return
        text = event.get("text", "") or ""
        files = event.get("files") or []
        is_dm = event.get("channel_type") == "im"
        if mentions_user(text, bot_user_id) and not is_dm:
            return  # app_mention answers it
        where = Where(channel=event["channel"], user=event.get("user"), thread_ts=event.get("thread_ts") or event["ts"])
        plain = slack_to_plain(text)
        if is_dm:
            if (files or _ERRORISH_RE.search(plain) or looks_like_error_log(plain)
                    or is_deployment_question(plain, default_glossary())):
                deps.workers.submit(diagnose_and_answer, deps, client, LogRequest(where, plain, files))
            else:
                lang = answer_language(deps.locales.language_of(client, where.user), question_language(plain))
                tell_user(client, where, kit.notice(t("slack.usage.dm", lang)))
            return
        if event["channel"] in deps.watch_channels:
            log_files = [f for f in files if _LOG_FILE_RE.search(str(f.get("name") or f.get("title") or ""))]
            text_is_log = looks_like_error_log(plain)
            if text_is_log or log_files:
                # a file named like a log is only answered if its content turns out to be an error log
                request = LogRequest(where, plain, log_files, only_if_log_like=not text_is_log)
                deps.workers.submit(diagnose_and_answer, deps, client, request)

    return on_message
