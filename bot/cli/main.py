"""`vllm-doctor` command line. Imports stay lazy so `kb list` / `kb lint` never load torch.

    vllm-doctor explain [FILE|-] [--json] [--no-llm] [--host-report REPORT.json]   diagnose one log
    vllm-doctor explain --no-llm --jsonl IN.jsonl         batch contract: one JSON object per input line
    vllm-doctor explain FILE --plot MEM.png               also draw the GPU memory picture (bot/present/pictures.py)
    vllm-doctor report-draft [FILE|-] [-o DRAFT.md] [--collect-env F]   a vLLM bug-report draft
                                                          (bot/present/report_draft.py)
    vllm-doctor kb list [--json] | kb lint [DIR] | kb show ID
    vllm-doctor index [--rebuild]
    vllm-doctor eval LABELLED.jsonl [--json] [--floor …]
    vllm-doctor diagnose HOST|GROUP | --local             remote checks (bot/cli/diagnose.py)
    vllm-doctor serve [--http --port N]                   the Slack bot (bot/cli/serve.py)
"""

from __future__ import annotations

import argparse
import codecs
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from bot.errors import DoctorError, UserInputError

if TYPE_CHECKING:
    from bot.models import Language
    from bot.pipeline import Pipeline
    from bot.settings import Settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _settings() -> Settings:
    from bot.settings import get_settings

    return get_settings()


def _pipeline() -> Pipeline:
    from bot.pipeline import Pipeline

    return Pipeline.from_settings(_settings())


# -- explain ---------------------------------------------------------------------------------------
def _stdin() -> BinaryIO:
    """The binary stdin; closed (`<&-`, a service without one) is a user error, not an AttributeError."""
    if sys.stdin is None or getattr(sys.stdin, "buffer", None) is None:
        raise UserInputError("no input: stdin is closed; name a log file, or pipe the log in")
    return sys.stdin.buffer


def _read_input(path: str | None, max_bytes: int) -> bytes:
    """The user's log, read no further than the input limit + 1 byte (/dev/zero, an endless pipe)."""
    from bot.diagnosis.paste import read_limited

    if path in (None, "-"):
        return read_limited(_stdin(), max_bytes, "The input on stdin")
    try:
        with open(path, "rb") as src:
            return read_limited(src, max_bytes, path)
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror or exc}") from exc


# A match quotes its evidence lines; the full text of a line is in the top-level "evidence" (once), so a
# 2 MB single-line paste is not printed again for every match.
MATCH_EVIDENCE_CHARS = 1000


def _quote(text: str) -> str:
    if len(text) <= MATCH_EVIDENCE_CHARS:
        return text
    return f"{text[:MATCH_EVIDENCE_CHARS]} … [{len(text) - MATCH_EVIDENCE_CHARS} more characters]"


def match_to_json(m: Any, full: bool = True, lang: Language = "en") -> dict[str, Any]:
    """lang: the language the match's notes are worded in (--json words them in the paste's language)."""
    from bot.present.i18n import note_text

    out = {
        "case_id": m.case_id,
        "title": m.title,
        "score": m.score,
        "evidence": [{"line": e.line_no, "text": _quote(e.text), "why": e.why} for e in m.evidence],
    }
    if full:
        out.update(title_zh=m.title_zh, area=m.area, signature_hit=m.signature_hit, scores=m.scores,
                   notes=[note_text(n, lang) for n in m.notes])
    return out


def facts_to_json(d: Any) -> dict[str, Any]:
    """What the log says about the setup (bot/diagnosis/facts.py): the facts it states, and the line of each."""
    facts = d.facts
    if facts is None:
        return {}
    known = facts.known()
    return {name: {"value": value, "line": facts.sources.get(name)} for name, value in known.items()}


ROOT_JSON_CHARS = 16_384  # a longer root line is cut here ("cut": true); the whole line is in "evidence", once


def root_to_json(d: Any) -> dict[str, Any] | None:
    """The line to fix and its component (bot/diagnosis/root.py), or None when no line states the cause."""
    root = getattr(d, "root", None)
    if root is None:
        return None
    raised = root.raised_at
    out: dict[str, Any] = {"line": root.line, "text": root.text, "component": root.component,
                           "raised_at": None if raised is None else {"file": raised.file, "line": raised.line,
                                                                      "function": raised.function,
                                                                      "log_line": raised.log_line}}
    if len(root.text) > ROOT_JSON_CHARS:
        out["text"], out["cut"] = root.text[:ROOT_JSON_CHARS] + "…", True
    return out


