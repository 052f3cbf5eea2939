"""Traceback fingerprints (bot/diagnosis/frames.py): reading the frames of a cut traceback, and scoring them against the
`frames:` of the cases, rarer names and deeper frames counting more. Plus the KB's own entries."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.diagnosis.distill import distill
from bot.diagnosis.frames import GENERIC, Frame, FrameIndex, cut_frames, read_frames
from bot.models import LogLine
from kb.loader import load_kb
from kb.schema import Case

KB = load_kb()

CUT = """INFO 06-01 10:00:00 api_server.py:200] vLLM API server version 0.4.0
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/arg_utils.py", line 318, in create_engine_configs
    model_config = ModelConfig(
  File "/usr/local/lib/python3.10/dist-packages/vllm/config.py", line 130, in __init__
    self._verify_quantization()
  File "/usr/local/lib/python3.10/dist-packages/vllm/config.py", line 204, in _verify_quantization
    raise ValueError("""


def _case(case_id: str, frames: list[str]) -> Case:
    base = KB.by_id()["kv-cache-no-memory"].model_dump()
    base.update(id=case_id, frames=frames)
    return Case.model_validate(base)


def test_cut_frames_are_innermost_first_with_their_code_lines() -> None:
    d = distill(CUT)
    assert d.truncated
    frames = cut_frames(d)
    assert [f.function for f in frames] == ["_verify_quantization", "__init__", "create_engine_configs"]
    assert frames[0].module == "vllm.config" and frames[0].line_no == 7
    assert frames[1].code == "self._verify_quantization()"
    # a complete traceback is not a cut one: its exception line says what failed
    assert cut_frames(distill(CUT + "\nValueError: Quantization method specified in the model config")) == []


def test_frame_terms_name_the_function_module_and_code_line() -> None:
    frame = Frame("<module>", "vllm.platforms.cuda", "import vllm._C  # noqa")
    assert {"vllm._C", "_C"} <= frame.terms()
    assert "<module>" not in frame.terms()  # every import traceback has it
    assert "tokenization_auto.from_pretrained" in Frame("from_pretrained", "transformers.models.auto.tokenization_auto").terms()


def test_read_frames_keeps_the_code_line_only_right_under_its_frame() -> None:
    lines = [
        LogLine(1, 'File "/x/vllm/a.py", line 1, in first', "frame"),
        LogLine(2, "call_second()", "context"),
        LogLine(5, "unrelated text", "context"),
    ]
    frames = read_frames(lines)
    assert len(frames) == 1 and frames[0].code == "call_second()"
    assert read_frames([lines[0], lines[2]])[0].code == ""


def test_rare_names_and_deep_frames_weigh_more() -> None:
    index = FrameIndex([
        _case("quant-a", ["_verify_quantization"]),
        _case("loader-b", ["load_model"]),
        _case("loader-c", ["load_model"]),
        _case("loader-d", ["load_model"]),
    ])
    inner_rare = index.scores([Frame("_verify_quantization", ""), Frame("load_model", "")])
    assert inner_rare["quant-a"] > inner_rare["loader-b"] > 0  # shared by three cases: weak
    inner_shared = index.scores([Frame("load_model", ""), Frame("_verify_quantization", "")])
    assert inner_shared["quant-a"] < inner_rare["quant-a"]  # one frame further out: less
    assert index.scores([Frame("forward", "")]) == {}
    assert [(f.function, names) for f, names in index.evidence([Frame("_verify_quantization", "")], "quant-a")] == [
        ("_verify_quantization", ["_verify_quantization"])
    ]


def test_frames_field_accepts_functions_and_dotted_modules_only() -> None:
    assert _case("ok-case", ["_verify_quantization", "vllm._C", "AutoTokenizer.from_pretrained"]).frames
    for bad in ("raise ValueError(", "vllm/config.py", "a..b", ""):
        with pytest.raises(ValidationError):
            _case("bad-case", [bad])


def test_bundled_frames_are_specific() -> None:
    """A frames entry names where this failure is raised: never a frame every traceback passes through, and no
    name shared by more than three cases (it would fingerprint nothing)."""
    seen: dict[str, list[str]] = {}
    for case in KB.cases:
        for name in case.frames:
            assert name not in GENERIC, (case.id, name)
            seen.setdefault(name, []).append(case.id)
        assert len(case.frames) == len(set(case.frames)), case.id
    crowded = {name: ids for name, ids in seen.items() if len(ids) > 3}
    assert not crowded, crowded
    assert sum(1 for c in KB.cases if c.frames) >= 60


def test_keywords_spelled_like_functions_are_fingerprints_too() -> None:
    case = _case("weights-a", []).model_copy(update={"keywords": ["make_layers", "host memory", "CUDA", "vllm._C"]})
    index = FrameIndex([case, _case("other-b", ["load_model"])])
    assert "make_layers" in index.terms["weights-a"]
    assert not {"host memory", "CUDA", "vllm._C"} & index.terms["weights-a"]  # prose and modules stay keywords
    cut = [Frame("make_layers", "vllm.model_executor.models.utils")]
    assert index.scores(cut) == {"weights-a": pytest.approx(1.0)}
