"""Rules over facts (kb/rules.py): a parsed, type-checked expression form; no code is ever evaluated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kb.loader import KBError, load_case_file, load_kb
from kb.rules import RuleError, evaluate, explain, fact_names, parse_rule


@pytest.mark.parametrize(
    ("rule", "facts", "expected"),
    [
        ("gpu_blocks == 0 or kv_cache_gib <= 0", {"gpu_blocks": 0}, True),
        ("gpu_blocks == 0 or kv_cache_gib <= 0", {"kv_cache_gib": -1.57}, True),
        ("gpu_blocks == 0 or kv_cache_gib <= 0", {"gpu_blocks": 10, "kv_cache_gib": 3.0}, False),
        ("gpu_blocks == 0 or kv_cache_gib <= 0", {"gpu_blocks": 10}, None),  # kv unknown: not proven
        ("gpu_blocks * block_size < max_model_len", {"gpu_blocks": 512, "block_size": 16, "max_model_len": 32768}, True),
        ("gpu_blocks * block_size < max_model_len", {"gpu_blocks": 4096, "block_size": 16, "max_model_len": 32768}, False),
        ("gpu_blocks * block_size < max_model_len", {"gpu_blocks": 512, "max_model_len": 32768}, None),
        ("weights_gib >= total_gpu_memory_gib * gpu_memory_utilization",
         {"weights_gib": 21.5, "total_gpu_memory_gib": 23.58, "gpu_memory_utilization": 0.9}, True),
        ("dtype == 'bfloat16' and compute_capability < 8.0", {"dtype": "bfloat16", "compute_capability": "7.5"}, True),
        ("dtype == 'bfloat16' and compute_capability < 8.0", {"dtype": "float16", "compute_capability": "7.5"}, False),
        ("dtype == 'bfloat16' and compute_capability < 8.0", {"dtype": "float16"}, False),  # false and unknown
        ("num_attention_heads % tensor_parallel_size != 0", {"num_attention_heads": 52, "tensor_parallel_size": 8}, True),
        ("num_attention_heads % tensor_parallel_size != 0", {"num_attention_heads": 64, "tensor_parallel_size": 8}, False),
        ("num_attention_heads % tensor_parallel_size != 0", {"num_attention_heads": 64, "tensor_parallel_size": 0}, None),
        ("not (enforce_eager == true)", {"enforce_eager": False}, True),
        ("-kv_cache_gib > 1 + 0.5", {"kv_cache_gib": -2}, True),
    ],
)
def test_three_valued_evaluation(rule: str, facts: dict[str, object], expected: bool | None) -> None:
    assert evaluate(parse_rule(rule), facts) is expected  # type: ignore[arg-type]


def test_explain_shows_the_arithmetic() -> None:
    facts = {"gpu_blocks": 512, "block_size": 16, "max_model_len": 32768}
    assert explain(parse_rule("gpu_blocks * block_size < max_model_len"), facts) == (
        "gpu_blocks 512 × block_size 16 = 8,192 < max_model_len 32,768"
    )
    both = {"kv_cache_gib": -1.57, "gpu_blocks": 3}
    assert explain(parse_rule("gpu_blocks == 0 or kv_cache_gib <= 0"), both) == "kv_cache_gib -1.57 ≤ 0"
    assert fact_names(parse_rule("weights_gib >= total_gpu_memory_gib * 0.9")) == {
        "weights_gib", "total_gpu_memory_gib"}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("gpu_blockz == 0", "unknown fact 'gpu_blockz'"),
        ("__import__('os').system('x') == 0", "unexpected character '.'"),
        ("__import__ == 0", "unknown fact '__import__'"),
        ("gpu_blocks", "must be a comparison"),
        ("dtype < 8", "cannot compare text with number"),
        ("dtype * 2 > 1", "needs numbers"),
        ("gpu_blocks ** 2 > 1", "unexpected '*'"),
        ("gpu_blocks == 0 or", "ends too early"),
        ("gpu_blocks; == 0", "unexpected character ';'"),
        ("(gpu_blocks == 0", "missing ')'"),
        ("gpu_blocks == 0 " + "or gpu_blocks == 0 " * 30, "longer than"),
    ],
)
def test_bad_rules_are_named(rule: str, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        parse_rule(rule)


def test_unknown_fact_in_case_yaml_names_file_and_field(tmp_path: Path) -> None:
    src = Path("kb/cases/memory/kv-cache-no-memory.yaml").read_text(encoding="utf-8")
    broken = src.replace('when: "gpu_blocks <= 0 or kv_cache_gib <= 0"', 'when: "gpu_blokcs <= 0"')
    assert broken != src
    path = tmp_path / "memory" / "kv-cache-no-memory.yaml"
    path.parent.mkdir()
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(KBError) as err:
        load_case_file(path)
    text = str(err.value)
    assert "kv-cache-no-memory.yaml" in text and "rules" in text and "when" in text and "gpu_blokcs" in text


def test_bundled_rules_cover_the_issue_examples() -> None:
    by_id = load_kb().by_id()
    for case_id in ("kv-cache-no-memory", "max-model-len-exceeds-kv-cache", "weights-exceed-gpu-memory",
                    "bf16-unsupported-pre-ampere", "tp-exceeds-gpus", "tp-not-divide-heads"):
        assert by_id[case_id].rules, case_id