def fix_to_json(d: Any, case: Any) -> dict[str, Any]:
    """The best case's fix steps with their commands filled from the log (bot/diagnosis/fix_values.py), the values
    and how each computed one was worked out, and notes (two values for one setting, one that cannot fit)."""
    from bot.diagnosis.fix_values import fill, note_lines, step_lines, to_json

    values = getattr(d, "fix_values", None)
    steps = [{"text": s.text, "command": fill(s.command, values) if s.command else None,
              "template": s.command, "how": step_lines(s.command, values)} for s in (case.fix if case else [])]
    return {"fix": steps, "fix_values": to_json(values), "fix_notes": note_lines(values)}


def diagnosis_to_json(d: Any, explanation: Any = None, language: str | None = None,
                      case: Any = None) -> dict[str, Any]:
    """language: the answer's language (--lang, the setting, else the paste's); defaults to the paste's.
    case: the best match's KB case, for its fix steps filled from the log (added keys "fix", "fix_values")."""
    from bot.present.i18n import note_text

    said = d.distilled.language  # notes are worded in the paste's language, whatever the answer's
    return {
        **fix_to_json(d, case),
        "verdict": d.verdict,
        "kind": getattr(d, "kind", "log"),
        "root": root_to_json(d),
        "matches": [match_to_json(m, lang=said) for m in d.matches],
        "evidence": [{"line": e.line_no, "text": e.text, "kind": e.kind} for e in d.distilled.evidence],
        "language": language or d.distilled.language,
        "notes": [*d.distilled.notes, *(note_text(n, said) for n in d.notes)],
        "also_noticed": [match_to_json(m, lang=said) for m in d.also_noticed],
        "facts": facts_to_json(d),
        "truncated": d.distilled.truncated,
        "total_lines": d.distilled.total_lines,
        "elapsed_ms": round(d.elapsed_ms, 1),
        "explanation": explanation.to_json() if explanation is not None else None,
    }


