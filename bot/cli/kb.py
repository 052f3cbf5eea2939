"""`vllm-doctor kb add | search | stats | review` (list, lint and show live in bot/cli/main.py).

    kb add                          interactive: paste a log, accept or edit the suggestions
    kb add --from-file case.yaml    non-interactive; strict schema + KB rules; errors name file and field
    kb add --from-file c.yaml --example-of CASE   add that file's examples to an existing case instead
    kb search TEXT… | -             the live engine's ranking (signatures + BM25 + MiniLM) with outcomes
    kb stats [--json]               cases per area, feedback outcomes, candidates for new cases, pending reviews
    kb review [--approve ID | --reject ID]   cases proposed in Slack (shell access = KB maintainer)
    kb suggest [--json] [--all]     cases drafted from unknown pastes of one failure in several threads

A case added here is written atomically under the KB write lock, indexed incrementally and picked up by a
running bot on its next request (it watches the case files). Exit status: 0 done, 1 refused (invalid,
duplicate without --force, nothing found), 2 other errors.
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from bot.errors import InvalidCase, ReviewConflict, UserInputError

_STDIN_LIMIT = 8 * 1024 * 1024  # characters of one interactive answer (a pasted example log)

END_MARK = "."


def configure_kb_parsers(kb_sub: Any) -> None:
    p = kb_sub.add_parser("add", help="add a case (interactive, or --from-file)")
    p.add_argument("--from-file", metavar="CASE.yaml", help="a case in the KB format (docs/kb-authoring.md)")
    p.add_argument("--example-of", metavar="CASE_ID", help="add the file's examples to this existing case")
    p.add_argument("--force", action="store_true", help="add even if an existing case already matches its logs")
    p.add_argument("--author", help='git author for VLLM_DOCTOR_KB_GIT_COMMIT, "Name <email>"')
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = kb_sub.add_parser("search", help="rank KB cases for a log or some words")
    p.add_argument("text", nargs="+", help="text to search for, or - to read it from stdin")
    p.add_argument("-k", type=int, default=5, help="how many cases to show (default 5)")
    p.add_argument("--json", action="store_true")

    p = kb_sub.add_parser("stats", help="cases per area, feedback outcomes, candidates for new cases")
    p.add_argument("--json", action="store_true")
    p.add_argument("--top", type=int, default=10, help="rows per list (default 10)")

    p = kb_sub.add_parser("suggest", help="cases drafted from unknown pastes of one failure in several threads")
    p.add_argument("--json", action="store_true", help="one JSON object: {\"drafts\": [...]}")
    p.add_argument("--all", action="store_true", help="also the drafts already sent to the reviewers")

    p = kb_sub.add_parser("review", help="list cases proposed in Slack; approve or reject one")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--approve", metavar="ID")
    group.add_argument("--reject", metavar="ID")
    p.add_argument("--note", default="", help="reason shown to the author (with --reject)")


def run_kb_command(args: argparse.Namespace, settings: Any, *, stdin: TextIO | None = None,
                   stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    handlers: dict[str, Callable[..., int]] = {"add": _add, "search": _search, "stats": _stats, "review": _review,
                                              "suggest": _suggest}
    handler = handlers.get(args.kb_cmd)
    if handler is None:
        raise UserInputError(f"unknown kb command {args.kb_cmd!r}")
    return handler(args, settings, stdin or sys.stdin or io.StringIO(), out)  # closed stdin: end of input


def _growth(settings: Any) -> Any:
    from bot.kb_growth import KBGrowth
    from bot.pipeline import Pipeline

    return KBGrowth.from_settings(settings, Pipeline.from_settings(settings))


def _print(out: TextIO, *lines: str) -> None:
    for line in lines:
        print(line, file=out)


# -- add -----------------------------------------------------------------------------------------------------
def _add(args: argparse.Namespace, settings: Any, stdin: TextIO, out: TextIO) -> int:
    from bot.kb_growth.caseyaml import parse_case_file
    from kb.loader import KBError

    growth = _growth(settings)
    if args.from_file:
        try:
            case = parse_case_file(Path(args.from_file), settings.max_input_bytes)
        except KBError as exc:
            _print(sys.stderr, *(f"error: {exc.path}: {p}" for p in exc.problems))
            return 1
        origin = args.from_file
    else:
        case = _interactive_case(growth, stdin, out)
        if case is None:
            _print(out, "nothing added")
            return 1
        origin = "your case"
    try:
        if args.example_of:
            applied = growth.add_examples(args.example_of, case.examples, case.signatures, author=args.author)
            return _report_added(out, applied, args.json, [], example_of=args.example_of)
        checked = growth.check(case)
    except InvalidCase as exc:
        _print(sys.stderr, *(f"error: {origin}: field '{k}': {v}" for k, v in exc.problems.items()))
        return 1
    for warning in checked.report.warnings:
        _print(sys.stderr, f"warning: {origin}: field '{warning.field}': {warning.message}")
    if checked.duplicates and not args.force:
        if args.from_file or not _confirm(stdin, out, checked.duplicates):
            _print(sys.stderr, f"refused: {origin} looks like a case the KB already has:",
                   *(f"  {s.case_id}  {s.percent}% similar  {s.title}" for s in checked.duplicates),
                   "add its logs to that case (--example-of CASE_ID), or use --force if it really is new")
            return 1
    try:
        applied = growth.add_case(checked.case, author=args.author)
    except InvalidCase as exc:
        _print(sys.stderr, *(f"error: {origin}: field '{k}': {v}" for k, v in exc.problems.items()))
        return 1
    return _report_added(out, applied, args.json, checked.nearest)


def _report_added(out: TextIO, applied: Any, as_json: bool, nearest: list[Any], example_of: str | None = None) -> int:
    written = applied.written
    result = {
        "id": written.case.id,
        "requested_id": written.requested_id,
        "path": str(written.path),
        "updated_existing": written.replaced,
        "live": applied.live,
        "live_seconds": round(applied.live_seconds, 3),
        "commit": applied.commit.detail if applied.commit else None,
        "committed": bool(applied.commit and applied.commit.ok),
        "resolved_candidates": applied.resolved_candidates,
        "nearest": [{"case_id": s.case_id, "similarity": round(s.similarity, 3)} for s in nearest],
        # The same rule `kb lint` applies (kb.schema.Case.missing_chinese): a note, an error only with --strict-zh.
        "missing_chinese": written.case.missing_chinese(),
    }
    if as_json:
        print(json.dumps(result, ensure_ascii=False), file=out)
        return 0
    verb = f"added examples to {example_of}" if example_of else f"added {written.case.id}"
    _print(out, f"{verb}: {written.path}")
    if written.renamed:
        _print(out, f"note: id {written.requested_id!r} was taken; saved as {written.case.id!r}")
    if result["missing_chinese"]:
        _print(out, f"note: no Chinese text yet for {', '.join(result['missing_chinese'])}: Chinese askers see the "
               "English text until it is filled (`kb lint` notes it; `kb lint --strict-zh` requires it)")
    if applied.live:
        _print(out, f"indexed and live in {applied.live_seconds:.2f} s (a running bot picks it up on its next request)")
    else:
        _print(out, "written outside the directory the bot reads (VLLM_DOCTOR_KB_WRITE_DIR): live after a deploy")
    if applied.commit is not None:
        _print(out, f"git: {'committed ' if applied.commit.ok else ''}{applied.commit.detail}")
    if applied.resolved_candidates:
        _print(out, f"{applied.resolved_candidates} candidate log(s) for new cases are now covered by it")
    return 0


def _read_block(stdin: TextIO, out: TextIO, prompt: str) -> str | None:
    """Multi-line answer ended by a line with only '.', or end of input. None at end of input with nothing read."""
    _print(out, f"{prompt} (end with a line containing only '{END_MARK}')")
    lines: list[str] = []
    left = _STDIN_LIMIT
    while raw := stdin.readline(left + 1):  # bounded: /dev/zero on stdin is refused, not read to the end
        left -= len(raw)
        if left < 0:
            raise UserInputError(f"the answer to '{prompt}' is longer than {_STDIN_LIMIT} characters")
        line = raw.rstrip("\n")
        if line.strip() == END_MARK:
            return "\n".join(lines)
        lines.append(line)
    return "\n".join(lines) if lines else None


def _ask(stdin: TextIO, out: TextIO, prompt: str, default: str = "") -> str:
    print(f"{prompt}{f' [{default}]' if default else ''}: ", end="", file=out, flush=True)
    line = stdin.readline(_STDIN_LIMIT)
    if not line:
        return default
    return line.strip() or default


def _interactive_case(growth: Any, stdin: TextIO, out: TextIO) -> Any:
    from bot.kb_growth.form import EXAMPLE_SEPARATOR, SEVERITIES, CaseForm, form_to_case
    from kb.schema import AREAS, URL_RE

    log_text = _read_block(stdin, out, "Paste one example log of the failure")
    if not log_text or not log_text.strip():
        return None
    source = ""
    for _attempt in range(3):
        source = _ask(stdin, out, "URL where this log was posted (issue, Slack thread)")
        if URL_RE.match(source):
            break
        _print(out, "problem: every example needs the http(s) URL where it was posted")
    else:
        return None
    suggested, _suggestions, nearest = growth.suggest(log_text, permalink=source)
    if nearest:
        _print(out, "nearest known cases:", *(f"  {s.case_id}  {s.percent}%  {s.title}" for s in nearest))
    form = CaseForm(
        title=_ask(stdin, out, "Title", suggested.title),
        title_zh=_ask(stdin, out, "Title in Chinese"),
        area=_ask(stdin, out, f"Area ({'|'.join(AREAS)})", suggested.area),
        severity=_ask(stdin, out, f"Severity ({'|'.join(SEVERITIES)})", "high"),
        cause=_read_block(stdin, out, "Cause: two to five sentences") or "",
        fix=_read_block(stdin, out, "Fix steps, one per line; '$ command' lines belong to the step above") or "",
    )
    _print(out, "suggested signatures:", *(f"  {s}" for s in suggested.signatures.splitlines()))
    typed = _read_block(stdin, out, "Signatures, one regex per line (empty: use the suggested ones)") or ""
    form.signatures = typed if typed.strip() else suggested.signatures
    more = _read_block(stdin, out, f"More example logs: URL on the first line, then the log; '{EXAMPLE_SEPARATOR}' between them") or ""
    form.examples = suggested.examples + (f"\n{EXAMPLE_SEPARATOR}\n{more}" if more.strip() else "")
    form.references = _read_block(stdin, out, "More reference URLs, one per line") or ""
    for _attempt in range(5):
        try:
            case = form_to_case(form)
            growth.validate(case)
            return case
        except InvalidCase as exc:
            _print(out, *(f"problem: field '{k}': {v}" for k, v in exc.problems.items()))
            field = next(iter(exc.problems))
            if field in ("title", "title_zh", "area", "severity"):
                setattr(form, field, _ask(stdin, out, f"New {field}", getattr(form, field)))
            else:
                answer = _read_block(stdin, out, f"New {field}")
                if answer is None:
                    return None
                setattr(form, field, answer)
    return None


def _confirm(stdin: TextIO, out: TextIO, duplicates: list[Any]) -> bool:
    _print(out, "this looks like a case the KB already has:",
           *(f"  {s.case_id}  {s.percent}% similar  {s.title}" for s in duplicates))
    return _ask(stdin, out, "add it as a new case anyway? (y/N)", "n").lower().startswith("y")


def _whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user database in some containers
        return "cli"


# -- search --------------------------------------------------------------------------------------------------
def _search(args: argparse.Namespace, settings: Any, stdin: TextIO, out: TextIO) -> int:
    text = " ".join(args.text)
    if args.text == ["-"]:
        text = stdin.read(settings.max_input_bytes + 1)  # characters: at most 4 bytes each
        if len(text) > settings.max_input_bytes:
            from bot.diagnosis.paste import too_large_message

            raise UserInputError(too_large_message("The input on stdin", settings.max_input_bytes))
    growth = _growth(settings)
    diagnosis = growth.pipeline.match(text)
    rows = []
    for m in diagnosis.matches[: max(1, args.k)]:
        rows.append({
            "case_id": m.case_id, "title": m.title, "area": m.area, "score": m.score,
            "signature_hit": m.signature_hit, "outcome": growth.outcome_text(m.case_id),
        })
    if args.json:
        print(json.dumps({"verdict": diagnosis.verdict, "matches": rows}, ensure_ascii=False), file=out)
        return 0 if rows else 1
    if not rows:
        _print(out, "no matching case")
        return 1
    for r in rows:
        extra = " · signature" if r["signature_hit"] else ""
        extra += f" · {r['outcome']}" if r["outcome"] else ""
        _print(out, f"{r['score']:.2f}  {r['case_id']:<40} {r['area']:<12} {r['title']}{extra}")
    _print(out, f"verdict for this text: {diagnosis.verdict}")
    return 0


# -- stats ---------------------------------------------------------------------------------------------------
def _stats(args: argparse.Namespace, settings: Any, stdin: TextIO, out: TextIO) -> int:
    stats = _growth(settings).stats(top=args.top)
    if args.json:
        print(json.dumps(stats, ensure_ascii=False, indent=1), file=out)
        return 0
    cases = stats["cases"]
    _print(out, f"cases: {cases['total']}" + (f" ({cases['invalid_files']} invalid files skipped)" if cases["invalid_files"] else ""))
    _print(out, *(f"  {area:<12} {n}" for area, n in cases["by_area"].items()))
    fb = stats["feedback"]
    _print(out, f"feedback: {fb['votes']} votes from {fb['users']} people ({fb['fixed']} fixed it, {fb['not_helpful']} didn't help)")
    _print(out, *(f"  {c['case_id']:<40} solved {c['solved']} of {c['total']}  (prior {c['prior']:+.3f})" for c in fb["cases"]))
    cand = stats["candidates"]
    _print(out, f"candidates for new cases: {cand['open']} open ({cand['unknown']} unknown, {cand['not_helpful']} didn't help), "
                f"{cand['resolved']} now covered")
    for c in cand["top"]:
        why = "no match" if c["reason"] == "unknown" else f"{c['case_id']} didn't help"
        _print(out, f"  {c['seen']:>3}×  {c['summary'][:100]}  ({why})")
    subs = stats["submissions"]
    if subs:
        _print(out, "submissions: " + ", ".join(f"{n} {status}" for status, n in sorted(subs.items())))
    return 0


# -- suggest -------------------------------------------------------------------------------------------------
def _suggest(args: argparse.Namespace, settings: Any, stdin: TextIO, out: TextIO) -> int:
    from bot.diagnosis.root import triage

    growth = _growth(settings)
    posted = growth.posted_signatures()
    drafts = growth.cluster_drafts(include_posted=args.all)
    rows = []
    for d in drafts:
        row = d.as_dict()
        row["submission"] = posted.get(d.signature)
        row["triage"] = [st.text for st in triage(d.component).steps]
        rows.append(row)
    if args.json:
        print(json.dumps({"drafts": rows}, ensure_ascii=False, indent=1), file=out)
        return 0
    if not rows:
        _print(out, "no drafted case: no unknown failure was pasted in enough different threads yet "
                    f"(VLLM_DOCTOR_KB_DRAFT_MIN_PASTES={settings.kb_draft_min_pastes})")
        return 0
    for n, row in enumerate(rows, 1):
        _print(out, f"{n}. {row['title']}  [{row['component']}; {row['pastes']} pastes, {row['threads']} threads]"
                    + (f"  (review {row['submission']})" if row["submission"] else ""),
               f"   signature: {row['signature']}",
               *(f"   thread: {link}" for link in row["links"][:5]),
               *(f"   example: {root[:160]}" for root in row["roots"][:3]),
               *(f"   triage: {step}" for step in row["triage"][:3]))
    return 0


# -- review --------------------------------------------------------------------------------------------------
def _review(args: argparse.Namespace, settings: Any, stdin: TextIO, out: TextIO) -> int:
    growth = _growth(settings)
    me = f"cli:{_whoami()}"
    try:
        if args.approve:
            approval = growth.approve(args.approve, me, _whoami(), as_maintainer=True)
            _print(out, f"approved {args.approve}: {approval.applied.written.path} "
                        f"(live in {approval.applied.live_seconds:.2f} s)")
            return 0
        if args.reject:
            growth.reject(args.reject, me, args.note, as_maintainer=True)
            _print(out, f"rejected {args.reject}")
            return 0
    except (ReviewConflict, InvalidCase) as exc:
        _print(sys.stderr, f"error: {exc}")
        return 1
    pending = growth.submissions.list("pending")
    if not pending:
        _print(out, "no cases waiting for review")
        return 0
    for sub in pending:
        what = f"example for {sub.target_case}" if sub.kind == "example" else "new case"
        _print(out, f"{sub.id}  {what:<30} {sub.title[:70]}  (by {sub.author_name or sub.author_id})")
    return 0
