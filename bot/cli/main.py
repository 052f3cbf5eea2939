"""`vllm-doctor` command line. Imports stay lazy so `kb list` / `kb lint` never load torch.

    vllm-doctor explain [FILE|-] [--json] [--no-llm] [--host-report REPORT.json]   diagnose one log
    vllm-doctor explain --no-llm --jsonl IN.jsonl         batch contract: one JSON object per input line
    vllm-doctor kb list [--json] | kb lint [DIR] | kb show ID
    vllm-doctor index [--rebuild]
    vllm-doctor eval LABELLED.jsonl [--json] [--floor …]
    vllm-doctor diagnose HOST|GROUP | --local             remote checks (bot/cli/diagnose.py)
    vllm-doctor serve [--http --port N]                   the Slack bot (bot/cli/serve.py)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.errors import DoctorError, UserInputError
from bot.models import Paste

if TYPE_CHECKING:
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
def _read_input(path: str | None) -> bytes:
    if path in (None, "-"):
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror}") from exc


def match_to_json(m: Any, full: bool = True) -> dict[str, Any]:
    out = {
        "case_id": m.case_id,
        "title": m.title,
        "score": m.score,
        "evidence": [{"line": e.line_no, "text": e.text, "why": e.why} for e in m.evidence],
    }
    if full:
        out.update(title_zh=m.title_zh, area=m.area, signature_hit=m.signature_hit, scores=m.scores)
    return out


def diagnosis_to_json(d: Any, explanation: Any = None) -> dict[str, Any]:
    return {
        "verdict": d.verdict,
        "matches": [match_to_json(m) for m in d.matches],
        "evidence": [{"line": e.line_no, "text": e.text, "kind": e.kind} for e in d.distilled.evidence],
        "language": d.distilled.language,
        "notes": list(d.distilled.notes),
        "total_lines": d.distilled.total_lines,
        "elapsed_ms": round(d.elapsed_ms, 1),
        "explanation": explanation.to_json() if explanation is not None else None,
    }


def _run_jsonl(args: argparse.Namespace) -> int:
    """Batch contract: exactly one JSON object per input line on stdout, in order; nothing else."""
    pipeline = _pipeline()
    src = sys.stdin if args.jsonl == "-" else open(args.jsonl, encoding="utf-8", errors="replace")
    out = sys.stdout
    with src:
        for n, raw in enumerate(src, 1):
            if not raw.strip():
                obj: dict[str, Any] = {"id": None, "verdict": "unknown", "matches": [], "error": f"line {n}: empty line"}
                out.write(json.dumps(obj, ensure_ascii=False) + "\n")
                continue
            item_id: Any = None
            try:
                item = json.loads(raw)
                if not isinstance(item, dict):
                    raise ValueError("not a JSON object")
                item_id = item.get("id")
                log = item.get("log")
                if not isinstance(log, str):
                    raise ValueError('missing string field "log"')
                d = pipeline.match(log)
                obj = {
                    "id": item_id,
                    "verdict": d.verdict,
                    "matches": [match_to_json(m, full=False) for m in d.matches],
                }
            except (ValueError, UserInputError) as exc:
                obj = {"id": item_id, "verdict": "unknown", "matches": [], "error": f"line {n}: {exc}"}
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            out.flush()
    return 0


def _host_facts(path: str | None) -> list[str] | None:
    """Facts from a `vllm-doctor diagnose HOST --json` report, for the LLM prompt."""
    if path is None:
        return None
    from bot.runner.report import load_report

    return load_report(path).facts_for_prompt().splitlines()


def cmd_explain(args: argparse.Namespace) -> int:
    if args.jsonl:
        if args.host_report:
            raise UserInputError("--host-report explains one log; it does not apply to --jsonl batches")
        return _run_jsonl(args)
    host_facts = _host_facts(args.host_report)  # a bad report fails before the (slower) diagnosis
    data = _read_input(args.file)
    pipeline = _pipeline()
    explained = pipeline.explain(Paste(data, language=args.lang, host_facts=host_facts), use_llm=not args.no_llm)
    diagnosis, explanation = explained.diagnosis, explained.explanation
    if explanation is None and host_facts is not None:
        print("note: --host-report is only used by the LLM explanation, which is off "
              f"({'--no-llm' if args.no_llm else 'VLLM_BASE_URL is not set'})", file=sys.stderr)
    if args.json:
        print(json.dumps(diagnosis_to_json(diagnosis, explanation), ensure_ascii=False, indent=2))
    else:
        from bot.render import render_text

        print(render_text(diagnosis, pipeline, explanation, color=_want_color()))
    return 0


def _want_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


# -- kb --------------------------------------------------------------------------------------------
def cmd_kb(args: argparse.Namespace) -> int:
    from kb.loader import DEFAULT_CASES_DIR, load_kb

    settings = _settings()
    cases_dir = Path(getattr(args, "dir", None) or settings.kb_dir or DEFAULT_CASES_DIR)
    kb = load_kb(cases_dir, strict=False)
    if args.kb_cmd == "lint":
        for err in kb.errors:
            print(f"error: {err}", file=sys.stderr)
        print(f"{len(kb.cases)} cases valid, {len(kb.errors)} invalid ({cases_dir})")
        return 1 if kb.errors else 0
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
    started = time.perf_counter()
    if args.rebuild:
        pipeline.rebuild_index()
    else:
        _ = pipeline.index
    print(f"index ready: {len(pipeline.kb.cases)} cases in {pipeline.settings.index_dir} ({time.perf_counter() - started:.1f} s)")
    return 0


# -- eval ------------------------------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    from bot.evaluate import run_eval

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
    p.add_argument("--host-report", metavar="REPORT.json",
                   help="output of `vllm-doctor diagnose HOST --json`: its findings go into the LLM prompt")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("kb", help="knowledge base: list, lint, show, add, search, stats")
    kb_sub = p.add_subparsers(dest="kb_cmd", required=True)
    q = kb_sub.add_parser("list", help="list cases")
    q.add_argument("--json", action="store_true")
    q = kb_sub.add_parser("lint", help="validate case files")
    q.add_argument("dir", nargs="?", help="cases directory (default: settings / bundled)")
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
    p.set_defaults(func=cmd_eval)

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
    try:
        return int(args.func(args) or 0)
    except DoctorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `vllm-doctor … | head`
        return 0
    except KeyboardInterrupt:
        return 130


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
