"""Cause-aware ranking with the real engine (MiniLM, FAISS, BM25, bundled KB): advisories and symptoms never
take the answer from a cause, fact rules prove cases without an error line, truncated pastes stay modest,
versions shown in the log are read against `fixed_in`."""

from __future__ import annotations

import pytest

from bot.cli.main import diagnosis_to_json
from bot.models import Note
from bot.present.i18n import note_text, t
from kb.loader import load_kb

KB = load_kb()
TRUNCATED_NOTE = Note("truncated")
# ... when the answer rests on an error line or a proven fact elsewhere in the paste, not on the cut frames
TRUNCATED_ANSWERED_NOTE = Note("truncated_answered")
CAUSES = [c for c in KB.cases if c.role == "cause"]
SECONDARY = [(c.id, i, ex.log) for c in KB.cases if c.role != "cause" for i, ex in enumerate(c.examples)]

# A real crash no case covers (a weight name missing from a checkpoint), for "advisory on top of a crash".
UNCOVERED_CRASH = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/vllm/model_executor/models/llama.py", line 455, in load_weights
    param = params_dict[name]
KeyError: 'model.layers.0.self_attn.qkv_proj.weight_scale_inv'"""
ENFORCE_EAGER = KB.by_id()["enforce-eager-cuda-graphs-off"].examples[1].log


def _lines(log: str) -> list[str]:
    return log.rstrip("\n").split("\n")


def _place(cause_log: str, extra_log: str, where: str) -> str:
    cause, extra = _lines(cause_log), _lines(extra_log)
    if where == "before":
        out = extra + cause
    elif where == "after":
        out = cause + extra
    else:
        mid = max(1, len(cause) // 2)
        out = cause[:mid] + extra + cause[mid:]
    return "\n".join(out)


# The cuda-graph-capture-oom and windows-native-unsupported examples are tracebacks cut before their
# exception line whose fingerprint is a frame: distill keeps every frame visible to signatures, and a line
# appended after the frames is not mistaken for the exception line.
MATRIX = [pytest.param(c, id=c.id) for c in CAUSES]


@pytest.mark.parametrize("cause", MATRIX)
def test_matrix_advisories_and_symptoms_never_displace_a_cause(doctor, cause) -> None:
    """Every advisory/symptom example inserted before, inside and after a cause's example."""
    log = cause.examples[0].log
    assert doctor.match(log).matches[0].case_id == cause.id  # the premise
    failures = []
    for sid, n, extra in SECONDARY:
        for where in ("before", "inside", "after"):
            d = doctor.match(_place(log, extra, where))
            top = d.matches[0].case_id if d.matches else None
            if top != cause.id:
                failures.append(f"{sid}#{n} {where}: top {top} ({d.verdict})")
    assert not failures, f"{cause.id}: " + "; ".join(failures)


def test_advisory_above_an_unexplained_crash_is_only_noticed(doctor) -> None:
    d = doctor.match(ENFORCE_EAGER + "\n" + UNCOVERED_CRASH)
    assert all(m.case_id != "enforce-eager-cuda-graphs-off" for m in d.matches[:1])
    assert d.verdict != "match" or d.best is None or d.best.case_id != "enforce-eager-cuda-graphs-off"
    assert [m.case_id for m in d.also_noticed] == ["enforce-eager-cuda-graphs-off"]
    alone = doctor.match(ENFORCE_EAGER)  # with nothing else wrong, the advisory is the answer
    assert alone.best is not None and alone.best.case_id == "enforce-eager-cuda-graphs-off" and not alone.also_noticed


def test_symptom_points_to_the_earlier_root_error(doctor) -> None:
    root = KB.by_id()["kv-cache-no-memory"].examples[0].log
    dead = KB.by_id()["engine-dead"].examples[0].log
    d = doctor.match(root + "\n" + dead)
    ids = [m.case_id for m in d.matches]
    assert ids[0] == "kv-cache-no-memory" and d.verdict == "match"
    assert "engine-dead" in ids
    alone = doctor.match(dead)
    assert alone.best is not None and alone.best.case_id == "engine-dead"
    assert Note("consequence_unseen") in alone.best.notes
    assert "does not show the earlier root error" in note_text(Note("consequence_unseen"), "en")
    # root error first, symptom later: the symptom's answer names that line
    crash = "ERROR 05-12 01:48:40 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered"
    d = doctor.match(crash + "\n" + dead)
    sym = next(m for m in d.matches if m.case_id == "engine-dead")
    assert sym.evidence[0].why.startswith("earlier root error") and sym.evidence[0].line_no == 1


