"""One diagnosis conversation in Slack, whatever the entry point (DM, mention, watch channel, file,
/vllm-explain, message shortcut): placeholder in the thread → pipeline → answer → LLM text edited in
progressively (with the host facts of the thread's last host diagnosis, if any) → long material as a
file in the thread. Runs on a worker thread, never in an ack path.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slack_sdk.errors import SlackApiError

from bot import errors
from bot.diagnosis.paste import Paste, decode_input
from bot.diagnosis.question import question_language
from bot.models import Diagnosis
from bot.ops import metrics
from bot.present.i18n import Language, t
from bot.slack import delivery as deliveries
from bot.slack.deps import SlackDeps
from bot.slack.files import check_text_size, fetch_file_text
from bot.slack.heuristics import looks_like_error_log
from bot.slack.kb_growth_edge import note_unknown
from bot.slack.locale import answer_language
from bot.slack.progress import ThrottledUpdater
from bot.slack.recent import AnswerRecord
from bot.slack.reply import answer as blocks
from bot.slack.reply import kit
from bot.slack.reply.kit import Message

log = logging.getLogger(__name__)

# chat.postMessage errors after which the response_url (if we have one) is the only way to answer
_CANNOT_POST = {"not_in_channel", "channel_not_found", "is_archived", "restricted_action"}


@dataclass(frozen=True)
class Where:
    """Where a request came from and where its answer goes."""

    channel: str
    user: str | None
    thread_ts: str | None  # None: post the answer top-level (slash command); it becomes the thread root
    respond: Callable[..., Any] | None = None  # response_url sender (commands, shortcuts, actions)


@dataclass(frozen=True)
class LogRequest:
    where: Where
    text: str = ""
    files: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    mention_asker: bool = False  # slash commands: nobody else sees who asked
    only_if_log_like: bool = False  # watch channel with a shared file: answer only if the file is a log


def tell_user(client: Any, where: Where, message: Message) -> None:
    """An ephemeral note to the asker only: via response_url when we have one, else chat.postEphemeral,
    else (no user) a thread reply."""
    if where.respond is not None:
        where.respond(text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
        return
    if where.user:
        kwargs: dict[str, Any] = {"channel": where.channel, "user": where.user, **message.as_kwargs()}
        if where.thread_ts:
            kwargs["thread_ts"] = where.thread_ts
        client.chat_postEphemeral(**kwargs)
        return
    client.chat_postMessage(channel=where.channel, thread_ts=where.thread_ts, **message.as_kwargs())


def gather_text(deps: SlackDeps, client: Any, request: LogRequest) -> Paste:
    """The message text plus the text of any shared files, size-checked and redacted (bot.diagnosis.paste): from
    here on only the redacted text exists. Raises UserInputError."""
    parts = [request.text] if request.text.strip() else []
    for file in request.files:
        shared = fetch_file_text(
            client, file, token=deps.bot_token, api_url=deps.settings.slack_api_url, limit=deps.max_bytes
        )
        parts.append(shared.text)
    text = "\n".join(parts)
    if not text.strip():
        raise errors.EmptyInput("I did not find any log text in that message. Paste the error log (or attach it as a file).")
    check_text_size(text, deps.max_bytes, "That log")
    return decode_input(text, deps.max_bytes)


def diagnose_and_answer(deps: SlackDeps, client: Any, request: LogRequest) -> str | None:
    """The whole conversation. Returns the answer id (None when the input was refused)."""
    where = request.where
    try:
        paste = gather_text(deps, client, request)
    except errors.UserInputError as exc:
        if not request.only_if_log_like:  # nobody asked: stay quiet
            tell_user(client, where, kit.input_error(str(exc)))
        return None
    if not looks_like_error_log(paste.text):
        _keep_if_healthy(deps, where.channel, paste)
        if request.only_if_log_like:
            return None

    locale = deps.locales.language_of(client, where.user)
    post = _Poster(client, where, deps.settings.slack_update_interval_s)
    first_lang = answer_language(locale, question_language(paste.text))
    post.placeholder(blocks.placeholder(lang=first_lang), lang=first_lang)

    # a host diagnosed earlier in this thread: its versions are read against the cases' fixed_in, its
    # check results go into the LLM prompt
    host = deps.thread_facts.lookup(where.channel, where.thread_ts)
    try:
        diagnosis = deps.pipeline.match(paste, host_versions=host.versions if host else None,
                                        host_label=host.label if host else "", host_gpus=host.gpus if host else None)
    except errors.UserInputError as exc:
        post.retract()
        tell_user(client, where, kit.input_error(str(exc)))
        return None
    except Exception:
        ref = secrets.token_hex(4)
        log.exception("diagnosis failed (ref %s) channel=%s thread=%s", ref, where.channel, where.thread_ts)
        post.final(kit.internal_error(ref, answer_language(locale, question_language(paste.text))))
        return None

    if diagnosis.root is None and getattr(diagnosis, "kind", "log") == "log":  # a start-up log with warnings
        _keep_if_healthy(deps, where.channel, paste, diagnosis)
    metrics.VERDICTS.labels(verdict=diagnosis.verdict).inc()
    answer_id = deps.recent.new_id()
    lang = answer_language(locale, diagnosis.distilled.language)
    best = diagnosis.best
    case = _case_or_none(deps, best.case_id) if best else None
    explain = deps.llm_enabled and diagnosis.verdict != "unknown"
    asker = where.user if request.mention_asker else None

    outcome = _outcome(deps, best.case_id) if best else None
    host = host if explain else None
    host_note = blocks.host_facts_note(host.label, host.created) if host else None

    since = _since_working_run(deps, where.channel, diagnosis)

    def build(**kw: Any) -> Message:
        return blocks.answer(diagnosis, answer_id=answer_id, case=case, asker=asker, outcome=outcome,
                             host_facts_note=host_note, language=lang, since=since, **kw)

    first = build(llm_pending=explain)
    record = AnswerRecord(
        answer_id=answer_id,
        user_id=where.user,
        channel_id=where.channel,
        thread_ts=post.thread_ts,
        message_ts=post.ts,
        verdict=diagnosis.verdict,
        case_id=best.case_id if best and diagnosis.verdict != "unknown" else None,
        title=best.title if best and diagnosis.verdict != "unknown" else None,
        evidence=blocks.evidence_text(diagnosis),
    )
    deps.recent.add(record)  # before its buttons exist: a quick press (or another replica) must find it
    post.final(first, progressive=explain)
    if (post.thread_ts, post.ts) != (record.thread_ts, record.message_ts):  # no placeholder: posted just now
        current = deps.recent.get(answer_id) or record
        deps.recent.add(replace(current, thread_ts=post.thread_ts, message_ts=post.ts))
    if deps.kb_growth is not None:
        try:  # logs the KB could not explain become candidates for new cases
            note_unknown(deps, client, answer_id=answer_id, diagnosis=diagnosis, evidence=blocks.evidence_text(diagnosis),
                         channel=where.channel, user_id=where.user, thread_ts=post.thread_ts)
        except Exception:  # noqa: BLE001 - bookkeeping must not cost the user the answer
            log.exception("could not note answer %s in the KB store", answer_id)
    if first.cut:
        post.file(f"distilled-{answer_id}.log", _distilled_file(diagnosis), t("slack.file.distilled", lang))

    if explain:
        _stream_explanation(deps, diagnosis, build, post, list(host.facts) if host else None, lang)
    _attach_files(deps, diagnosis, post, answer_id, lang)
    return answer_id


def _keep_if_healthy(deps: SlackDeps, channel: str, paste: Paste, diagnosis: Diagnosis | None = None) -> None:
    """A healthy start-up log is kept as the channel's working run of its model (bot/slack/healthy_runs.py).
    With the paste's diagnosis at hand its distillation and facts are reused, not computed again."""
    try:
        if diagnosis is not None and diagnosis.facts is not None:
            from bot.diagnosis.since import healthy_startup

            if healthy_startup(paste.text, diagnosis.distilled, diagnosis.facts):
                deps.healthy_runs.remember(channel, paste.text, diagnosis.facts)
            return
        healthy = deps.pipeline.healthy_startup(paste)
        if healthy is not None:
            deps.healthy_runs.remember(channel, *healthy)
    except Exception:  # noqa: BLE001 - bookkeeping must not cost the user the answer
        log.exception("could not keep a healthy start-up log of channel %s", channel)


