"""Host diagnostics from Slack: the bridge between chat and the diagnose flow (Pipeline.diagnose).

    /vllm-diagnose gpu-01 [check … | tier N]     @bot diagnose gpu-01 (in a thread)
    "Run diagnostics on a host" button → host picker modal

The typed target is only ever looked up in the inventory (bot.runner validates and authorizes it; chat
text never becomes a command). Access rules may name Slack user groups: the asker's membership in those
is looked up through the Web API (usergroups.py). Progress edits the placeholder about once a second;
the result is a summary (one host: its findings; a group: a host × area grid) with the raw outputs as a
file in the thread. The report's host facts are remembered for that thread (thread_facts.py), so a log
pasted there later is explained with them. Without an inventory (VLLM_DOCTOR_INVENTORY) every entry
point answers NOT_CONFIGURED.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.errors import DoctorError, UserInputError
from bot.models import HostRequest
from bot.pipeline import Requester
from bot.present.i18n import Language, case_title, t
from bot.slack.conversation import Where, tell_user
from bot.slack.reply import hosts as host_blocks
from bot.slack.reply import kit
from bot.slack.thread_facts import ThreadHostFacts
from bot.slack.usergroups import UserGroupDirectory, rule_groups

log = logging.getLogger(__name__)

NOT_CONFIGURED = t("slack.host.not_configured", "en")  # both languages in bot/present/i18n.py
MAX_TIER = 2


def load_host_diagnostics(settings: Any, pipeline: Any) -> HostDiagnostics | None:
    """The runner bridge when bot.runner is installed and an inventory is configured, else None."""
    if getattr(settings, "runner_inventory", None) is None:
        return None
    try:
        import bot.runner  # noqa: F401 - presence check; the module is imported again where it is used
    except ImportError:
        return None
    return HostDiagnostics(settings, pipeline)


def parse_args(words: list[str]) -> tuple[list[str] | None, int]:
    """`[check …]` or `tier N` → (check ids or areas, max tier). Raises UserInputError."""
    if len(words) >= 2 and words[0].lower() == "tier":
        if len(words) > 2 or words[1] not in {str(t) for t in range(MAX_TIER + 1)}:
            raise UserInputError(f"`tier` takes one number from 0 to {MAX_TIER}, e.g. `/vllm-diagnose gpu-01 tier 1`")
        return None, int(words[1])
    if words and words[0].lower() == "tier":
        raise UserInputError(f"`tier` takes one number from 0 to {MAX_TIER}, e.g. `/vllm-diagnose gpu-01 tier 1`")
    return (words or None), 0


class HostDiagnostics:
    def __init__(self, settings: Any, pipeline: Any) -> None:
        from bot.runner.access import access_inventory

        access_inventory(settings)  # at start: an access rule naming an unknown host or group is a ConfigError
        self.settings = settings
        # the bot's pipeline under the bot's own settings (inventory, access rules): KB and index shared
        self.pipeline: Any = pipeline.with_settings(settings) if pipeline is not None else None
        self.usergroups = UserGroupDirectory(ttl_s=getattr(settings, "slack_usergroup_cache_s", 60.0))
        self.fleet: Any = None  # bot.slack.fleet.FleetWorker when replicas share a database

    def audit(self) -> Any:
        from bot.runner.audit import AuditLog

        return AuditLog(self.settings.store_target(self.settings.runner_audit_db))

    def _groups(self, client: Any, user: str | None, channel: str | None) -> set[str]:
        wanted = rule_groups(self.settings.runner_access, channel)
        return self.usergroups.groups_of(client, user, wanted) if wanted else set()

    def picker_hint(self, client: Any, user: str | None, channel: str | None, lang: Language = "en") -> str:
        """The names this user may diagnose here; an unauthorised user sees no inventory name at all."""
        from bot.runner.access import visible_names

        try:
            names = visible_names(user or "", channel, self._groups(client, user, channel), self.settings)
        except DoctorError:
            return ""
        shown = ", ".join(names[:12]) + (" …" if len(names) > 12 else "")
        return t("slack.host.you_may", lang, shown=shown) if shown else ""

    def check_target(self, client: Any, user: str | None, channel: str | None, target: str) -> str | None:
        """A one-line problem with the target (shown on the modal field), or None. Says the same for a name
        that does not exist and one this user may not diagnose."""
        from bot.runner.access import access_problem

        problem = access_problem(user or "", channel, self._groups(client, user, channel), target, self.settings)
        return problem[:150] if problem else None

    def start(self, deps: Any, client: Any, where: Where, target: str, args: list[str]) -> None:
        """Validate and authorize now (file reads, and cached user-group look-ups), run on a worker."""
        try:
            checks, tier = parse_args(args)
            groups = self._groups(client, where.user, where.channel)
            request = HostRequest(target, tuple(checks or ()), tier)
            hosts = self.pipeline.authorize(where.user or "", where.channel, groups, request)
        except DoctorError as exc:
            tell_user(client, where, kit.input_error(str(exc)))
            return
        deps.workers.submit(self._run, deps, client, where, request, hosts)

    def _run(self, deps: Any, client: Any, where: Where, request: HostRequest, hosts: list[Any]) -> None:
        target = request.target
        names = [h.name for h in hosts]
        lang: Language = deps.locales.language_of(client, where.user) or "en"
        start = host_blocks.host_progress(target, names, None, lang)
        kwargs: dict[str, Any] = {"channel": where.channel, **start.as_kwargs()}
        if where.thread_ts:
            kwargs["thread_ts"] = where.thread_ts
        try:
            posted = client.chat_postMessage(**kwargs)
        except SlackApiError as exc:
            if where.respond is None:
                raise
            log.info("cannot post host results in %s (%s); using response_url", where.channel, exc.response.get("error"))
            posted = None
        ts = posted["ts"] if posted else None
        channel = posted.get("channel", where.channel) if posted else where.channel
        thread_ts = where.thread_ts or ts
        if self.fleet is not None and ts:  # replicas: one job per host in the shared queue
            self._enqueue(where, channel, ts, request, hosts)
            return
        ticker = _ProgressTicker(client, channel, ts, target, names, deps.settings.slack_update_interval_s, lang)
        if ts:
            ticker.start()
        try:
            report = self.pipeline.diagnose(
                request, hosts=hosts, progress=ticker.note,
                requester=Requester(source="slack", user_id=where.user, channel_id=where.channel),
            )
        except DoctorError as exc:
            ticker.stop()
            message = kit.input_error(str(exc))
            self._finish(client, where, channel, ts, message)
            return
        except Exception:
            ticker.stop()
            ref = secrets.token_hex(4)
            log.exception("host diagnosis of %s failed (ref %s)", target, ref)
            self._finish(client, where, channel, ts, kit.internal_error(ref, lang))
            return
        ticker.stop()
        titles = self.pipeline.case_titles(report.case_ids(), lambda case: case_title(case, lang))
        from bot.slack.attachments import fleet_extras

        notes, pictures = fleet_extras(report, self.settings)
        message = host_blocks.host_report(report, kb_titles=titles, asker=where.user if not where.thread_ts else None,
                                     lang=lang, fleet_notes=notes)
        self._finish(client, where, channel, ts, message)
        if thread_ts and (facts := ThreadHostFacts.from_report(channel, thread_ts, report)) is not None:
            deps.thread_facts.remember(facts)  # a log pasted in this thread is explained with these facts
        if thread_ts and ts:
            try:
                client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=f"diagnose-{target}.txt",
                                       title=t("slack.host.raw_title", lang, target=target), content=report.raw_text())
            except SlackApiError as exc:
                log.warning("raw output upload failed: %s", exc.response.get("error"))
            for filename, png, title in pictures:
                try:
                    client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=filename, title=title, file=png)
                except SlackApiError as exc:
                    log.warning("picture upload failed: %s", exc.response.get("error"))

    def _enqueue(self, where: Where, channel: str, ts: str, request: HostRequest, hosts: list[Any]) -> None:
        """The summary is posted by whichever replica stores the last host's result (bot/slack/fleet.py);
        the placeholder shows no live progress then: its edits could race the summary's."""
        target, checks, tier = request.target, list(request.checks) or None, request.max_tier
        names = [h.name for h in hosts]
        audit_run_id = self.audit().start(user_id=where.user, channel_id=where.channel, source="slack",
                                          target=target, hosts=names, checks=self.pipeline.planned_checks(request),
                                          max_tier=tier)
        spec = {"channel": channel, "ts": ts, "thread_ts": where.thread_ts, "checks": checks, "max_tier": tier,
                "asker": where.user if not where.thread_ts else None}
        self.fleet.queue.enqueue(spec, names, target=target, audit_run_id=audit_run_id)
        self.fleet.poke()

    @staticmethod
    def _finish(client: Any, where: Where, channel: str, ts: str | None, message: kit.Message) -> None:
        if ts:
            client.chat_update(channel=channel, ts=ts, **message.as_kwargs())
        elif where.respond is not None:
            where.respond(text=message.text, blocks=message.blocks, response_type="ephemeral")


