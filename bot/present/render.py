"""Diagnosis → terminal text (the CLI's human output), in the answer's language. Pure; golden-tested.

A log's answer leads with its root line (bot/diagnosis/root.py). When the log establishes a case, the case's cause and
fix follow; when it does not (`unknown`, or an `uncertain` whose top case rests on shared words only), the
candidates are listed as "possibly related", one line each, and the answer is built from the root line: the
component's triage steps, the host checks worth running, a search phrase, a pointer to the report draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bot.diagnosis.facts import fact_lines
from bot.diagnosis.fix_values import fill, note_lines, step_lines
from bot.diagnosis.root import cases_affecting, classify, established, read_root, search_phrase, triage
from bot.present.i18n import Language, case_cause, case_title, fact_label, note_text, step_text, t

if TYPE_CHECKING:
    from bot.models import Evidence, Match, Root

_COLORS = {"match": "32", "uncertain": "33", "unknown": "31", "dim": "2", "bold": "1", "cyan": "36"}
ROOT_SHOWN_CHARS = 300  # a longer root line is cut in text (the JSON keeps it whole)
# Evidence labels of the matcher ("signature: …") in the answer's language; matching vocabulary only with -v.
_WHY_KEYS = {"signature": "why.signature", "fact_rule": "why.fact_rule", "fact": "why.fact", "frame": "why.frame"}
_VOCABULARY = frozenset({"shared_terms", "question_terms"})  # how the matcher got there: shown only with -v


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{_COLORS.get(code, code)}m{text}\x1b[0m" if color else text


def _command_lines(command: str, values: Any, color: bool, lang: Language, said: set[str]) -> list[str]:
    """A fix command filled from the log (bot/diagnosis/fix_values.py), then the arithmetic of each computed value
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


def _title(m: Match, lang: Language) -> str:
    return (m.title_zh or m.title) if lang == "zh" else m.title


def _area(area: str, lang: Language) -> str:
    return t(f"area.{area}", lang) if lang == "zh" and f"area.{area}" in _AREAS else area


_AREAS = frozenset(f"area.{a}" for a in ("cuda", "distributed", "hardware", "install", "memory", "model",
                                         "performance", "serving"))


def _detail(evidence: Evidence, case: Any, lang: Language) -> str:
    """What the evidence line proves, after its label: a fact rule worded from the case (Evidence.rule: its position
    in `rules`, in Chinese when the case has it), else the part of `why` after its English label."""
    rules = getattr(case, "rules", None) or ()
    position = evidence.rule
    if evidence.kind == "fact_rule" and lang == "zh" and position is not None and 0 <= position < len(rules):
        says_zh = getattr(rules[position], "says_zh", "")
        if says_zh:
            return str(says_zh)
    return evidence.why.split(": ", 1)[1] if ": " in evidence.why else evidence.why


def why_label(evidence: Evidence, lang: Language, verbose: bool = False, case: Any = None) -> str | None:
    """An evidence line's reason in the answer's language; None when it is matching vocabulary (shown with -v)."""
    if evidence.kind == "earlier_root":
        return t("why.earlier_root", lang)
    if evidence.kind in _VOCABULARY:
        return evidence.why if verbose else None
    return f"{t(_WHY_KEYS[evidence.kind], lang)}: {_detail(evidence, case, lang)}"


def _case(doctor: Any, case_id: str) -> Any:
    try:
        return doctor.case(case_id)
    except (KeyError, AssertionError):
        return None


def shown_scores(matches: Any) -> list[float]:
    """Scores as shown: never higher than the one above (the order is the answer's order)."""
    out: list[float] = []
    for m in matches:
        out.append(min(m.score, out[-1]) if out else m.score)
    return out