def test_a_symptom_after_an_error_no_case_explains_is_never_a_match(doctor) -> None:
    """The engine surely died, but of the error above it: with no case for that error, the answer stays
    'uncertain' and its evidence starts at that line."""
    dead = KB.by_id()["engine-dead"].examples[0].log
    crash = "(VllmWorker rank=0 pid=430) ERROR 07-18 03:07:00 [multiproc_executor.py:380] AttributeError: 'tuple' object has no attribute 'ndim'"
    d = doctor.match(crash + "\n" + dead)
    assert d.best is not None and d.best.case_id == "engine-dead" and d.verdict != "match"
    assert d.best.evidence[0].why.startswith("earlier root error") and d.best.evidence[0].line_no == 1
    # the frames of its own traceback are no earlier error
    frames = (
        "ERROR 09-11 06:29:59 [async_llm.py:430]   File \"/usr/lib/python3/dist-packages/vllm/v1/engine/async_llm.py\", line 430, in generate\n"
        "ERROR 09-11 06:29:59 [async_llm.py:430]     raise self._format_exception(outputs) from None\n"
    )
    assert doctor.match(frames + dead).verdict == doctor.match(dead).verdict


def test_a_traceback_cut_at_the_engine_arguments_reads_as_another_vllm_release(doctor) -> None:
    """Cut while constructing EngineArgs (no deeper frame): the arguments themselves failed, the mark of code
    written for another release; a guess from frames, so never more than 'uncertain'."""
    log = (
        'File "/opt/env/lib/python3.10/site-packages/vllm/entrypoints/llm.py", line 129, in __init__\n'
        "    engine_args = EngineArgs("
    )
    d = doctor.match(log)
    assert d.best is not None and d.best.case_id == "vllm-api-version-mismatch" and d.verdict == "uncertain"
    assert d.best.evidence[0].why.startswith("frame: ") and "EngineArgs" in d.best.evidence[0].why


def test_an_engine_that_died_before_a_later_fingerprint_leaves_that_fingerprint_unconfirmed(doctor) -> None:
    """The engine died first (no cause shown); a fingerprint printed after it is a second failure, or
    its consequence: not a confident answer."""
    dead = "ERROR 05-12 01:48:40 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
    later = KB.by_id()["libcudnn-missing"].examples[0].log
    assert doctor.match(later).verdict == "match"
    assert doctor.match(dead + "\n" + later).verdict != "match"


def test_an_error_record_that_introduces_its_traceback_is_not_an_earlier_failure(doctor) -> None:
    log = (
        "2024-04-25T00:29:30-0600 [ERROR] [entry_service:svc:1] Initializing service error\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/app/utils.py", line 77, in __init__\n'
        "    self.completion = OpenAIServingCompletion(\n"
        "TypeError: OpenAIServingCompletion.__init__() got an unexpected keyword argument 'served_model'"
    )
    d = doctor.match(log)
    assert d.best is not None and d.best.case_id == "vllm-api-version-mismatch" and d.verdict == "match"


def test_a_symptom_that_is_the_whole_paste_is_not_displaced_by_a_look_alike_cause(doctor) -> None:
    """"failed to be inspected" alone reads like unsupported-architecture, but only the symptom explains it; with
    the subprocess's own error in the paste, that error's cause is the answer."""
    line = "ValueError: Model architectures ['Qwen2ForCausalLM'] failed to be inspected. Please check the logs for more details."
    alone = doctor.match(line)
    assert alone.best is not None and alone.best.case_id == "model-inspection-failed"
    assert Note("consequence_unseen") in alone.best.notes
    assert "does not show the earlier root error" in note_text(Note("consequence_unseen"), "en")
    child = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
    both = doctor.match(child + "\n" + line)
    assert both.best is not None and both.best.case_id == "cuda-runtime-lib-missing"