def _open_batch(path: str) -> BinaryIO:
    """The batch input as bytes: records are split on b"\\n" only (a bare \\r inside a log is data)."""
    if path == "-":
        return _stdin()
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by the caller's `with`
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _json_line(obj: dict[str, Any]) -> str:
    """One JSON line; text that cannot be written as UTF-8 (a lone surrogate in an id) is \\u-escaped."""
    line = json.dumps(obj, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(obj)
    return line + "\n"


_TOO_LONG = object()  # a batch line over the limit: answered with an error object, never read whole
_SKIP_LIMIT = 16  # limits' worth of one over-long record skipped in search of its end before reading stops


def _batch_lines(src: BinaryIO, max_bytes: int) -> Iterator[bytes | object]:
    """The records of a batch, split on b"\\n", each read no further than `max_bytes` + 1: a longer line
    (or /dev/zero) is skipped up to its end in bounded chunks and yields _TOO_LONG."""
    while True:
        line = src.readline(max_bytes + 1)
        if not line:
            return
        if len(line) <= max_bytes or line.endswith(b"\n") and len(line) == max_bytes + 1:
            yield line
            continue
        skipped = len(line)
        while line and not line.endswith(b"\n"):  # skip the rest of this record, in bounded chunks
            if skipped > _SKIP_LIMIT * max_bytes:  # /dev/zero: this record never ends, so it is the last
                print(f"note: --jsonl stopped reading: a record ran past {skipped} bytes without a line end",
                      file=sys.stderr)
                yield _TOO_LONG
                return
            line = src.readline(1 << 20)
            skipped += len(line)
        yield _TOO_LONG


def _batch_answer(pipeline: Any, n: int, raw: bytes | object, max_bytes: int = 0) -> dict[str, Any]:
    """The object for input line `n`; every failure becomes its own error object (batch contract)."""
    item_id: Any = None
    try:
        if not isinstance(raw, bytes):
            from bot.diagnosis.paste import human_bytes

            raise ValueError(f"longer than the input limit of {human_bytes(max_bytes)} "
                             f"({max_bytes} bytes, VLLM_DOCTOR_MAX_INPUT_BYTES)")
        if n == 1 and raw.startswith(codecs.BOM_UTF8):  # Notepad / PowerShell write one before the first record
            raw = raw[len(codecs.BOM_UTF8):]
        if not raw.strip():
            raise ValueError("empty line")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not valid UTF-8 (byte {exc.start})") from None
        try:
            item = json.loads(text)
        except RecursionError:  # a 100,000-deep array: the stdlib parser recurses
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(item, dict):
            raise ValueError("not a JSON object")
        item_id = item.get("id")
        log = item.get("log")
        if not isinstance(log, str):
            raise ValueError('missing string field "log"')
        d = pipeline.match(log)
        return {"id": item_id, "verdict": d.verdict, "matches": [match_to_json(m, full=False) for m in d.matches],
                "facts": facts_to_json(d), "root": root_to_json(d)}  # added keys; the documented ones are unchanged
    except (ValueError, UserInputError) as exc:  # json.JSONDecodeError is a ValueError
        return {"id": item_id, "verdict": "unknown", "matches": [], "root": None, "error": f"line {n}: {exc}"}
    except Exception:  # noqa: BLE001 - one bad record must not cost the others their answers
        logging.getLogger(__name__).exception("batch line %d failed", n)
        return {"id": item_id, "verdict": "unknown", "matches": [], "root": None,
                "error": f"line {n}: internal error (see stderr)"}


def _run_jsonl(args: argparse.Namespace) -> int:
    """Batch contract: exactly one JSON object per input line on stdout, in order; nothing else."""
    src = _open_batch(args.jsonl)  # a missing file fails before the (slow) engine loads
    pipeline = _pipeline()
    out = sys.stdout
    max_bytes = pipeline.settings.max_input_bytes
    with src:
        for n, raw in enumerate(_batch_lines(src, max_bytes), 1):
            out.write(_json_line(_batch_answer(pipeline, n, raw, max_bytes)))
            out.flush()
    return 0


def _host_facts(path: str | None) -> tuple[list[str] | None, dict[str, str], str]:
    """From a `vllm-doctor diagnose HOST --json` report: its facts for the LLM prompt, and the versions the
    hosts agree on (vLLM, torch, CUDA, driver, Python) with a label, read against the cases' fixed_in."""
    if path is None:
        return None, {}, ""
    from bot.diagnosis.versions import report_versions
    from bot.runner.report import load_report

    report = load_report(path)
    label = report.hosts[0].host if len(report.hosts) == 1 else report.target
    return report.facts_for_prompt().splitlines(), report_versions(report), label


def cmd_explain(args: argparse.Namespace) -> int:
    if args.jsonl:
        if args.host_report or args.since:
            raise UserInputError("--host-report and --since explain one log; they do not apply to --jsonl batches")
        return _run_jsonl(args)
    # a bad report fails before the (slower) diagnosis
    host_facts, versions, host_label = _host_facts(args.host_report)
    limit = _settings().max_input_bytes
    good = _read_input(args.since, limit) if args.since else None
    data = _read_input(args.file, limit)
    pipeline = _pipeline()
    changes = None
    if good is not None:
        from bot.diagnosis.since import what_changed

        # the failing log's facts are read again by match(); reading twice keeps Pipeline.match unchanged
        changes = what_changed(pipeline.facts_of(good), pipeline.facts_of(data))
    diagnosis, explanation = pipeline.explain_paste(data, host_facts=host_facts, language=args.lang,
                                                    use_llm=not args.no_llm, host_versions=versions,
                                                    host_label=host_label)
    if explanation is None and host_facts is not None:
        print("note: --host-report's findings are only used by the LLM explanation, which is off "
              f"({'--no-llm' if args.no_llm else 'VLLM_BASE_URL is not set'}); its versions were used",
              file=sys.stderr)
    from bot.explain.explainer import resolve_language

    lang = resolve_language(diagnosis, args.lang, pipeline.settings.llm_language)
    if args.json:
        best = diagnosis.best.case_id if diagnosis.best and diagnosis.verdict != "unknown" else None
        case = pipeline.kb.by_id().get(best) if best else None
        out = diagnosis_to_json(diagnosis, explanation, lang, case=case)
        if changes is not None:
            from bot.diagnosis.since import changes_to_json

            out = {"since": changes_to_json(changes), **out}
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        from bot.present.render import render_since, render_text

        if changes is not None:
            print(render_since(changes, Path(args.since).name if args.since != "-" else "stdin", lang, _want_color()))
        print(render_text(diagnosis, pipeline, explanation, color=_want_color(), lang=lang,
                          verbose=bool(getattr(args, "verbose", False))))
    if args.plot:
        _plot_log_memory(diagnosis, Path(args.plot))
    return 0


def _plot_log_memory(diagnosis: Any, path: Path) -> None:
    """`explain --plot FILE.png`: the GPU memory picture, when the log states the numbers."""
    from bot.present.memory_view import log_memory_bars, log_memory_title
    from bot.present.pictures import memory_picture

    bars = log_memory_bars(diagnosis.facts) if diagnosis.facts is not None else ()
    if not bars:
        print("note: no picture: the log states no GPU memory numbers (vLLM prints them while profiling "
              "memory at start-up)", file=sys.stderr)
        return
    _write_png(path, memory_picture(bars, log_memory_title(diagnosis.facts)).png)


def _write_png(path: Path, png: bytes) -> None:
    try:
        path.write_bytes(png)
    except OSError as exc:
        raise UserInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"picture written to {path}", file=sys.stderr)


