"""Block Kit builders: exact JSON (golden files), Slack's limits, escaping of every untrusted string.

Regenerate the golden files after an intended change:  UPDATE_GOLDEN=1 pytest tests/slack/test_slack_blocks.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fake_slack import SPECIAL_MENTION_RE, block_errors
from slack_sdk.models.blocks import Block

from bot.explain.explainer import Explanation
from bot.models import Diagnosis, Distilled, Evidence, LogLine, Match
from bot.slack.recent import AnswerRecord
from bot.slack.reply import answer as blocks
from bot.slack.reply import home as home_blocks
from bot.slack.reply import kit
from kb.schema import Case, Example, FixStep

GOLDEN = Path(__file__).resolve().parent / "golden"
INJECTION = "<!channel> <!here> <@U0EVIL99> <https://evil.example|click> & ``` ` *bold*"


def make_case(**overrides: Any) -> Case:
    values: dict[str, Any] = dict(
        id="kv-cache-no-memory",
        title="No GPU memory left for the KV cache at start-up",
        title_zh="启动时没有剩余显存分配 KV 缓存",
        area="memory",
        severity="high",
        signatures=["No available memory for the cache blocks"],
        cause="After loading the weights and profiling one forward pass, nothing was left for the KV cache.",
        fix=[
            FixStep(text="Raise the fraction of GPU memory vLLM may use.", command="vllm serve {model} --gpu-memory-utilization 0.95"),
            FixStep(text="Check that no other process holds GPU memory."),
        ],
        examples=[
            Example(source="https://github.com/vllm-project/vllm/issues/10439", log="ValueError: No available memory for the cache blocks."),
            Example(source="https://github.com/vllm-project/vllm/issues/27508", log="ValueError: No available memory for the cache blocks."),
        ],
        references=["https://github.com/vllm-project/vllm/issues/10439", "https://github.com/vllm-project/vllm/issues/27508"],
    )
    values.update(overrides)
    return Case(**values)


def make_match(case_id: str, title: str, score: float) -> Match:
    return Match(case_id=case_id, title=title, title_zh="标题", area="memory", score=score, signature_hit=score > 0.9,
                 evidence=(Evidence(3, "ValueError: No available memory", "signature", "signature"),))


def make_diagnosis(verdict: str = "match", lines: list[str] | None = None, language: str = "en") -> Diagnosis:
    lines = lines or [
        'File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 493, in raise_if_cache_size_invalid',
        'raise ValueError("No available memory for the cache blocks. "',
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.",
    ]
    evidence = tuple(LogLine(i + 10, text, "root" if "ValueError:" in text else "context") for i, text in enumerate(lines))
    distilled = Distilled(evidence=evidence, root_errors=evidence[-1:], query="q", total_lines=120, total_bytes=9000,
                          language=language)  # type: ignore[arg-type]
    matches = (
        make_match("kv-cache-no-memory", "No GPU memory left for the KV cache at start-up", 0.93),
        make_match("max-model-len-exceeds-kv-cache", "max_model_len is larger than the KV cache can hold", 0.41),
        make_match("cuda-graph-capture-oom", "Out of memory while capturing CUDA graphs", 0.2),
    )
    if verdict == "unknown":
        matches = tuple(Match(m.case_id, m.title, m.title_zh, m.area, m.score / 4, False) for m in matches)
    return Diagnosis(verdict=verdict, matches=matches, distilled=distilled, elapsed_ms=42.0)  # type: ignore[arg-type]


def llm_explanation(**overrides: Any) -> Explanation:
    values: dict[str, Any] = dict(
        case_id="kv-cache-no-memory",
        summary="The KV cache got no memory after the weights were loaded.",
        why="The 8B model in bf16 takes 15 GiB of the 16 GiB budget.",
        fix_steps=["Raise `--gpu-memory-utilization` to 0.95.", "Lower `--max-model-len` to 8192."],
        confidence="high",
        language="en",
        source="llm",
        model="chatops-llm",
    )
    values.update(overrides)
    return Explanation(**values)


def assert_valid(payload_blocks: list[dict[str, Any]], max_blocks: int = 50) -> None:
    assert block_errors(payload_blocks, max_blocks) == []
    for block in payload_blocks:  # slack_sdk's own model validation
        Block.parse(block).validate_json()  # type: ignore[union-attr]


def check_golden(name: str, payload: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(payload, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from {path} (UPDATE_GOLDEN=1 to accept)"


def test_answer_kb_only_golden() -> None:
    message = blocks.answer(make_diagnosis(), answer_id="a1b2c3", case=make_case())
    assert_valid(message.blocks)
    assert message.text == "Likely cause: No GPU memory left for the KV cache at start-up"
    check_golden("answer_kb_only", message.blocks)


def test_answer_while_llm_writes_golden() -> None:
    message = blocks.answer(make_diagnosis(), answer_id="a1b2c3", case=make_case(), streaming_text="The KV cache got")
    assert_valid(message.blocks)
    check_golden("answer_streaming", message.blocks)


def test_answer_with_llm_explanation_golden() -> None:
    message = blocks.answer(make_diagnosis(), answer_id="a1b2c3", case=make_case(), explanation=llm_explanation(),
                            asker="U0ALICE1")
    assert_valid(message.blocks)
    check_golden("answer_llm", message.blocks)


def test_no_confident_match_is_honest_golden() -> None:
    message = blocks.answer(make_diagnosis("unknown"), answer_id="a1b2c3")
    assert_valid(message.blocks)
    text = json.dumps(message.blocks)
    assert "No known case covers this failure" in text and "Possibly related cases" in text
    assert "Add as a KB case" in text and "What to check first" in text
    ids = [b.get("block_id") for b in message.blocks]
    assert ids.index("root") < ids.index("possibly_related") < ids.index("triage")
    checks = next(b for b in message.blocks if b.get("block_id") == "root_checks")["elements"][0]
    assert checks["action_id"] == "run_host_diagnostics" and checks["value"].startswith("a1b2c3 checks:")
    assert "Fix*" not in text  # a weak candidate's fix is never shown as if it applied
    check_golden("answer_unknown", message.blocks)


def test_chinese_paste_shows_the_chinese_title_first() -> None:
    message = blocks.answer(make_diagnosis(language="zh"), answer_id="x", case=make_case())
    assert "标题 (No GPU memory left" in message.blocks[0]["text"]["text"]


def test_home_and_help_golden() -> None:
    recent = [
        AnswerRecord("a1", "U0ALICE1", "C0CHAN01", "1.1", "1.2", "match", "kv-cache-no-memory", "No GPU memory <left>",
                     "ev", created=1000.0, feedback={"U0ALICE1": "fixed"}),
        AnswerRecord("a2", "U0ALICE1", "D0DM0001", "2.1", "2.2", "unknown", None, None, "ev", created=1000.0 - 7200),
    ]
    view = home_blocks.home_view(user_id="U0ALICE1", kb_size=51, recent=recent, llm_enabled=True, runner_enabled=False,
                            max_bytes=4 * 1024 * 1024, watch_channels=["CWATCH01"], now=1030.0)
    assert_valid(view["blocks"], max_blocks=100)
    check_golden("home", view)


def test_every_untrusted_string_is_escaped() -> None:
    """Log lines, case text (the KB grows from Slack), LLM text and the asker field all carry an injection."""
    diagnosis = make_diagnosis(lines=[INJECTION, f"ValueError: {INJECTION}"])
    case = make_case(title=f"Title {INJECTION}", cause=f"Cause {INJECTION}",
                     fix=[FixStep(text=f"Step {INJECTION}", command=f"echo {INJECTION}")])
    match = make_match(case.id, case.title, 0.95)
    diagnosis = Diagnosis("match", (match, *diagnosis.matches[1:]), diagnosis.distilled, 1.0)
    explanation = llm_explanation(summary=f"Summary {INJECTION}", why=f"Why {INJECTION}",
                                  fix_steps=[f"Fix {INJECTION}"], note=f"Note {INJECTION}")
    for message in (
        blocks.answer(diagnosis, answer_id="x", case=case),
        blocks.answer(diagnosis, answer_id="x", case=case, streaming_text=f"Streaming {INJECTION}"),
        blocks.answer(diagnosis, answer_id="x", case=case, explanation=explanation, asker="<!channel>"),
        kit.notice(INJECTION),
        kit.input_error(INJECTION),
    ):
        assert_valid(message.blocks)
        for text in [message.text, json.dumps(message.blocks, ensure_ascii=False)]:
            assert not SPECIAL_MENTION_RE.search(text), text
            assert "<https://evil" not in text


@pytest.mark.parametrize("size", [10, 3_000, 50_000, 400_000])
def test_long_material_stays_within_slack_limits(size: int) -> None:
    line = "ERROR 11-18 18:07:28 engine.py:366] ValueError: <&> " + "x" * 80
    lines = [line] * (size // len(line) + 1)
    diagnosis = make_diagnosis(lines=lines)
    long_case = make_case(cause="c" * 5000, fix=[FixStep(text="t" * 590, command="y" * 5000) for _ in range(20)])
    long_llm = llm_explanation(summary="s" * 5000, why="<" * 5000, fix_steps=["f" * 500] * 50, note="n" * 5000)
    for message in (
        blocks.answer(diagnosis, answer_id="x", case=long_case),
        blocks.answer(diagnosis, answer_id="x", case=long_case, streaming_text="w" * 100_000),
        blocks.answer(diagnosis, answer_id="x", case=long_case, explanation=long_llm),
    ):
        assert_valid(message.blocks)
        assert len(message.text) <= kit.FALLBACK_TEXT_MAX
        assert len(json.dumps(message.blocks)) < 13_000  # Slack's undocumented aggregate limit (msg_blocks_too_long)
        if size > 3_000:
            assert message.cut  # → the full log goes to a file in the thread


def test_host_facts_note_shows_only_while_the_llm_explains_and_is_escaped() -> None:
    note = blocks.host_facts_note(f"gpu-01 {INJECTION}", 1_700_000_000.0)
    assert note.startswith(":desktop_computer: Using host facts from the diagnosis of gpu-01 ")
    assert note.endswith("at <!date^1700000000^{time}|22:13 UTC>")  # the reader's time zone; UTC fallback
    assert not SPECIAL_MENTION_RE.search(note)

    def source(**kw: Any) -> str:
        message = blocks.answer(make_diagnosis(), answer_id="a1", case=make_case(), host_facts_note=note, **kw)
        assert not block_errors(message.blocks, kit.MESSAGE_BLOCKS_MAX)
        return json.dumps(next(b for b in message.blocks if b.get("block_id") == "source"))

    assert "Using host facts" in source(llm_pending=True)
    assert "Using host facts" in source(streaming_text="The KV cache")
    assert "Using host facts" not in source()  # KB-only answer: the facts were not used


def test_setup_facts_notes_and_also_noticed_are_shown_and_escaped() -> None:
    """What the log says about the setup, the matcher's notes and advisories noticed on the side: all carry
    text read from the paste, so all go through escaping."""
    from dataclasses import replace

    from bot.models import LogFacts, Note

    base = make_diagnosis()
    best = replace(base.matches[0], notes=(Note("upgrade", package="vllm", version="0.6.4", shown=INJECTION),))
    noticed = make_match("enforce-eager-cuda-graphs-off", f"Slow decoding {INJECTION}", 0.7)
    facts = LogFacts(vllm_version="0.5.3", model=f"org/{INJECTION}", gpu_blocks=0, max_model_len=4096)
    diagnosis = replace(base, matches=(best, *base.matches[1:]), also_noticed=(noticed,), facts=facts,
                        notes=(Note("truncated"), Note("two_failures", line=3, case_id=INJECTION)))
    message = blocks.answer(diagnosis, answer_id="x", case=make_case())
    assert_valid(message.blocks)
    by_id = {b.get("block_id"): json.dumps(b, ensure_ascii=False) for b in message.blocks}
    assert "What the log says about your setup" in by_id["setup"]
    assert "vLLM: 0.5.3" in by_id["setup"] and "GPU blocks: 0" in by_id["setup"] and "max_model_len: 4096" in by_id["setup"]
    assert "Also noticed" in by_id["noticed"] and "enforce-eager-cuda-graphs-off" in by_id["noticed"]
    assert "fixed in vllm 0.6.4" in by_id["case_notes"]
    assert "ends inside a traceback" in by_id["verdict"] and "two failures" in by_id["verdict"]
    text = json.dumps(message.blocks, ensure_ascii=False)
    assert not SPECIAL_MENTION_RE.search(text) and "<https://evil" not in text
