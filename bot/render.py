"""Diagnosis → terminal text (the CLI's human output), in the answer's language. Pure; golden-tested."""

from __future__ import annotations

from typing import Any

from bot.facts import fact_lines
from bot.fix_values import fill, note_lines, step_lines
from bot.i18n import Language, case_cause, case_title, step_text, t

_COLORS = {"match": "32", "uncertain": "33", "unknown": "31", "dim": "2", "bold": "1", "cyan": "36"}


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{_COLORS.get(code, code)}m{text}\x1b[0m" if color else text


def _command_lines(command: str, values: Any, color: bool, lang: Language, said: set[str]) -> list[str]:
    """A fix command filled from the log (bot/fix_values.py), then the arithmetic of each computed value
    (a line already said for an earlier step, such as "fill in the <…> values", is not repeated)."""
    out = [_c(f"        $ {fill(command, values)}", "cyan", color)]
    for line in step_lines(command, values, lang):
        if line not in said:
            said.add(line)
            out.append(_c(f"          {line}", "dim", color))
    return out


def render_since(changes: Any, source: str, lang: Language = "en", color: bool = False) -> str:
    """`explain LOG --since GOOD.log`: what differs from the working run, before the diagnosis."""
    out = [_c(t("since.head", lang, source=source), "bold", color)]
    if not changes:
        out.append("  " + t("since.none", lang))
    for c in changes:
        where = f"L{c.before_line or '?'} → L{c.after_line or '?'}"
        head = f"  {t('since.' + c.group, lang)}: {c.name} {c.before} → {c.after}  "
        out.append(head + _c(f"({where})", "dim", color))
    return "\n".join(out) + "\n"


def _title(m: Any, lang: Language) -> str:
    return (m.title_zh or m.title) if lang == "zh" else m.title


def render_text(
    diagnosis: Any, doctor: Any, explanation: Any = None, color: bool = False, lang: Language = "en"
) -> str:
    d = diagnosis
    question = getattr(d, "kind", "log") == "question"
    out: list[str] = []
    best = d.best
    score = f" ({best.score:.2f})" if best else ""
    verdict = t(f"verdict.question.{d.verdict}" if question else f"verdict.{d.verdict}", lang)
    out.append(_c(f"{t('label.verdict', lang)}: {verdict}{score}", d.verdict, color))
    for note in (*d.distilled.notes, *d.notes):
        out.append(_c(f"{t('label.note', lang)}: {note}", "dim", color))
    if not d.matches:
        out.append(t("text.no_case_question" if question else "text.no_case", lang))
    if d.verdict == "unknown":
        if d.matches:
            out.append("")
            out.append(t("text.nearest", lang))
            for m in d.matches[:3]:
                out.append(f"  - {m.case_id} — {_title(m, lang)}  [{t('label.score', lang)} {m.score:.2f}]")
        shown: tuple = ()
    else:
        shown = d.matches if d.verdict != "match" else d.matches[:3]
    for rank, m in enumerate(shown, 1):
        sig = f", {t('label.signature', lang)}" if m.signature_hit else ""
        out.append("")
        out.append(
            _c(f"{rank}. {m.case_id}", "bold", color)
            + f" — {_title(m, lang)}  [{m.area}, {t('label.score', lang)} {m.score:.2f}{sig}]"
        )
        for e in m.evidence:
            out.append(_c(f"     L{e.line_no}: ", "dim", color) + e.text.strip()[:200])
            out.append(_c(f"           ({e.why})", "dim", color))
        for note in m.notes:
            out.append(_c(f"   note: {note}", "bold", color))
        if rank == 1 and d.verdict != "unknown":
            case = doctor.case(m.case_id)
            if lang == "zh" and not case.cause_zh:
                out.append("   " + t("text.untranslated", lang))
            out.append(f"   {t('label.cause', lang)}: " + case_cause(case, lang))
            out.append(f"   {t('label.fix', lang)}:")
            values = getattr(d, "fix_values", None)
            out += [_c(f"     ! {note}", "dim", color) for note in note_lines(values, lang)]
            said: set[str] = set()
            for i, step in enumerate(case.fix, 1):
                out.append(f"     {i}. {step_text(step, lang)}")
                if step.command:
                    out += _command_lines(step.command, values, color, lang, said)
    also = getattr(d, "also_noticed", ())
    if also:
        out.append("")
        out.append("Also noticed (not the cause of this failure):")
        for m in also:
            line = f" (L{m.evidence[0].line_no})" if m.evidence else ""
            out.append(f"  - {m.case_id} — {m.title}{line}")
    facts = fact_lines(getattr(d, "facts", None))
    if facts:
        out.append("")
        out.append(_c("What the log says about your setup:", "bold", color))
        for line in facts:
            out.append(f"  {line}")
    if d.verdict == "unknown":
        out.append("")
        out.append(t("text.add_case", lang))
        out.append(t("text.add_case_how", lang))
    if explanation is not None:
        out.append("")
        header = t("label.explanation_llm" if explanation.source == "llm" else "label.explanation_kb", lang)
        out.append(_c(header, "bold", color))
        out.append(explanation.summary)
        if explanation.why:
            out.append(f"{t('label.why', lang)}: " + explanation.why)
        for i, step in enumerate(explanation.fix_steps, 1):
            out.append(f"  {i}. {step}")
        if explanation.note:
            out.append(_c(f"{t('label.note', lang)}: {explanation.note}", "dim", color))
    out.append("")
    if question:
        out.append(_c(t("text.question_footer", lang, ms=d.elapsed_ms), "dim", color))
    else:
        kept, total = len(d.distilled.evidence), d.distilled.total_lines
        out.append(_c(t("text.footer", lang, kept=kept, total=total, ms=d.elapsed_ms), "dim", color))
    return "\n".join(out)


__all__ = ["render_text", "case_title"]