def _since_working_run(deps: SlackDeps, channel: str, diagnosis: Diagnosis) -> tuple[list[Any], float] | None:
    """What differs from the channel's last healthy start-up of the failing log's model, if one was pasted."""
    if getattr(diagnosis, "kind", "log") == "question" or diagnosis.facts is None:
        return None
    try:
        good = deps.healthy_runs.lookup(channel, diagnosis.facts.model)
        if good is None:
            return None
        from bot.diagnosis.since import what_changed

        return what_changed(deps.pipeline.facts_of(good.text()), diagnosis.facts), good.created
    except Exception:  # noqa: BLE001 - the comparison is extra; the diagnosis stands without it
        log.exception("could not compare with the working run in channel %s", channel)
        return None


def _attach_files(deps: SlackDeps, diagnosis: Diagnosis, post: _Poster, answer_id: str, lang: Language = "en") -> None:
    """After the text answer (and the LLM's) is posted: the memory picture and, for a log the KB could not
    explain, a bug-report draft. Best effort: a failure here costs the file, never the answer."""
    from bot.slack import attachments

    try:
        picture = attachments.memory_png(diagnosis)
        if picture is not None:
            png, title = picture
            post.file(f"gpu-memory-{answer_id}.png", png, title)
        if attachments.wants_draft(diagnosis):
            text = attachments.draft_text(diagnosis, attachments.feedback_of(deps.kb_growth, diagnosis))
            post.file(f"vllm-issue-draft-{answer_id}.md", text, t("draft.posted", lang))
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("could not attach files to answer %s", answer_id)