def test_fact_rule_proves_a_case_without_any_error_line(doctor) -> None:
    log = (
        "INFO 04-27 10:11:03 llm_engine.py:70] Initializing an LLM engine with config: model='/m/Qwen-7B', "
        "dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1, quantization=None, enforce_eager=False, seed=0)\n"
        "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256\n"
    )
    d = doctor.match(log)
    assert d.best is not None and d.best.case_id == "kv-cache-no-memory" and d.verdict == "match"
    first = d.best.evidence[0]
    assert first.why.startswith("fact rule") and "gpu_blocks 0" in first.text and first.line_no == 2
    assert d.facts is not None and d.facts.gpu_blocks == 0 and d.facts.max_model_len == 4096


def test_block_arithmetic_shows_in_the_evidence(doctor) -> None:
    log = (
        "INFO 02-14 03:50:41 api_server.py:529] args: Namespace(model='x/y', block_size=16, max_model_len=32768)\n"
        "INFO 02-14 03:51:41 gpu_executor.py:114] # GPU blocks: 512, # CPU blocks: 2048\n"
    )
    d = doctor.match(log)
    assert d.best is not None and d.best.case_id == "max-model-len-exceeds-kv-cache"
    assert d.best.evidence[0].text == "gpu_blocks 512 × block_size 16 = 8,192 < max_model_len 32,768"
    assert {e.line_no for e in d.best.evidence[1:3]} == {1, 2}


def _cut_before_exception(log: str) -> str:
    lines = _lines(log)
    last = max(i for i, ln in enumerate(lines) if ln.startswith("ValueError"))
    return "\n".join(lines[:last])


def test_truncated_paste_is_at_most_uncertain_and_says_so(doctor) -> None:
    full = KB.by_id()["bf16-unsupported-pre-ampere"].examples[1].log
    cut = _cut_before_exception(full)
    assert "Bfloat16 is only supported" not in cut
    d = doctor.match(cut)
    assert d.distilled.truncated and TRUNCATED_NOTE in d.notes
    assert d.best is not None and d.best.case_id == "bf16-unsupported-pre-ampere"  # from its frames
    assert d.verdict == "uncertain"
    assert not doctor.match(full).distilled.truncated


def test_truncated_paste_proven_by_a_fact_rule_may_match(doctor) -> None:
    cut = _cut_before_exception(KB.by_id()["bf16-unsupported-pre-ampere"].examples[1].log)
    facts = (
        "INFO 05-29 10:26:04 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: model='m', "
        "dtype=torch.bfloat16, max_seq_len=2048\n"
        "UserWarning: Found GPU0 Tesla K80 which is of cuda capability 3.7.\n"
    )
    d = doctor.match(facts + cut)
    assert d.best is not None and d.best.case_id == "bf16-unsupported-pre-ampere"
    assert d.verdict == "match" and TRUNCATED_ANSWERED_NOTE in d.notes and TRUNCATED_NOTE not in d.notes
    assert "compute_capability 3.7 < 8" in d.best.evidence[0].text


def _matcher_with(doctor, case_id: str, **update: object):
    """The engine's own index and KB, with one case's version fields changed (no file is written)."""
    from dataclasses import replace

    from bot.diagnosis.match import Matcher

    cases = tuple(c.model_copy(update=update) if c.id == case_id else c for c in doctor.kb.cases)
    return Matcher(replace(doctor.kb, cases=cases), doctor.index, doctor.thresholds)


def test_version_in_the_log_is_read_against_fixed_in(doctor) -> None:
    from bot.diagnosis.distill import distill
    from bot.diagnosis.facts import read_facts

    example = KB.by_id()["cuda-reinit-forked-subprocess"].examples[0].log
    matcher = _matcher_with(doctor, "cuda-reinit-forked-subprocess", fixed_in={"vllm": "0.6.4"})
    old = "INFO 07-25 12:00:00 api_server.py:219] vLLM API server version 0.5.3.post1\n" + example
    ranking = matcher.rank(distill(old), facts=read_facts(old))
    best = ranking.matches[0]
    assert best.case_id == "cuda-reinit-forked-subprocess"
    assert "fixed in vllm 0.6.4; this log shows 0.5.3.post1 — upgrading is the fix" in [note_text(n, "en") for n in best.notes]
    new = old.replace("0.5.3.post1", "0.7.2")
    ranked_new = matcher.rank(distill(new), facts=read_facts(new)).matches
    fixed = next(m for m in ranked_new if m.case_id == "cuda-reinit-forked-subprocess")
    assert fixed.score < best.score and fixed.scores["fixed_version"] < 0
    assert any(n.kind == "already_fixed" for n in fixed.notes)
    outside = _matcher_with(doctor, "cuda-reinit-forked-subprocess", affects={"vllm": "<0.6"})
    m = next(m for m in outside.rank(distill(new), facts=read_facts(new)).matches
             if m.case_id == "cuda-reinit-forked-subprocess")
    assert any("outside that range" in note_text(n, "en") for n in m.notes)


