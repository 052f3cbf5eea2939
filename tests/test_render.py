"""Terminal rendering of a diagnosis: what a tired on-call engineer reads first."""

from __future__ import annotations

from bot.models import Diagnosis, Distilled, Evidence, LogLine, Match
from bot.present.render import render_text


class _Case:
    cause = "Nothing was left for the KV cache.\n  Second   line."
    cause_zh = ""  # no Chinese text yet: a Chinese answer shows the English

    class _Step:
        text_zh = ""

        def __init__(self, text: str, command: str | None) -> None:
            self.text, self.command = text, command

    fix = [_Step("Raise the memory share.", "vllm serve M --gpu-memory-utilization 0.95"), _Step("Check nvidia-smi.", None)]


class _Doctor:
    def case(self, case_id: str) -> _Case:
        assert case_id == "kv-cache-no-memory"
        return _Case()


def _diagnosis(verdict: str, score: float) -> Diagnosis:
    line = LogLine(7, "ValueError: No available memory for the cache blocks.", "root")
    match = Match(
        "kv-cache-no-memory", "No GPU memory left for the KV cache", "启动时没有剩余显存分配 KV 缓存", "memory", score,
        signature_hit=verdict != "unknown",
        evidence=(Evidence(7, line.text, "signature: No available memory for the cache blocks", "signature"),),
    )
    distilled = Distilled((line,), (line,), "q", total_lines=40, total_bytes=2000)
    return Diagnosis(verdict, (match,), distilled, elapsed_ms=12.0)


def test_match_shows_case_evidence_cause_and_numbered_fix_with_commands() -> None:
    text = render_text(_diagnosis("match", 0.93), _Doctor())
    lines = text.splitlines()
    assert lines[0] == "Verdict: MATCH — a known failure (0.93)"
    assert "1. kv-cache-no-memory — No GPU memory left for the KV cache  [memory, score 0.93, signature]" in lines
    assert "     L7: ValueError: No available memory for the cache blocks." in lines
    assert "   Cause: Nothing was left for the KV cache. Second line." in lines
    assert lines[lines.index("   Fix:") + 1 : lines.index("   Fix:") + 4] == [
        "     1. Raise the memory share.",
        "        $ vllm serve M --gpu-memory-utilization 0.95",
        "     2. Check nvidia-smi.",
    ]
    assert lines[-1] == "1 evidence lines kept of 40; 12 ms"
    assert "\x1b[" not in text


def test_unknown_shows_nearest_cases_only_as_possibly_related_and_leads_with_the_root_line() -> None:
    text = render_text(_diagnosis("unknown", 0.3), _Doctor())
    lines = text.splitlines()
    assert lines[1] == "The error to fix — L7: ValueError: No available memory for the cache blocks."
    assert "  - kv-cache-no-memory — No GPU memory left for the KV cache  [score 0.30]" in lines
    assert lines[lines.index("  - kv-cache-no-memory — No GPU memory left for the KV cache  [score 0.30]") - 1].startswith(
        "Possibly related cases (not established")
    assert "Fix:" not in text and "Cause:" not in text and "--gpu-memory-utilization 0.95" not in text
    assert "What to check first — GPU memory:" in lines
    assert 'Search for: "ValueError: No available memory for the cache blocks."' in lines
    assert "vllm-doctor kb add" in text and "report-draft" in text


def test_colour_only_when_asked() -> None:
    assert "\x1b[32m" in render_text(_diagnosis("match", 0.93), _Doctor(), color=True)


def test_facts_notes_and_also_noticed_are_printed() -> None:
    from dataclasses import replace

    from bot.models import LogFacts, Note

    d = _diagnosis("uncertain", 0.6)
    best = replace(d.matches[0], notes=(Note("upgrade", package="vllm", version="0.6.4", shown="0.5.3"),))
    noticed = Match("enforce-eager-cuda-graphs-off", "Slow decoding", "慢", "performance", 0.7, True,
                    evidence=(Evidence(2, "To see benefits of async output processing", "signature: x", "signature"),))
    d = replace(d, matches=(best,), also_noticed=(noticed,), notes=(Note("two_failures", line=4, case_id="x"),),
                facts=LogFacts(vllm_version="0.5.3", gpu_blocks=0, sources={"vllm_version": 1, "gpu_blocks": 3}))
    lines = render_text(d, _Doctor()).splitlines()
    assert ("note: two failures: the error on line 4 came first and reads like another problem; x is matched only "
            "after it") in lines
    assert "   note: fixed in vllm 0.6.4; this log shows 0.5.3 — upgrading is the fix" in lines
    zh = render_text(d, _Doctor(), lang="zh").splitlines()  # the notes are values: worded in the answer's language
    assert "   说明: 已在 vllm 0.6.4 中修复；这段日志显示的是 0.5.3 — 升级即可解决" in zh
    assert "  - enforce-eager-cuda-graphs-off — Slow decoding (L2)" in lines
    at = lines.index("What the log says about your setup:")
    assert lines[at + 1:at + 3] == ["  vLLM: 0.5.3", "  GPU blocks: 0"]


def test_evidence_labels_come_from_its_kind_not_the_wording_of_why() -> None:
    from bot.models import Evidence
    from bot.present.render import why_label

    worded = Evidence(3, "x", "fired: No available memory", "signature")  # `why` is for JSON; the kind decides
    assert why_label(worded, "en") == "signature: No available memory"
    assert why_label(worded, "zh").startswith("特征匹配")
    vocabulary = Evidence(3, "x", "signature: looks like one", "shared_terms")
    assert why_label(vocabulary, "en") is None and why_label(vocabulary, "en", verbose=True) == vocabulary.why
    assert why_label(Evidence(2, "x", "anything", "earlier_root"), "zh") == "更早的根本报错：请诊断这一行"