def _stream_explanation(deps: SlackDeps, diagnosis: Diagnosis, build: Callable[..., Message], post: _Poster,
                        host_facts: list[str] | None, lang: Language) -> None:
    streamed = ""
    explanation: Any = None
    try:
        for piece in deps.pipeline.explain_stream(diagnosis, host_facts=host_facts, language=lang):
            if isinstance(piece, str):
                streamed += piece
                post.progress(functools.partial(build, streaming_text=streamed))
            else:
                explanation = piece
    except Exception:  # the pipeline promises KB-only on LLM trouble; anything else must not lose the answer
        log.exception("explanation failed; keeping the KB answer")
    final = build(explanation=explanation) if explanation is not None else build()
    post.final(final)
    if explanation is not None and final.cut:
        body = "\n\n".join(
            p for p in (getattr(explanation, "summary", ""), getattr(explanation, "why", "")) if p
        )
        post.file("explanation.md", body, t("slack.file.explanation", lang))


def _outcome(deps: SlackDeps, case_id: str) -> str | None:
    if deps.kb_growth is None:
        return None
    try:
        text: str | None = deps.kb_growth.outcome_text(case_id)
        return text
    except Exception:  # noqa: BLE001 - the answer goes out without the feedback line
        log.exception("could not read feedback for %s", case_id)
        return None


def _case_or_none(deps: SlackDeps, case_id: str) -> Any:
    try:
        return deps.pipeline.case(case_id)
    except Exception:  # noqa: BLE001 - a case missing from the KB only costs the fix section
        log.warning("case %s not found in the KB", case_id)
        return None


