"""Diagnosis → terminal text (the CLI's human output). Pure; golden-tested."""

from __future__ import annotations

from typing import Any

from bot.facts import fact_lines

_COLORS = {"match": "32", "uncertain": "33", "unknown": "31", "dim": "2", "bold": "1", "cyan": "36"}
_VERDICT_TEXT = {
    "match": "MATCH — a known failure",
    "uncertain": "UNCERTAIN — possibly a known failure, check the evidence",
    "unknown": "UNKNOWN — no confident match in the knowledge base",
}


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{_COLORS.get(code, code)}m{text}\x1b[0m" if color else text


def render_text(diagnosis: Any, doctor: Any, explanation: Any = None, color: bool = False) -> str:
    d = diagnosis
    out: list[str] = []
    best = d.best
    score = f" ({best.score:.2f})" if best else ""
    out.append(_c(f"Verdict: {_VERDICT_TEXT[d.verdict]}{score}", d.verdict, color))
    for note in (*d.distilled.notes, *getattr(d, "notes", ())):
        out.append(_c(f"note: {note}", "dim", color))
    if not d.matches:
        out.append("No case in the knowledge base resembles this log.")
    if d.verdict == "unknown":
        if d.matches:
            out.append("")
            out.append("Nearest cases (weak similarity, for reference only):")
            for m in d.matches[:3]:
                out.append(f"  - {m.case_id} — {m.title}  [score {m.score:.2f}]")
        shown: tuple = ()
    else:
        shown = d.matches if d.verdict != "match" else d.matches[:3]
    for rank, m in enumerate(shown, 1):
        sig = ", signature" if m.signature_hit else ""
        out.append("")
        out.append(_c(f"{rank}. {m.case_id}", "bold", color) + f" — {m.title}  [{m.area}, score {m.score:.2f}{sig}]")
        for e in m.evidence:
            out.append(_c(f"     L{e.line_no}: ", "dim", color) + e.text.strip()[:200])
            out.append(_c(f"           ({e.why})", "dim", color))
        for note in m.notes:
            out.append(_c(f"   note: {note}", "bold", color))
        if rank == 1 and d.verdict != "unknown":
            case = doctor.case(m.case_id)
            out.append("   Cause: " + " ".join(case.cause.split()))
            out.append("   Fix:")
            for i, step in enumerate(case.fix, 1):
                out.append(f"     {i}. {step.text}")
                if step.command:
                    out.append(_c(f"        $ {step.command}", "cyan", color))
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
        out.append("Nothing matched well enough to name a cause. If you find the fix, add it as a case:")
        out.append("  vllm-doctor kb add   (or the \"Add as a KB case\" button in Slack)")
    if explanation is not None:
        out.append("")
        header = "Explanation (LLM)" if explanation.source == "llm" else "Explanation (knowledge base)"
        out.append(_c(header, "bold", color))
        out.append(explanation.summary)
        if explanation.why:
            out.append("Why: " + explanation.why)
        for i, step in enumerate(explanation.fix_steps, 1):
            out.append(f"  {i}. {step}")
        if explanation.note:
            out.append(_c(f"note: {explanation.note}", "dim", color))
    ev = d.distilled.evidence
    out.append("")
    out.append(
        _c(f"{len(ev)} evidence lines kept of {d.distilled.total_lines}; {d.elapsed_ms:.0f} ms", "dim", color)
    )
    return "\n".join(out)