def cmd_report_draft(args: argparse.Namespace) -> int:
    """`vllm-doctor report-draft [FILE|-]`: Markdown for a vLLM bug report from a (redacted) log."""
    from bot.present.report_draft import draft, environment_from_host

    env = None
    if args.host_report:
        from bot.runner.report import load_report

        report = load_report(args.host_report)
        if report.hosts:
            host = report.hosts[0]
            env = environment_from_host({c.id: c.facts for c in host.checks}, host.host)
    collect_env = None
    if args.collect_env:
        from bot.diagnosis.paste import decode_input

        # through the entry like every user text: decoded and redacted once
        collect_env = decode_input(_read_input(args.collect_env, _settings().max_input_bytes),
                                   _settings().max_input_bytes).text
    data = _read_input(args.file, _settings().max_input_bytes)
    pipeline = _pipeline()
    diagnosis = pipeline.match(data)
    from bot.models import LogFacts

    text = draft(diagnosis, diagnosis.facts or LogFacts(), env=env, collect_env=collect_env)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserInputError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(f"draft written to {args.output} (nothing was sent anywhere)", file=sys.stderr)
    else:
        print(text)
    return 0


def _want_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


# -- kb --------------------------------------------------------------------------------------------
def cmd_kb(args: argparse.Namespace) -> int:
    from kb.loader import DEFAULT_CASES_DIR, load_kb

    settings = _settings()
    cases_dir = Path(getattr(args, "dir", None) or settings.kb_dir or DEFAULT_CASES_DIR)
    from bot.settings import require_cases_dir

    require_cases_dir(cases_dir, "the kb lint argument" if getattr(args, "dir", None) else "VLLM_DOCTOR_KB_DIR")
    kb = load_kb(cases_dir, strict=False)
    if args.kb_cmd == "lint":
        from kb.loader import missing_chinese

        for err in kb.errors:
            print(f"error: {err}", file=sys.stderr)
        # One rule set with `kb add` (kb.schema.Case.missing_chinese): missing Chinese text is a note (the
        # English text is served meanwhile); --strict-zh makes it an error, as the project's own tests do for
        # the bundled cases (tests/test_kb_cases.py).
        untranslated = missing_chinese(cases_dir)
        for err in untranslated:
            print(f"{'error' if args.strict_zh else 'note'}: {err}", file=sys.stderr)
        failed = len(kb.errors) + (len(untranslated) if args.strict_zh else 0)
        print(f"{len(kb.cases)} cases valid, {len(kb.errors)} invalid, {len(untranslated)} without complete "
              f"Chinese text ({cases_dir})")
        return 1 if failed else 0
    if args.kb_cmd == "list":
        rows = [{"id": c.id, "title": c.title, "area": c.area} for c in sorted(kb.cases, key=lambda c: (c.area, c.id))]
        if args.json:
            print(json.dumps(rows, ensure_ascii=False))
        else:
            for r in rows:
                print(f"{r['area']:<12} {r['id']:<42} {r['title']}")
            print(f"{len(rows)} cases")
        return 0
    if args.kb_cmd == "show":
        case = kb.by_id().get(args.case_id)
        if case is None:
            raise UserInputError(f"no case with id {args.case_id!r}; see `vllm-doctor kb list`")
        print(json.dumps(case.model_dump(), ensure_ascii=False, indent=2))
        return 0
    from bot.cli.kb import run_kb_command  # kb add / search / stats (KB growth)

    return run_kb_command(args, settings)