def test_two_failures_the_earliest_root_error_is_the_answer(doctor) -> None:
    first = KB.by_id()["kv-cache-no-memory"].examples[0].log
    second = KB.by_id()["cuda-reinit-forked-subprocess"].examples[0].log
    for a, b, expected in ((first, second, "kv-cache-no-memory"), (second, first, "cuda-reinit-forked-subprocess")):
        d = doctor.match(a + "\n" + b)
        ids = [m.case_id for m in d.matches]
        assert ids[0] == expected, ids
        assert {"kv-cache-no-memory", "cuda-reinit-forked-subprocess"} <= set(ids[:3])


def test_a_start_up_hint_alone_is_never_a_confident_answer(doctor) -> None:
    hint = ("INFO 10-01 12:00:00 model_runner.py:1000] To see benefits of async output processing, enable CUDA graph. "
            "Since, enforce-eager is enabled, async output processor cannot be used")
    d = doctor.match(hint + "\nthe server answers, but what is wrong with my deployment?")
    assert "enforce-eager-cuda-graphs-off" in [m.case_id for m in d.matches[:3]]
    assert d.verdict != "match", d.matches[0]


def test_a_fingerprint_after_an_unexplained_earlier_traceback_is_not_confident(doctor) -> None:
    later = KB.by_id()["kv-cache-no-memory"].examples[0].log
    d = doctor.match(UNCOVERED_CRASH + "\n" + later)
    assert d.matches[0].case_id == "kv-cache-no-memory" and d.verdict != "match"
    assert Note("two_failures", line=4, case_id="kv-cache-no-memory") in d.notes, d.notes
    alone = doctor.match(later + "\n" + UNCOVERED_CRASH)  # the fingerprint comes first: it is the answer
    assert alone.matches[0].case_id == "kv-cache-no-memory" and alone.verdict == "match"


def test_truncated_note_is_in_the_language_of_the_paste(doctor) -> None:
    """Ranking returns the note as a value; --json words it in the paste's language."""
    cut = _cut_before_exception(KB.by_id()["bf16-unsupported-pre-ampere"].examples[1].log)
    d = doctor.match("我的服务启动时报错了，下面是日志：\n" + cut)
    assert d.distilled.language == "zh" and d.distilled.truncated
    assert TRUNCATED_NOTE in d.notes and TRUNCATED_ANSWERED_NOTE not in d.notes
    shown = diagnosis_to_json(d)["notes"]
    assert t("note.truncated", "zh") in shown and t("note.truncated", "en") not in shown


def test_symptom_note_is_in_the_language_of_the_paste(doctor) -> None:
    symptom = KB.by_id()["engine-dead"].examples[0].log
    en = doctor.match(symptom)
    zh = doctor.match("服务跑着跑着就挂了，日志如下，请帮忙看看：\n" + symptom)
    engine_en = next(m for m in en.matches if m.case_id == "engine-dead")
    engine_zh = next(m for m in zh.matches if m.case_id == "engine-dead")
    assert any(n.kind.startswith("consequence") for n in engine_en.notes), engine_en.notes
    assert [n.kind for n in engine_zh.notes] == [n.kind for n in engine_en.notes]  # values: words are the edge's
    said_en = next(j for j in diagnosis_to_json(en)["matches"] if j["case_id"] == "engine-dead")["notes"]
    said_zh = next(j for j in diagnosis_to_json(zh)["matches"] if j["case_id"] == "engine-dead")["notes"]
    assert any(n.startswith("this is a consequence") for n in said_en), said_en
    assert zh.distilled.language == "zh" and any(n.startswith("这是后果") for n in said_zh), said_zh


