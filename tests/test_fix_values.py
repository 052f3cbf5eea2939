"""Fix commands fitted to the log (bot/diagnosis/fix_values.py, issue 25 item 3): the model id, TP size and computed
values of this deployment in every command, with the arithmetic and its lines; `<name>` where the log is
silent, never a guessed number."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.cli.main import diagnosis_to_json
from bot.diagnosis.facts import read_facts
from bot.diagnosis.fix_values import fill, fit_values, note_lines, step_lines
from bot.models import LogFacts
from bot.present.render import render_text
from kb.schema import PLACEHOLDERS, FixStep

FIXTURES = Path(__file__).parent / "fit_fixtures"
TP8_LOG = (FIXTURES / "kv-shortfall-tp8-qwen72b.log").read_text(encoding="utf-8")
MODEL = "Qwen/Qwen2.5-72B-Instruct"
# vLLM V0's wording of the same shortfall (vllm/worker/worker.py raise_if_cache_size_invalid)
V0_LOG = """\
INFO 11-02 10:01:11 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='Qwen/Qwen2.5-72B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=8, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
INFO 11-02 10:03:40 distributed_gpu_executor.py:57] # GPU blocks: 1340, # CPU blocks: 6553
ERROR 11-02 10:03:41 engine.py:160] ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (21440). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_tp8_log_fills_model_tp_and_a_max_model_len_that_fits_with_its_line() -> None:
    values = fit_values(read_facts(TP8_LOG))
    assert values.values["model"].value == MODEL
    assert values.values["tp"].value == "8"
    fitted = values.values["max_model_len_fit"]
    assert int(fitted.value) <= 21440
    assert fitted.lines == (_line_of(TP8_LOG, "the estimated maximum model length is 21440"),)
    command = "vllm serve {model} --tensor-parallel-size {tp} --max-model-len {max_model_len_fit}"
    assert fill(command, values) == f"vllm serve {MODEL} --tensor-parallel-size 8 --max-model-len 21440"
    [how] = step_lines(command, values)
    assert how.startswith("21440 = ") and f"(L{fitted.lines[0]})" in how


def test_utilization_holds_weights_activation_and_the_kv_cache_needed() -> None:
    facts = read_facts(TP8_LOG)
    fitted = fit_values(facts).values["gpu_memory_utilization_fit"]
    share = float(fitted.value)
    assert facts.total_gpu_memory_gib and facts.weights_gib and facts.activation_peak_gib and facts.kv_cache_needed_gib
    needed = facts.weights_gib + facts.activation_peak_gib + (facts.non_torch_gib or 0) + facts.kv_cache_needed_gib
    assert share * facts.total_gpu_memory_gib >= needed  # the share holds what the log says it must
    assert share > (facts.gpu_memory_utilization or 0) and share <= 0.95
    assert _line_of(TP8_LOG, "1.25 GiB KV cache is needed") in fitted.lines
    assert _line_of(TP8_LOG, "total_gpu_memory (44.39GiB)") in fitted.lines


def test_a_share_over_the_limit_is_left_unfilled_with_a_note() -> None:
    facts = LogFacts(total_gpu_memory_gib=23.5, weights_gib=14.9, activation_peak_gib=4.0, non_torch_gib=0.4,
                     kv_cache_needed_gib=16.0, sources={"kv_cache_needed_gib": 9})
    values = fit_values(facts)
    assert "gpu_memory_utilization_fit" not in values.values
    assert fill("--gpu-memory-utilization {gpu_memory_utilization_fit}", values) == \
        "--gpu-memory-utilization <gpu_memory_utilization_fit>"
    assert any("lower --max-model-len" in n for n in note_lines(values))


def test_v0_wording_gives_the_same_fit() -> None:
    values = fit_values(read_facts(V0_LOG))
    assert values.values["max_model_len_fit"].value == "21440"
    assert values.values["tp"].value == "8" and values.values["model"].value == MODEL
    assert read_facts(V0_LOG).vllm_version == "0.6.3.post1"


def test_nothing_stated_shows_named_gaps_never_a_number() -> None:
    values = fit_values(read_facts("Traceback (most recent call last):\nValueError: boom\n"))
    command = "vllm serve {model} --tensor-parallel-size {tp} --max-model-len {max_model_len_fit}"
    assert fill(command, values) == "vllm serve <model> --tensor-parallel-size <tp> --max-model-len <max_model_len_fit>"
    assert step_lines(command, values)  # says the <…> values must be filled in


def test_tp_fit_divides_the_heads_and_fits_the_gpus() -> None:
    log = ("ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (6).\n"
           "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 \n")
    values = fit_values(read_facts(log))
    assert values.values["tp_fit"].value == "5"
    assert values.values["tp"].value == "6"  # as the log states it, for commands that keep it
    assert "40 attention heads" in step_lines("--tensor-parallel-size {tp_fit}", values)[0]


def test_two_model_ids_say_which_is_used_and_why() -> None:
    log = ("$ vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 8\n"
           "INFO Initializing a V1 LLM engine (v0.9.0.1) with config: model='Qwen/Qwen2.5-7B-Instruct', "
           "tensor_parallel_size=4\n")
    values = fit_values(read_facts(log))
    assert values.values["model"].value == MODEL
    notes = note_lines(values)
    assert any("Qwen/Qwen2.5-7B-Instruct (L2)" in n and f"use {MODEL} (L1" in n for n in notes), notes
    assert any("tensor_parallel_size" in n and "4 (L2)" in n for n in notes), notes