# -- index -----------------------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    import time

    pipeline = _pipeline()
    # a bar while embedding, on a terminal only: piped output and CI logs stay clean
    pipeline.build_progress = sys.stdout.isatty() and sys.stderr.isatty()
    started = time.perf_counter()
    if args.rebuild:
        pipeline.rebuild_index()
    else:
        _ = pipeline.index
    elapsed = time.perf_counter() - started
    print(f"index ready: {len(pipeline.kb.cases)} cases in {pipeline.settings.index_dir} ({elapsed:.1f} s)")
    return 0


# -- eval ------------------------------------------------------------------------------------------
def cmd_train(args: argparse.Namespace) -> int:
    from bot.evaluation.ranker_train import run_train

    return run_train(args, _pipeline())


def cmd_eval(args: argparse.Namespace) -> int:
    from bot.evaluation.evaluate import run_eval

    if args.replay:
        from bot.evaluation.eval_replay import run_replay

        path = Path(args.labelled)
        if not path.is_file():
            raise UserInputError(f"no such file: {path}")
        return run_replay(path, _pipeline(), args.json, hold_out_cases=args.hold_out_cases)

    return run_eval(args, _pipeline())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-doctor", description="Diagnose vLLM deployment failures.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("explain", help="diagnose a pasted log (file or stdin)")
    p.add_argument("file", nargs="?", help="log file, or - for stdin (default)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--jsonl", metavar="IN.jsonl", help='batch: objects with "id" and "log"; one result line each')
    p.add_argument("--no-llm", action="store_true", help="KB-only answer, do not call the LLM")
    p.add_argument("--lang", choices=["en", "zh"], help="answer language (default: from the paste)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the GPU memory picture from the log's numbers")
    p.add_argument("--host-report", metavar="REPORT.json",
                   help="output of `vllm-doctor diagnose HOST --json`: its findings go into the LLM prompt")
    p.add_argument("--since", metavar="GOOD.log",
                   help="a log of a run that worked: what changed (versions, engine args, memory) is shown first")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("report-draft", help="draft a vLLM bug report (Markdown) from a log; nothing is sent")
    p.add_argument("file", nargs="?", help="log file, or - for stdin (default)")
    p.add_argument("--host-report", metavar="REPORT.json",
                   help="output of `vllm-doctor diagnose HOST --json`: the environment section comes from it "
                        "(the versions the log states win; both are shown when they differ)")
    p.add_argument("--collect-env", metavar="FILE",
                   help="output of `python -m vllm.collect_env` on the failing host: pasted as the environment")
    p.add_argument("-o", "--output", metavar="FILE.md", help="write the draft here instead of stdout")
    p.set_defaults(func=cmd_report_draft)

    p = sub.add_parser("kb", help="knowledge base: list, lint, show, add, search, stats")
    kb_sub = p.add_subparsers(dest="kb_cmd", required=True)
    q = kb_sub.add_parser("list", help="list cases")
    q.add_argument("--json", action="store_true")
    q = kb_sub.add_parser("lint", help="validate case files")
    q.add_argument("dir", nargs="?", help="cases directory (default: settings / bundled)")
    q.add_argument("--strict-zh", action="store_true",
                   help="cases without complete Chinese text are errors, not notes (the project's own KB)")
    q = kb_sub.add_parser("show", help="print one case as JSON")
    q.add_argument("case_id")
    try:
        from bot.cli.kb import configure_kb_parsers
    except ImportError:
        pass
    else:
        configure_kb_parsers(kb_sub)
    p.set_defaults(func=cmd_kb)

    p = sub.add_parser("index", help="build or refresh the search index")
    p.add_argument("--rebuild", action="store_true", help="re-embed everything")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("eval", help="evaluate retrieval on a labelled JSONL set")
    p.add_argument("labelled", help='JSONL with "id", "log", "expected" (case id or null)')
    p.add_argument("--json", action="store_true", help="print metrics as JSON")
    p.add_argument("--no-noisy", action="store_true", help="skip the noisy variant")
    p.add_argument("--healthy-dir", help="healthy start-up logs used to bury each log (noisy variant)")
    p.add_argument("--floor-top1", type=float, default=None, help="exit 1 if hybrid top-1 is below this")
    p.add_argument("--max-confident-wrong", type=float, default=None, help="exit 1 if above this")
    p.add_argument("--floor-abstain", type=float, default=None, help="exit 1 if abstain on uncovered is below")
    p.add_argument("--errors", action="store_true", help="list every miss")
    p.add_argument("--sweep", action="store_true", help="print a threshold sweep (calibration)")
    p.add_argument("--questions", help="question set scored beside the logs (default: questions.jsonl next to "
                   "LABELLED when it exists)")
    p.add_argument("--no-questions", action="store_true", help="score the logs only")
    p.add_argument("--folds", type=int, default=5, help="k of the grouped k-fold over source repositories")
    p.add_argument("--variants", help="comma list of clean,noisy,truncated,two-failures (default: all)")
    p.add_argument("--warnings", help="start-up warning lines mixed into the noisy variant "
                   "(default: startup_warnings.txt next to the labelled file)")
    p.add_argument("--replay", action="store_true", help="replay the logs in order through the team-learning loop "
                   "(unknowns clustered, cases drafted and accepted); last line: JSON figures")
    p.add_argument("--hold-out-cases", action="store_true", help="with --replay: remove every case the file expects "
                   "from the KB first (leave-cases-out), so covered logs are replayed as failures the KB does not know")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("train", help="train the learned ranker on labelled logs (kb/ranker/ranker.json)")
    p.add_argument("labelled", nargs="?", default="tests/eval/dev.jsonl", help="labelled JSONL (default: dev set)")
    p.add_argument("--out", help="artifact path (default: kb/ranker/ranker.json)")
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--cache", default=".cache/ranker-matching.pkl",
                   help="keep distillations and searches here between runs ('' for none)")
    p.add_argument("--kfold", action="store_true", help="print the held-back ablation table instead of training")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--blind", help="with --kfold: also score this blind file once, trained on all labelled logs")
    p.add_argument("--with-feedback", action="store_true",
                   help="also train on the team's 'Fixed it' / 'Didn't help' votes and accepted cases (the KB store)")
    p.add_argument("--adapter-lambda", type=float, default=0.1,
                   help="query adapter: pull of W toward the identity (indexer/query_adapter.py)")
    p.add_argument("--adapter-steps", type=int, default=300, help="query adapter: Adam steps")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("diagnose", help="run the host check catalogue (SSH or --local)")
    try:
        from bot.cli.diagnose import configure_parser as configure_diagnose
        from bot.cli.diagnose import run as run_diagnose
    except ImportError as exc:  # pragma: no cover - only while the runner package is absent
        p.set_defaults(func=lambda a, _e=exc: _unavailable("diagnose", _e))
    else:
        configure_diagnose(p)
        p.set_defaults(func=lambda a: run_diagnose(a, _settings()))

    p = sub.add_parser("serve", help="run the Slack bot (Socket Mode, or --http)")
    try:
        from bot.cli.serve import configure_parser as configure_serve
        from bot.cli.serve import run as run_serve
    except ImportError as exc:  # pragma: no cover
        p.set_defaults(func=lambda a, _e=exc: _unavailable("serve", _e))
    else:
        configure_serve(p)
        p.set_defaults(func=lambda a: run_serve(a, _settings()))
    return parser


def _unavailable(name: str, exc: Exception) -> int:
    print(f"error: `{name}` is not available in this installation ({exc})", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Third-party warnings (a library's deprecation notices) are for developers, not users: they go to the
    # log, shown with -v only.
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if args.verbose else logging.ERROR)
    try:
        return int(args.func(args) or 0)
    except DoctorError as exc:
        from bot.diagnosis.redact import redact

        print(f"error: {redact(str(exc))}", file=sys.stderr)  # a message may quote a setting (a database URL)
        return 2
    except BrokenPipeError:  # `vllm-doctor … | head`
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug or an unforeseen fault: one line, never a traceback
        logging.getLogger("bot.cli.main").debug("unexpected error", exc_info=True)
        from bot.diagnosis.redact import redact

        message = redact(str(exc))[:300]
        print(f"error: unexpected {type(exc).__name__}: {message} (run with -v for details)", file=sys.stderr)
        return 1


def entry() -> None:
    """Console-script entry point. After the work is done and output flushed, leave with os._exit:
    interpreter teardown with torch and tokenizers loaded takes ~1.5 s, a quarter of a cold run."""
    rc = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(rc)


if __name__ == "__main__":
    entry()