def cut(text: str, lang: Language, limit: int = ROOT_SHOWN_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " " + t("root.cut", lang, n=len(text) - limit)


def root_lines(d: Any, lang: Language) -> list[str]:
    """The lead: the error to fix, its component and why that line; or why no line states one."""
    reading = read_root(d.distilled, d.facts, d.verdict, d.matches)
    root = d.root if getattr(d, "root", None) is not None else reading.root
    if root is None:
        return [t(f"root.missing.{reading.missing or 'no_error'}", lang)]
    title = triage(root.component)
    out = [t("root.lead", lang, line=root.line, text=cut(root.text, lang)),
           "  " + t("root.component", lang, component=root.component,
                    title=title.title_zh if lang == "zh" else title.title)]
    if root.raised_at is not None:
        out.append("  " + t("root.raised", lang, **asdict(root.raised_at)))
    if reading.kind is not None:
        out.append("  " + t("root.why", lang, kind=t(f"root.kind.{reading.kind}", lang)))
    for other in reading.others:
        out.append("  " + t("root.other", lang, line=other.line_no, text=cut(other.text, lang, 160),
                            component=classify(other.text)))
    return out


def answer_root(d: Any) -> Root | None:
    """The diagnosis's root (set by the pipeline), or read now for a diagnosis made elsewhere."""
    root = getattr(d, "root", None)
    return root if root is not None else read_root(d.distilled, d.facts, d.verdict, d.matches).root


def uncovered_lines(d: Any, doctor: Any, lang: Language, color: bool = False) -> list[str]:
    """The answer when no case covers the log: candidates as possibly related, then what to do from the root."""
    out: list[str] = ["", t("unknown.none_covers", lang)]
    if d.matches:
        out.append(t("unknown.possibly", lang))
        for m, score in zip(d.matches[:3], shown_scores(d.matches[:3]), strict=True):
            out.append(f"  - {m.case_id} — {_title(m, lang)}  [{t('label.score', lang)} {score:.2f}]")
    root = answer_root(d)
    component = root.component if root is not None else "other"
    steps = triage(component)
    out.append("")
    out.append(_c(t("unknown.triage", lang, title=steps.title_zh if lang == "zh" else steps.title), "bold", color))
    for i, step in enumerate(steps.steps, 1):
        out.append(f"  {i}. {step.text_zh if lang == 'zh' else step.text}")
        if step.command:  # placeholders filled from the log like a case's commands ({model_dir}, {port}, …)
            out.append(_c(f"     $ {fill(step.command, getattr(d, 'fix_values', None))}", "cyan", color))
    if steps.checks:
        flags = " ".join(f"--check {c}" for c in steps.checks)
        out.append(t("unknown.checks", lang))
        out.append(_c(f"     $ vllm-doctor diagnose HOST {flags}", "cyan", color))
        out.append(_c(f"     /vllm-diagnose HOST {' '.join(steps.checks)}", "cyan", color))
    affecting = cases_affecting(getattr(getattr(doctor, "kb", None), "cases", ()), d.facts, component)
    if affecting:
        out.append(t("unknown.versions", lang, cases=", ".join(affecting[:5])))
    if root is not None:
        phrase = search_phrase(root.text)
        if phrase:
            out.append(t("unknown.search", lang, phrase=f'"{phrase}"'))
    out.append(t("unknown.draft", lang))
    return out


def fact_text(facts: Any, lang: Language) -> list[str]:
    """The facts' lines with their labels in the answer's language."""
    return fact_lines(facts, lambda name, english: fact_label(name, english, lang))


def render_text(
    diagnosis: Any, doctor: Any, explanation: Any = None, color: bool = False, lang: Language = "en",
    verbose: bool = False,
) -> str:
    d = diagnosis
    question = getattr(d, "kind", "log") == "question"
    out: list[str] = []
    best = d.best
    # a question is answered from its cases; a pasted error line (a question with a root) only from established ones
    solid = (question and d.root is None) or established(d.verdict, d.matches, answer_root(d))
    # the verdict's words stand alone unless a case is established: a number beside "uncertain" reads as a score
    score = f" ({best.score:.2f})" if best and d.verdict == "match" else ""
    verdict = t(f"verdict.question.{d.verdict}" if question else f"verdict.{d.verdict}", lang)
    out.append(_c(f"{t('label.verdict', lang)}: {verdict}{score}", d.verdict, color))
    if not question or getattr(d, "root", None) is not None:  # a pasted error line answered as a question
        out.extend(root_lines(d, lang))
    for worded in (*d.distilled.notes, *(note_text(n, lang) for n in d.notes)):
        out.append(_c(f"{t('label.note', lang)}: {worded}", "dim", color))
    if not d.matches and question:
        out.append(t("text.no_case_question", lang))
    elif not d.matches:
        out.append(t("text.no_case", lang))
    shown: Sequence[Match] = ()
    if question and d.verdict == "unknown":
        if d.matches:
            out.append("")
            out.append(t("text.nearest", lang))
            for m, s in zip(d.matches[:3], shown_scores(d.matches[:3]), strict=True):
                out.append(f"  - {m.case_id} — {_title(m, lang)}  [{t('label.score', lang)} {s:.2f}]")
    elif not solid:
        out.extend(uncovered_lines(d, doctor, lang, color))
    else:
        shown = d.matches if d.verdict != "match" else d.matches[:3]
    for rank, (m, s) in enumerate(zip(shown, shown_scores(shown), strict=True), 1):
        sig = f", {t('label.signature', lang)}" if m.signature_hit else ""
        out.append("")
        out.append(
            _c(f"{rank}. {m.case_id}", "bold", color)
            + f" — {_title(m, lang)}  [{_area(m.area, lang)}, {t('label.score', lang)} {s:.2f}{sig}]"
        )
        case = _case(doctor, m.case_id)
        for e in m.evidence:
            out.append(_c(f"     L{e.line_no}: ", "dim", color) + e.text.strip()[:200])
            why = why_label(e, lang, verbose, case)
            if why:
                out.append(_c(f"           ({why})", "dim", color))
        for note in m.notes:
            out.append(_c(f"   {t('label.note', lang)}: {note_text(note, lang)}", "bold", color))
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
        out.append(t("label.also_noticed", lang))
        for m in also:
            line = f" (L{m.evidence[0].line_no})" if m.evidence else ""
            out.append(f"  - {m.case_id} — {_title(m, lang)}{line}")
    facts = fact_text(getattr(d, "facts", None), lang)
    if facts:
        out.append("")
        out.append(_c(t("label.setup", lang), "bold", color))
        for line in facts:
            out.append(f"  {line}")
    if d.verdict == "unknown":
        out.append("")
        out.append(t("text.add_case", lang))
        out.append(t("text.add_case_how", lang))
    if explanation is not None:
        out.append("")
        if explanation.source == "llm" and explanation.case_id == "none":
            header = t("label.model_reading", lang)
        else:
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


__all__ = ["answer_root", "case_title", "cut", "fact_text", "render_text", "root_lines", "shown_scores",
           "uncovered_lines", "why_label"]