# A traceback cut under `raise ValueError(` in _verify_quantization: its exception line is gone.
CUT_IN_VERIFY_QUANTIZATION = """INFO 06-01 10:00:00 api_server.py:200] vLLM API server version 0.4.0
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/arg_utils.py", line 318, in create_engine_configs
    model_config = ModelConfig(
  File "/usr/local/lib/python3.10/dist-packages/vllm/config.py", line 130, in __init__
    self._verify_quantization()
  File "/usr/local/lib/python3.10/dist-packages/vllm/config.py", line 204, in _verify_quantization
    raise ValueError("""


def test_a_cut_traceback_is_ranked_on_the_case_that_raises_in_its_frames(doctor) -> None:
    d = doctor.match(CUT_IN_VERIFY_QUANTIZATION)
    assert d.distilled.truncated and TRUNCATED_NOTE in d.notes and d.verdict == "uncertain"
    best = d.matches[0]
    assert best.case_id == "quantization-method-mismatch", [m.case_id for m in d.matches]
    assert best.scores.get("frames", 0) > 0.9  # the innermost frame is this case's fingerprint
    assert best.evidence[0].why == "frame: _verify_quantization" and best.evidence[0].line_no == 7


# Ordinary start-up warnings of a long paste, written as vLLM, transformers and torch print them.
_WARNINGS = [
    "WARNING 09-21 10:00:{s:02d} [config.py:254] bitsandbytes quantization is not fully optimized yet. The speed "
    "can be slower than non-quantized models.",
    "WARNING 09-21 10:00:{s:02d} [cuda.py:100] Possibly too large swap space. 16.00 GiB out of the 31.00 GiB total "
    "CPU memory is allocated for the swap space.",
    "WARNING 09-21 10:00:{s:02d} [cuda.py:80] To see benefits of async output processing, enable CUDA graph. Since, "
    "enforce-eager is enabled, async output processor cannot be used",
    "WARNING 09-21 10:00:{s:02d} [fp8.py:60] Using FP8 KV cache but no scaling factors provided. Defaulting to "
    "scaling factors of 1.0. This may lead to less accurate results!",
    "INFO 09-21 10:00:{s:02d} [core.py:100] Automatically detected platform cuda.",
]


def test_the_askers_own_line_is_not_drowned_by_start_up_warnings(doctor) -> None:
    title = "Address already in use: port 8000 stays busy for a minute after the server crashed"
    noise = [_WARNINGS[i % len(_WARNINGS)].format(s=i % 60) for i in range(400)]
    alone = doctor.match(title)
    buried = doctor.match("\n".join(noise[:200] + [title] + noise[200:]))
    assert alone.matches[0].case_id == "port-in-use"
    assert buried.matches[0].case_id == "port-in-use", [(m.case_id, m.score) for m in buried.matches[:3]]
    assert buried.matches[0].scores.get("plain_text") == 1.0  # found by searching that line on its own


def test_an_earlier_error_line_of_another_area_marks_two_failures(doctor) -> None:
    unauthorized = "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/x/y"
    later = KB.by_id()["kv-cache-no-memory"].examples[0].log
    d = doctor.match(unauthorized + "\n" + later)
    assert d.matches[0].case_id == "kv-cache-no-memory" and d.verdict == "uncertain"
    assert any(n.kind == "two_failures" and n.line == 1 for n in d.notes), d.notes
    assert doctor.match(later).verdict == "match"  # alone, the fingerprint is a confident answer


# A message wrapped by a narrow terminal / rich console: the fingerprint spans three bare lines.
WRAPPED_TP = """[05/02/25 10:11:12] ERROR    step 'generate_0' could not start       pipeline.py:88
load failed: The number of required
GPUs exceeds the total number of
available GPUs in the placement group.
"""


def test_a_fingerprint_wrapped_over_bare_lines_is_found_across_the_wrap(doctor) -> None:
    d = doctor.match(WRAPPED_TP)
    top = d.matches[0]
    assert top.case_id == "tp-exceeds-gpus" and top.signature_hit, [(m.case_id, m.score) for m in d.matches[:3]]
    assert top.evidence[0].line_no == 2
    assert "GPUs exceeds the total number of available GPUs" in top.evidence[0].text  # shown joined