def _distilled_file(diagnosis: Diagnosis) -> str:
    d = diagnosis.distilled
    lines = d.cleaned or d.evidence
    head = [f"# {d.total_lines} lines, {d.total_bytes} bytes pasted; {len(lines)} kept after cleaning", *d.notes, ""]
    return "\n".join([*head, *(f"{ln.line_no:>6}  {ln.text}" for ln in lines)]) + "\n"


class _Poster:
    """Posts one answer message and edits it; falls back to the response_url when the bot cannot post
    in the channel (not a member, private channel, a DM between two other people)."""

    def __init__(self, client: Any, where: Where, update_interval_s: float) -> None:
        self._client = client
        self._where = where
        self._interval = update_interval_s
        self.channel = where.channel
        self.ts: str | None = None
        self.thread_ts: str | None = where.thread_ts
        self._updater: ThrottledUpdater | None = None
        self._via_response_url = False

    def placeholder(self, message: Message, lang: Language = "en") -> None:
        where = self._where
        delivery = deliveries.current()
        earlier = delivery.placeholder if delivery is not None else None
        if earlier is not None:  # taken over from a replica that died or stopped: its message gets the answer
            try:
                self._client.chat_update(channel=earlier[0], ts=earlier[1], **message.as_kwargs())
            except SlackApiError as exc:
                log.warning("could not reuse placeholder %s (%s); posting a new one", earlier[1],
                            exc.response.get("error"))
            else:
                self.channel, self.ts = earlier
                if self.thread_ts is None:
                    self.thread_ts = self.ts
                return
        kwargs: dict[str, Any] = {"channel": where.channel, **message.as_kwargs()}
        if where.thread_ts:
            kwargs["thread_ts"] = where.thread_ts
        try:
            response = self._client.chat_postMessage(**kwargs)
        except SlackApiError as exc:
            if where.respond is None or exc.response.get("error") not in _CANNOT_POST:
                raise
            log.info("cannot post in %s (%s); answering through response_url", where.channel, exc.response.get("error"))
            self._via_response_url = True
            where.respond(text=message.text, blocks=message.blocks, response_type="ephemeral")
            return
        self.ts = response["ts"]
        self.channel = response.get("channel", where.channel)
        if self.thread_ts is None:
            self.thread_ts = self.ts  # a top-level answer becomes the thread for files and follow-ups
        if delivery is not None and self.ts:
            delivery.note_placeholder(self.channel, self.ts, lang)

    def final(self, message: Message, progressive: bool = False) -> None:
        if self._via_response_url:
            assert self._where.respond is not None
            self._where.respond(text=message.text, blocks=message.blocks, replace_original=True)
            return
        assert self.ts is not None
        self._client.chat_update(channel=self.channel, ts=self.ts, **message.as_kwargs())
        if progressive:
            self._updater = ThrottledUpdater(self._client, self.channel, self.ts, self._interval)

    def progress(self, build: Callable[[], Message]) -> None:
        if self._updater is not None:
            self._updater.maybe_update(build)

    def retract(self) -> None:
        if self._via_response_url:
            assert self._where.respond is not None  # _via_response_url is set only when it is
            self._where.respond(delete_original=True)
            return
        if self.ts:
            try:
                self._client.chat_delete(channel=self.channel, ts=self.ts)
            except SlackApiError as exc:
                log.warning("could not delete placeholder %s: %s", self.ts, exc.response.get("error"))

    def file(self, filename: str, content: str | bytes, title: str) -> None:
        """A text (content) or binary (a PNG) file in the answer's thread."""
        if self._via_response_url or not self.thread_ts:
            return  # no thread to put it in; the message says what was cut
        body = {"file": content} if isinstance(content, bytes) else {"content": content}
        try:
            self._client.files_upload_v2(
                channel=self.channel, thread_ts=self.thread_ts, filename=filename, title=title, **body
            )
        except SlackApiError as exc:
            log.warning("file upload to %s failed: %s", self.channel, exc.response.get("error"))