def test_every_placeholder_has_a_filler() -> None:
    """A LogFacts stating everything fills every name the schema allows (no placeholder is dead)."""
    facts = LogFacts(
        vllm_version="0.9.0.1", model="/data/models/qwen", dtype="bfloat16", quantization="awq",
        kv_cache_dtype="fp8", max_model_len=32768, tensor_parallel_size=8, pipeline_parallel_size=1,
        gpu_memory_utilization=0.45, gpu_count=8, num_attention_heads=64, total_gpu_memory_gib=44.39,
        weights_gib=16.95, activation_peak_gib=1.69, non_torch_gib=0.52, kv_cache_gib=0.82,
        kv_cache_needed_gib=1.25, estimated_max_model_len=21440, port=8001,
    )
    assert set(fit_values(facts).values) == set(PLACEHOLDERS)


def test_schema_allows_only_known_placeholders() -> None:
    assert FixStep(text="Serve it.", command="vllm serve {model} --port {port}").placeholders() == ["model", "port"]
    with pytest.raises(ValidationError, match="unknown placeholder"):
        FixStep(text="Serve it.", command="vllm serve {modle}")
    with pytest.raises(ValidationError, match=r"\{model\} instead of MODEL"):
        FixStep(text="Serve it.", command="vllm serve MODEL")
    FixStep(text="JSON is not a placeholder.", command="""vllm serve {model} --hf-overrides '{"a": 1}'""")


def test_kb_commands_use_no_bare_model(doctor) -> None:
    bare = [(c.id, s.command) for c in doctor.kb.cases for s in c.fix if s.command and re.search(r"\bMODEL\b", s.command)]
    assert not bare


@pytest.fixture(scope="module")
def tp8(doctor):
    diagnosis = doctor.match(TP8_LOG.encode())
    return diagnosis, doctor.explain(diagnosis, use_llm=False)  # the KB-only answer


def test_tp8_answer_text_json_and_kb_answer_carry_this_deployment(doctor, tp8) -> None:
    diagnosis, explanation = tp8
    assert diagnosis.best is not None and diagnosis.best.case_id == "max-model-len-exceeds-kv-cache"
    text = render_text(diagnosis, doctor, explanation)
    commands = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("$ vllm serve")]
    assert commands and all(MODEL in c and "--tensor-parallel-size 8" in c for c in commands), commands
    assert "MODEL" not in text and "{" not in "\n".join(commands) and "<" not in "\n".join(commands)
    lengths = [int(n) for c in commands for n in re.findall(r"--max-model-len (\d+)", c)]
    assert lengths and all(n <= 21440 for n in lengths)
    assert f"(L{_line_of(TP8_LOG, 'estimated maximum model length is')})" in text
    case = doctor.case(diagnosis.best.case_id)
    out = diagnosis_to_json(diagnosis, explanation, "en", case=case)
    json_commands = [s["command"] for s in out["fix"] if s["command"]]
    assert json_commands and all(MODEL in c and "--tensor-parallel-size 8" in c for c in json_commands)
    assert out["fix_values"]["max_model_len_fit"]["value"] == "21440"
    # the KB-only answer (and the LLM prompt: the same filled cases) quote the filled commands
    assert any(f"vllm serve {MODEL} --tensor-parallel-size 8 --max-model-len 21440" in s
               for s in explanation.fix_steps), explanation.fix_steps


def test_llm_prompt_kb_context_holds_the_filled_command(doctor, tp8) -> None:
    from bot.explain.prompt import build_draft

    diagnosis, _ = tp8
    cases = doctor._top_cases(diagnosis)
    user = build_draft(diagnosis, cases, None, "en").messages[1]["content"]
    assert f"vllm serve {MODEL} --tensor-parallel-size 8 --max-model-len 21440" in user
    assert "{model}" not in user


def test_logfacts_new_fields_are_read_from_real_lines() -> None:
    facts = read_facts(TP8_LOG)
    assert facts.port == 8001 and facts.estimated_max_model_len == 21440 and facts.kv_cache_needed_gib == 1.25
    assert facts.launch_command is not None and facts.launch_command.startswith("vllm serve " + MODEL)
    assert facts.vllm_version == "0.9.0.1"
    assert {f.name for f in fields(LogFacts)} >= {"conflicts", "launch_command"}


def test_slack_answer_shows_filled_commands_and_the_arithmetic(doctor, tp8) -> None:
    from bot.slack.reply.answer import answer

    diagnosis, _ = tp8
    assert diagnosis.best is not None
    message = answer(diagnosis, answer_id="fit1", case=doctor.case(diagnosis.best.case_id))
    by_id = {b.get("block_id"): b for b in message.blocks}
    fix = by_id["fix"]["text"]["text"]
    assert f"vllm serve {MODEL} --tensor-parallel-size 8 --max-model-len 21440" in fix
    assert "{" not in fix and "MODEL" not in fix
    how = " ".join(e["text"] for e in by_id["fix_values"]["elements"])
    assert "21440 = " in how and f"(L{_line_of(TP8_LOG, 'estimated maximum model length is')})" in how


def test_a_case_filed_from_slack_writes_model_as_the_placeholder() -> None:
    from bot.kb_growth.form import parse_fix

    steps = parse_fix("Serve with a shorter context.\n$ vllm serve MODEL --max-model-len 8192\n$ ls MODEL_DIR")
    assert steps == [{"text": "Serve with a shorter context.",
                      "command": "vllm serve {model} --max-model-len 8192\nls {model_dir}"}]
    FixStep(**steps[0])  # and the schema takes it