class _ProgressTicker:
    """The runner reports progress from its event loop; Slack is edited from this thread instead, at most
    once per interval, so a slow chat.update never stalls the SSH sessions."""

    def __init__(self, client: Any, channel: str, ts: str | None, target: str, hosts: list[str], interval_s: float,
                 lang: Language = "en"):
        self._client, self._channel, self._ts, self._lang = client, channel, ts, lang
        self._target, self._hosts = target, hosts
        self._interval = max(0.2, interval_s)
        self._latest: str | None = None
        self._shown: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-progress", daemon=True)

    def note(self, line: str) -> None:
        self._latest = line

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._done.wait(self._interval):
            latest = self._latest
            if latest is None or latest == self._shown:
                continue
            self._shown = latest
            try:
                message = host_blocks.host_progress(self._target, self._hosts, latest, self._lang)
                self._client.chat_update(channel=self._channel, ts=self._ts, **message.as_kwargs())
            except Exception as exc:  # noqa: BLE001 - progress is best effort
                log.warning("progress update failed: %s", exc)


def start_host_diagnosis(deps: Any, client: Any, where: Where, target: str, args: list[str]) -> None:
    if deps.hosts is None:
        lang: Language = deps.locales.language_of(client, where.user) or "en"
        tell_user(client, where, kit.notice(t("slack.host.not_configured", lang), ":desktop_computer:"))
        return
    deps.hosts.start(deps, client, where, target, args)
