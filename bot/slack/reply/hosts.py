"""Host diagnostics in Slack: the host picker modal, progress while checks run, the report (one host: its
findings; a group: a host × area grid). Pure functions; every host output string is escaped here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.present.i18n import Language, t
from bot.slack.reply.kit import (
    FALLBACK_TEXT_MAX,
    MESSAGE_BLOCKS_MAX,
    SECTION_TEXT_MAX,
    Message,
    _bounded_join,
    _context,
    _section,
)
from bot.slack.reply.mrkdwn import (
    escape,
    escape_limited,
    inline_code,
    plain_limited,
    user_mention,
)

HOST_PICKER_CALLBACK = "host_picker"


HOST_PICKER_BLOCK = "target"


HOST_PICKER_INPUT = "target_input"


def host_picker_view(*, private_metadata: str, hosts_hint: str = "", lang: Language = "en") -> dict[str, Any]:
    """Modal that asks which host or group to check."""
    hint = hosts_hint or t("slack.picker.hint", lang)
    return {
        "type": "modal",
        "callback_id": HOST_PICKER_CALLBACK,
        "private_metadata": private_metadata,
        "title": {"type": "plain_text", "text": t("slack.picker.title", lang)},
        "submit": {"type": "plain_text", "text": t("slack.picker.submit", lang)},
        "close": {"type": "plain_text", "text": t("slack.picker.cancel", lang)},
        "blocks": [
            {
                "type": "input",
                "block_id": HOST_PICKER_BLOCK,
                "label": {"type": "plain_text", "text": t("slack.picker.label", lang)},
                "hint": {"type": "plain_text", "text": plain_limited(hint, 2000)},
                "element": {
                    "type": "plain_text_input",
                    "action_id": HOST_PICKER_INPUT,
                    "max_length": 200,
                    "placeholder": {"type": "plain_text", "text": "gpu-01"},
                },
            }
        ],
    }


_VERDICT_EMOJI = {
    "ok": ":white_check_mark:",
    "warn": ":warning:",
    "fail": ":x:",
    "error": ":exclamation:",
    "timeout": ":stopwatch:",
    "skipped": ":heavy_minus_sign:",
}


_HOST_FIELDS_PER_SECTION = 10


def host_progress(target: str, hosts: Sequence[str], latest: str | None, lang: Language = "en") -> Message:
    shown = ", ".join(hosts[:8]) + (t("slack.host.and_more", lang, n=len(hosts) - 8) if len(hosts) > 8 else "")
    text = f":hourglass_flowing_sand: {t('slack.host.running', lang, target=escape_limited(target, 100)[0])}"
    if len(hosts) > 1:
        text += t("slack.host.running_many", lang, n=len(hosts), shown=escape_limited(shown, 600)[0])
    blocks_: list[dict[str, Any]] = [_section(text, "host_progress")]
    if latest:
        blocks_.append(_context([escape_limited(latest, 300)[0]], "host_latest"))
    return Message(text=t("slack.host.running_fallback", lang, target=escape_limited(target, 100)[0]), blocks=blocks_)


def host_report(report: Any, *, kb_titles: dict[str, str], asker: str | None = None, lang: Language = "en",
                fleet_notes: Sequence[str] = ()) -> Message:
    """One host: its findings. Several hosts: drift from the baseline and hosts that differ from the rest
    first (`fleet_notes`, bot/runner/fleet_view.py), then a host × area grid, then the worst findings."""
    verdict = report.verdict
    hosts = report.hosts
    findings = report.findings()
    head = f"{_VERDICT_EMOJI.get(verdict, '')} *{escape_limited(report.target, 100)[0]}*: "
    problems = len(findings) + sum(1 for h in hosts if h.error)
    checks = sum(len(h.checks) for h in hosts)
    if lang == "zh":
        head += t("slack.host.none", lang) if problems == 0 else t("slack.host.problems", lang, n=problems)
        head += f"（{t('slack.host.counts', lang, hosts=len(hosts), checks=checks, secs=report.duration_s)}）"
    else:
        head += "no problems found" if problems == 0 else f"{problems} problem{'s' if problems != 1 else ''} found"
        head += f" ({len(hosts)} host{'s' if len(hosts) != 1 else ''}, {checks} checks, {report.duration_s:.1f} s)"
    if asker:
        head = f"{user_mention(asker)} {head}"
    out: list[dict[str, Any]] = [_section(head, "host_verdict")]
    cut = False
    if fleet_notes:  # "what changed / what differs" is usually the answer to "works on A, fails on B"
        body, notes_cut = _bounded_join([f":left_right_arrow: {escape_limited(n, 300)[0]}" for n in fleet_notes[:10]],
                                        SECTION_TEXT_MAX, "…")
        cut |= notes_cut or len(fleet_notes) > 10
        out.append(_section(body, "fleet_notes"))

    if len(hosts) > 1:
        fields = []
        for host in hosts:
            name = escape_limited(host.host, 80)[0]
            if host.error:
                body = f"{_VERDICT_EMOJI['error']} *{name}*\n{escape_limited(host.error, 300)[0]}"
            else:
                areas = " · ".join(f"{escape(a)} {_VERDICT_EMOJI.get(v, v)}" for a, v in sorted(host.by_area().items()))
                body = f"{_VERDICT_EMOJI.get(host.verdict, '')} *{name}*\n{areas or t('slack.host.no_checks', lang)}"
            fields.append({"type": "mrkdwn", "text": plain_limited(body, 2000)})
        max_sections = 30  # leaves room for the findings and buttons within 50 blocks
        for i in range(0, len(fields), _HOST_FIELDS_PER_SECTION):
            if i // _HOST_FIELDS_PER_SECTION >= max_sections:
                cut = True
                out.append(_context([t("slack.host.more_hosts", lang, n=len(fields) - i)]))
                break
            out.append({"type": "section", "fields": fields[i : i + _HOST_FIELDS_PER_SECTION]})
    else:
        for host in hosts:
            if host.error:
                out.append(_section(f"{_VERDICT_EMOJI['error']} {t('slack.host.unreachable', lang)} "
                                    f"{escape_limited(host.error, 2500)[0]}", "host_error"))

    if findings:
        lines = []
        for host_name, result in findings:
            where = f"{escape_limited(host_name, 60)[0]} " if len(hosts) > 1 else ""
            line = (f"{_VERDICT_EMOJI.get(result.verdict, '')} {where}{inline_code(result.id, 80)} "
                    f"{escape_limited(result.message, 300)[0]}")
            lines.append(line)
        body, was_cut = _bounded_join(
            [f"*{t('slack.host.findings', lang)}*", *lines], SECTION_TEXT_MAX, f"_{t('slack.host.more', lang)}_"
        )
        cut |= was_cut
        out.append(_section(body, "findings"))
    if kb_titles:
        items = [f"• {escape_limited(title, 200)[0]} ({inline_code(case_id, 100)})" for case_id, title in kb_titles.items()]
        body, _ = _bounded_join([f"*{t('slack.host.cases', lang)}*", *items], SECTION_TEXT_MAX, "…")
        out.append(_section(body, "cases"))
    out.append(_context([t("slack.host.raw", lang)], "raw_note"))
    found = t("slack.host.none", lang) if problems == 0 else t("slack.host.problems", lang, n=problems)
    fallback = f"{report.target}: {found}"
    return Message(text=plain_limited(escape(fallback), FALLBACK_TEXT_MAX), blocks=out[:MESSAGE_BLOCKS_MAX], cut=cut)