def test_a_fingerprint_on_the_next_line_is_not_credited_to_the_line_above(doctor) -> None:
    # Two messages pasted one under the other: the second's fingerprint is its own line's, not a wrap's.
    d = doctor.distil("RuntimeError: the first thing failed here\n" + KB.by_id()["tp-exceeds-gpus"].examples[0].log)[0]
    hits = doctor.matcher.scanner.scan(d.cleaned)
    wrapped_hits: dict[str, list] = {}
    doctor.matcher.scanner.scan_wrapped(d.wrapped, wrapped_hits)
    assert "tp-exceeds-gpus" in hits
    assert "tp-exceeds-gpus" not in wrapped_hits  # the match lies wholly inside the second line


def test_a_start_up_hint_yields_to_what_the_asker_wrote(doctor) -> None:
    # Among start-up output that holds the enforce-eager hint (and transformers' bare deprecation notice), the
    # asker's one line reads like another case: the hint is noticed on the side, not the answer.
    # The whole paste reads more like the hint than like anything else; the asker's line alone does not.
    title = "vllm 0.5.1 AsyncEngineDeadError"
    graphs = ("INFO 09-21 10:00:{s:02d} [model_runner.py:1000] CUDA graphs can take additional 1~3 GiB memory per "
              "GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.")
    noise = [[*_WARNINGS, graphs][i % (len(_WARNINGS) + 1)].format(s=i % 60) for i in range(300)]
    noise[150] = "`torch_dtype` is deprecated! Use `dtype` instead!"
    d = doctor.match("\n".join(noise[:100] + [title] + noise[100:]))
    assert d.matches[0].case_id == "engine-dead", [(m.case_id, m.score) for m in d.matches[:3]]
    assert "enforce-eager-cuda-graphs-off" in [m.case_id for m in d.also_noticed]
    assert "enforce-eager-cuda-graphs-off" not in [m.case_id for m in d.matches]


def test_a_traceback_cut_off_by_later_output_is_still_read_from_its_frames(doctor) -> None:
    later = "\n".join(f"INFO 06-01 10:00:{s:02d} [core.py:100] Automatically detected platform cuda." for s in range(5))
    d = doctor.match(CUT_IN_VERIFY_QUANTIZATION + "\n" + later)
    assert d.matches[0].case_id == "quantization-method-mismatch", [(m.case_id, m.score) for m in d.matches[:3]]
    assert "frames" in d.matches[0].scores and d.verdict != "match"  # frames alone are a guess


def test_equal_scores_rank_alike_whatever_the_hash_seed(tmp_path) -> None:
    """Candidates with equal scores come out in one order in every process (they were gathered in a set, whose
    order follows PYTHONHASHSEED): the same paste gets the same answer twice."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    log = Path(__file__).parent / "fit_fixtures" / "nfs-stale-handle.log"
    orders = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-m", "bot", "explain", str(log), "--no-llm", "--json"],
                              capture_output=True, text=True, env=env, timeout=300, check=True)
        orders.append([m["case_id"] for m in json.loads(done.stdout)["matches"]])
    assert orders[0] and orders[0] == orders[1] == orders[2]


def test_a_proven_fact_rule_is_a_value_worded_from_the_case_in_the_answers_language(doctor) -> None:
    """The ranking says which rule held (Evidence.rule, its position in the case's rules); the presentation words
    it from the case: Chinese `says_zh` in a Chinese answer, the English `why` kept for --json."""
    from bot.present.render import render_text

    log = ("INFO 03-14 09:12:01 non-default args: {'model': 'Qwen/Qwen2.5-72B-Instruct', 'tensor_parallel_size': 8}\n"
           "INFO CUDA_VISIBLE_DEVICES=0,1,2,3\n"
           "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
           "group.\n")
    d = doctor.match(log)
    best = d.matches[0]
    [proven] = [e for e in best.evidence if e.rule is not None]
    rule = doctor.kb.by_id()[best.case_id].rules[proven.rule]
    assert rule.says_zh and proven.why == f"fact rule: {rule.says}"
    assert rule.says_zh in render_text(d, doctor, lang="zh")
    assert rule.says in render_text(d, doctor, lang="en")
    assert diagnosis_to_json(d)["matches"][0]["evidence"][0]["why"] == proven.why
