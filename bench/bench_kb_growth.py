"""KB-growth benchmark: how long from "add this case" to "the next paste is answered with it".

    .venv/bin/python bench/bench_kb_growth.py [--runs N] [--concurrent N]

On a temporary copy of kb/cases and of the search index (the repository's KB is never written), with the
real MiniLM model, it measures per added case:
    lint       schema + KB rules (examples hit, healthy logs spared)           (the Slack form check)
    write      atomic YAML write under the file lock
    re-index   Pipeline.reload_if_changed: reload the KB, re-embed only the new case's documents
    match      the very next diagnose() of the case's own log, which must name the new case
and the wall time of N concurrent adds (threads), with a check that the index matches the files.
Target: re-index < 1 s. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def bench_case(n: int, tag: str):
    from kb.schema import Case

    word = f"Bench{tag}Fault{n:03d}"
    return Case.model_validate({
        "id": f"bench-{tag.lower()}-fault-{n:03d}",
        "title": f"Benchmark controller {n} trips with {word}",
        "title_zh": "基准测试故障",
        "area": "hardware",
        "severity": "low",
        "signatures": [rf"{word}: controller \d+ tripped"],
        "cause": f"A made-up failure used only by the KB-growth benchmark, number {n}, tag {tag}.",
        "fix": [{"text": f"Reset benchmark controller {n}."}],
        "examples": [
            {"source": f"https://example.invalid/bench/{tag}/{n}/a", "log": f"RuntimeError: {word}: controller 3 tripped\n"},
            {"source": f"https://example.invalid/bench/{tag}/{n}/b", "log": f"ERROR 01-02 03:04:05 [w.py:1] {word}: controller 7 tripped\n"},
        ],
        "references": [f"https://example.invalid/bench/{tag}/{n}/a", f"https://example.invalid/bench/{tag}/{n}/b"],
    })


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="cases added one after the other")
    ap.add_argument("--concurrent", type=int, default=20, help="cases added at once from threads")
    args = ap.parse_args()

    from bot.kb_growth import KBGrowth
    from bot.kb_growth.writer import Written
    from bot.pipeline import Pipeline
    from bot.settings import Settings
    from indexer.index import KBIndex
    from kb.loader import DEFAULT_CASES_DIR, load_kb

    base = Settings()
    tmp = Path(tempfile.mkdtemp(prefix="bench-kb-growth-"))
    try:
        shutil.copytree(DEFAULT_CASES_DIR, tmp / "cases")
        if Path(base.index_dir, "manifest.json").is_file():  # reuse the user's index: opening it re-embeds only changes
            shutil.copytree(base.index_dir, tmp / "index", ignore=shutil.ignore_patterns(".lock", "*.tmp"))
        settings = base.model_copy(update={"kb_dir": tmp / "cases", "index_dir": tmp / "index",
                                           "kb_db_path": tmp / "kb.sqlite3", "kb_git_commit": False})
        t = time.perf_counter()
        doctor = Pipeline.from_settings(settings)
        doctor.match("ValueError: No available memory for the cache blocks.")
        print(f"warm-up (index open/build + model load): {time.perf_counter() - t:.2f} s", file=sys.stderr)
        growth = KBGrowth(settings, doctor)
        growth.lint(doctor.kb.cases[0], replacing=doctor.kb.cases[0].id)  # distil the healthy logs/examples once

        lint_ms, write_ms, reindex_ms, match_ms, total_ms = [], [], [], [], []
        for n in range(args.runs):
            case = bench_case(n, "Seq")
            t0 = time.perf_counter()
            growth.validate(case)
            t1 = time.perf_counter()
            written: Written = growth.writer.add(case)
            t2 = time.perf_counter()
            doctor.reload_if_changed()
            t3 = time.perf_counter()
            best = doctor.match(case.examples[0].log).best
            t4 = time.perf_counter()
            assert best is not None and best.case_id == written.case.id and best.signature_hit, best
            lint_ms.append((t1 - t0) * 1000)
            write_ms.append((t2 - t1) * 1000)
            reindex_ms.append((t3 - t2) * 1000)
            match_ms.append((t4 - t3) * 1000)
            total_ms.append((t4 - t0) * 1000)

        cases = [bench_case(n, "Par") for n in range(args.concurrent)]
        errors: list[BaseException] = []

        def add(case) -> None:
            try:
                growth.add_case(case)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(c,)) for c in cases]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        concurrent_s = time.perf_counter() - t
        assert not errors, errors
        doctor.match("warm")
        on_disk = load_kb(settings.kb_dir)
        assert set(doctor.index.case_ids) == set(on_disk.by_id()) and doctor.kb.content_hash == on_disk.content_hash
        reopened = KBIndex.open(on_disk, Path(settings.index_dir), lambda: doctor._encoder())
        assert reopened.stats.encoded == 0, reopened.stats

        rows = [
            ("lint (schema + KB rules)", lint_ms),
            ("atomic write under the lock", write_ms),
            ("re-index (reload + embed new case)", reindex_ms),
            ("next paste matched (diagnose)", match_ms),
            ("add → matched, end to end", total_ms),
        ]
        print(f"KB: {len(on_disk.cases)} cases after the run; {args.runs} sequential adds\n")
        print("| measurement | p50 | p95 | max | unit |\n|---|---|---|---|---|")
        for name, values in rows:
            print(f"| {name} | {statistics.median(values):.1f} | {pct(values, 0.95):.1f} | {max(values):.1f} | ms |")
        print(f"| {args.concurrent} concurrent adds (threads), all indexed | {concurrent_s:.2f} | | | s |")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
