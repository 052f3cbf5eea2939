"""Distillation: table tests on real log shapes, bad input, and linear behaviour."""

from __future__ import annotations

import pytest

from bot.diagnosis.distill import decode_input, distill
from bot.errors import BinaryInput, EmptyInput, InputTooLarge
from indexer.text import clean_line, mask

MAX = 32 * 1024 * 1024


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            'vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks.',
            "ValueError: No available memory for the cache blocks.",
        ),
        (
            "(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708] RuntimeError: boom",
            "RuntimeError: boom",
        ),
        (
            "(RayWorkerWrapper pid=5678, ip=10.0.0.2) ERROR 05-01 12:00:00 worker_base.py:145] torch.OutOfMemoryError: x",
            "torch.OutOfMemoryError: x",
        ),
        ("  | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] EngineCore hit an exception", "EngineCore hit an exception"),
        ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 08-01 01:02:03 [api_server.py:1] vLLM API server", "vLLM API server"),
        ("2024-05-01 12:00:00,123 - vllm - ERROR - NCCL error", "NCCL error"),
        # colour codes that lost their ESC byte on the way, and a line-number column from a numbered log viewer
        ("[1;36m(APIServer pid=1)[0;0m ERROR 09-11 06:29:59 [async_llm.py:430] EngineDeadError: x", "EngineDeadError: x"),
        ("3597\t(APIServer pid=18801) ERROR 03-01 13:30:11 [serving.py:214] Traceback (most recent call last):",
         "Traceback (most recent call last):"),
        ("[0m plain [1m words", "plain [1m words"),
        ("plain line stays", "plain line stays"),
    ],
)
def test_clean_line_strips_prefixes(raw: str, expected: str) -> None:
    assert clean_line(raw).strip() == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Tried to allocate 2.12 GiB (GPU 0; 23.69 GiB total capacity)", "Tried to allocate <num> GiB (GPU <num> ; <num> GiB total capacity)"),
        ("at 0x7f3a12345678 from 192.168.1.5:29500", "at <hex> from <ip>"),
        ('File "/usr/lib/python3/dist-packages/vllm/worker.py", line 4', 'File " <path>/worker.py ", line <num>'),
        ("vLLM version 0.10.1", "vLLM version <num>"),
    ],
)
def test_mask(line: str, expected: str) -> None:
    assert mask(line) == expected


TRACEBACK = """INFO 04-28 15:55:40 model_runner.py:1] Loading model weights took 13.5 GB
ERROR 04-28 15:55:45 worker_base.py:157] Error executing method initialize_cache. This might cause deadlock in distributed execution.
ERROR 04-28 15:55:45 worker_base.py:157] Traceback (most recent call last):
ERROR 04-28 15:55:45 worker_base.py:157]   File "/root/env/lib/python3.10/site-packages/vllm/worker/worker_base.py", line 149, in execute_method
ERROR 04-28 15:55:45 worker_base.py:157]     return executor(*args, **kwargs)
ERROR 04-28 15:55:45 worker_base.py:157]   File "/root/env/lib/python3.10/site-packages/vllm/worker/worker.py", line 335, in raise_if_cache_size_invalid
ERROR 04-28 15:55:45 worker_base.py:157]     raise ValueError("No available memory for the cache blocks. "
ERROR 04-28 15:55:45 worker_base.py:157] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
(VllmWorker rank=1 pid=222) ERROR 04-28 15:55:45 worker_base.py:157] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
"""


def test_traceback_root_error_and_frames_with_line_numbers() -> None:
    d = distill(TRACEBACK)
    roots = [r.text for r in d.root_errors]
    assert roots[-1].startswith("ValueError: No available memory for the cache blocks")
    root = d.root_errors[-1]
    assert root.line_no == 8  # 1-based line in the original paste
    frames = [e for e in d.evidence if e.kind == "frame"]
    assert any("raise_if_cache_size_invalid" in f.text for f in frames)
    # the rank-1 repeat of the same error is folded into the first occurrence
    assert sum("No available memory" in e.text and e.kind == "root" for e in d.evidence) == 1
    assert "raise_if_cache_size_invalid" in d.query
    assert "<path>" not in d.query.split("\n")[0]


def test_single_line_paste() -> None:
    d = distill("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")
    assert [r.line_no for r in d.root_errors] == [1]
    assert "CUDA out of memory" in d.query


def test_error_at_end_of_100kb_info_noise() -> None:
    noise = "\n".join(f"INFO 01-01 00:00:{i % 60:02d} [loader.py:{i}] Loading shard {i} of 900" for i in range(2000))
    text = noise + "\nRuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    d = distill(text)
    assert len(text) > 100_000
    assert d.root_errors[-1].line_no == 2001
    assert len(d.evidence) <= 40


def test_crlf_and_ansi_are_cleaned() -> None:
    text = "\x1b[31mERROR 01-01 00:00:00 [x.py:1] RuntimeError: NCCL error\x1b[0m\r\nnext\r\n"
    d = distill(text)
    assert d.root_errors[0].text == "RuntimeError: NCCL error"
    assert "\r" not in d.query and "\x1b" not in d.query


def test_chinese_surrounding_text_sets_language() -> None:
    text = "大佬们，启动的时候报错了，怎么解决？\nValueError: No available memory for the cache blocks."
    d = distill(text)
    assert d.language == "zh"
    assert distill("ValueError: No available memory for the cache blocks.").language == "en"


def test_log_without_errors_keeps_its_tail() -> None:
    d = distill("hello\nthe weather is nice today\nall good")
    assert d.evidence and d.evidence[-1].text == "all good"
    assert d.root_errors == ()


def test_secrets_are_redacted_in_evidence() -> None:
    d = distill("OSError: 401 Client Error for url https://huggingface.co/x token=hf_abcdefghijklmnopqrstuvwxyz0123456789")
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in " ".join(e.text for e in d.evidence)
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in d.query


@pytest.mark.parametrize("data", [b"", b"   \n\t\n", ""])
def test_empty_input_is_refused_clearly(data) -> None:
    with pytest.raises(EmptyInput, match="empty"):
        decode_input(data, MAX)


def test_binary_input_is_refused_clearly() -> None:
    with pytest.raises(BinaryInput, match="binary"):
        decode_input(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4, MAX)


def test_too_large_input_is_refused_with_sizes() -> None:
    with pytest.raises(InputTooLarge, match=r"limit is 1 MB"):
        decode_input(b"x" * 2_000_001, 1_000_000)


def test_invalid_utf8_is_decoded_with_a_note() -> None:
    paste = decode_input(b"RuntimeError: bad byte \xff\xfe here\n" + "日志".encode("utf-16-le"), MAX)
    assert "RuntimeError" in paste.text
    assert paste.notes


def test_gbk_chinese_is_decoded() -> None:
    raw = "启动失败：ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0".encode("gbk")
    paste = decode_input(raw, MAX)
    assert paste.text.startswith("启动失败")
    assert "GB18030" in paste.notes[0]


# -- cut and completed tracebacks ---------------------------------------------------------------------
_FRAMES = (
    'ERROR 04-09 20:31:10 [core.py:949] Traceback (most recent call last):\n'
    'ERROR 04-09 20:31:10 [core.py:949]   File "/usr/lib/vllm/v1/worker/gpu_worker.py", line 588, in compile_or_warm_up_model\n'
    'ERROR 04-09 20:31:10 [core.py:949]     cuda_graph_memory_bytes = self.model_runner.capture_model()\n'
    'ERROR 04-09 20:31:10 [core.py:949]   File "/usr/lib/vllm/v1/worker/gpu_model_runner.py", line 5684, in capture_model\n'
)


def test_frames_of_a_completed_traceback_are_visible_to_signatures() -> None:
    d = distill(_FRAMES + "ERROR 04-09 20:31:10 [core.py:949] torch.OutOfMemoryError: CUDA out of memory.\n")
    assert [r.text for r in d.root_errors] == ["torch.OutOfMemoryError: CUDA out of memory."]
    scanned = {c.line_no: c.text for c in d.cleaned}
    assert scanned[4].endswith("in capture_model") and scanned[2].endswith("in compile_or_warm_up_model")
    assert not d.truncated


def test_a_line_after_cut_frames_is_not_taken_for_their_exception() -> None:
    d = distill(_FRAMES + "ERROR 04-09 20:31:12 [core.py:1] EngineCore encountered a fatal error.\nINFO done\n")
    texts = [r.text for r in d.root_errors]
    assert "EngineCore encountered a fatal error." in texts  # still read, as its own line
    assert all(r.kind != "frame" for r in d.root_errors)
    assert any(c.text.endswith("in capture_model") for c in d.cleaned)
    assert any(e.kind == "frame" and e.line_no == 4 for e in d.evidence)  # the cut traceback's last frames
    assert not d.truncated  # the paste goes on after the cut


@pytest.mark.parametrize(
    "tail",
    [
        "",  # ends on the frame
        "    self._capture_cudagraphs(\n",  # ... or on its code line
        "    self._capture_cudagraphs(\n    ^^^^^^^^^^^^^^^^^^^^^^^^\n",  # ... and Python 3.11's caret marks
    ],
)
def test_paste_ending_inside_a_traceback_is_truncated(tail: str) -> None:
    assert distill(_FRAMES + tail).truncated
    assert not distill(_FRAMES + tail + "RuntimeError: CUDA error: out of memory\n").truncated


def test_query_puts_errors_before_warnings_that_mention_errors() -> None:
    d = distill(
        "WARNING 11-18 18:07:21 arg_utils.py:1075] Async output processing is not supported; error rates may vary\n"
        "ValueError: No available memory for the cache blocks.\n"
    )
    assert d.query.splitlines()[0].startswith("ValueError: No available memory")


def test_a_paste_starting_inside_a_traceback_keeps_its_frames_and_their_module_paths() -> None:
    log = (
        "(EngineCore pid=86) ERROR 06-01 13:18:12 [core.py:1341]   File \"/usr/local/lib/python3.12/dist-packages/"
        "vllm/lora/worker_manager.py\", line 122, in _load_adapter\n"
        "(EngineCore pid=86) ERROR 06-01 13:18:12 [core.py:1341]     peft_helper.validate_legal(self.lora_config)\n"
        "INFO 06-01 13:18:13 [launcher.py:80] Shutting down FastAPI HTTP server."
    )
    d = distill(log)
    frames = [c for c in d.cleaned if c.kind == "frame"]
    assert [f.line_no for f in frames] == [1] and not d.root_errors  # a frame, not a root error nor context
    assert any(e.line_no == 1 for e in d.evidence)
    assert d.query.startswith("vllm lora worker_manager _load_adapter")  # the module path stands in for the lost error


def test_python_warnings_are_quiet_and_go_last_in_the_query() -> None:
    log = (
        "/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package is deprecated.\n"
        "  warnings.warn(\n"
        "[W921 21:36:17.897675918 ProcessGroupNCCL.cpp:941] Warning: WORK_NCCL is not set\n"
        "Illegal Instruction (Core Dumped) when running the CPU image"
    )
    d = distill(log)
    levels = {e.line_no: e.level for e in d.evidence}
    assert levels[1] == levels[2] == levels[3] == "warning" and levels[4] == ""
    assert d.query.startswith("Illegal Instruction")


def test_message_after_headerless_frames_is_kept_without_any_keyword():
    """A paste that starts inside a traceback: the line after the frames is the exception message, even when
    it holds no keyword (a Rust panic surfaced by tokenizers); an unindented code line between two frames
    (a paste that lost its indentation) is not."""
    log = (
        'File "/x/site-packages/transformers/tokenization_utils_fast.py", line 111, in __init__\n'
        "fast_tokenizer = TokenizerFast.from_file(fast_tokenizer_file)\n"
        'File "/x/site-packages/tokenizers/__init__.py", line 7, in from_file\n'
        "    return load(path)\n"
        "data did not match any variant of untagged enum ModelWrapper at line 1251019 column 3\n"
    )
    texts = [c.text for c in distill(log).cleaned]
    assert any(t.startswith("data did not match any variant") for t in texts), texts
    assert not any(t.startswith("fast_tokenizer = ") for t in texts), texts


def test_exception_line_with_its_message_on_the_next_line_is_one_root_error():
    log = (
        "RuntimeError:\n"
        "The detected CUDA version (12.1) mismatches the version that was used to compile\n"
        "PyTorch (11.7). Please make sure to use the same CUDA versions.\n"
    )
    roots = [r.text for r in distill(log).root_errors]
    assert roots[0].startswith("RuntimeError: The detected CUDA version (12.1) mismatches"), roots


def test_a_short_paste_of_logger_lines_only_is_quiet_only():
    hint = "WARNING 11-13 09:12:40 config.py:405] To see benefits of async output processing, enable CUDA graph."
    assert distill(hint + "\n").quiet_only
    assert not distill(hint + "\nwhat is wrong with my deployment?").quiet_only
    assert not distill((hint + "\n") * 60).quiet_only  # a start-up log, not a question about one line


def test_a_wrapped_error_message_is_joined_for_signatures_only() -> None:
    log = "ERROR: load failed: The number of required\nGPUs exceeds the total number of\navailable GPUs in the group.\nnext"
    d = distill(log)
    assert [r.text for r in d.root_errors] == ["load failed: The number of required"]  # roots stay as pasted
    (w,) = d.wrapped
    assert w.line.line_no == 1 and w.head_len == len("load failed: The number of required")
    assert w.line.text.endswith("available GPUs in the group.")  # stops at the sentence end, not at "next"


@pytest.mark.parametrize(
    "below",
    [
        "INFO 01-01 00:00:00 [core.py:1] a logger line starts its own record",
        '  File "/x/vllm/config.py", line 3, in f',
        "ValueError: another exception line",
        "    indented code",
        "",
        "CUDA kernel errors might be asynchronously reported at some other API call",
    ],
)
def test_a_line_that_starts_its_own_record_is_not_a_wrap(below: str) -> None:
    assert distill(f"RuntimeError: something failed while loading\n{below}").wrapped == ()


def test_abi_tags_and_exit_boilerplate_say_nothing_about_the_failure() -> None:
    # "cpython-39-x86_64-linux-gnu" made a pydantic import error look like a libstdc++ one
    assert "linux-gnu" not in mask("cannot import name 'RootModel' from 'pydantic' (/e/pydantic/__init__.cpython-39-x86_64-linux-gnu.so)")
    assert "__init__.so" in mask("(/e/pydantic/__init__.cpython-311-aarch64-linux-gnu.so)")
    exit_warning = ("[rank0]:[W806 21:01:24.443786282 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() "
                    "was not called before program exit, which can leak resources.")
    d = distill("ValueError: this model only supports versions 2.0 and 2.6\n" + exit_warning)
    assert "destroy_process_group" not in d.query


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("`torch_dtype` is deprecated! Use `dtype` instead!", "warning"),  # transformers logs it without a prefix
        ("[DEPRECATED] Block manager v1 has been removed", "warning"),
        ("the flag is deprecated and the server failed to start", ""),  # an error word: not a mere notice
    ],
)
def test_a_bare_deprecation_notice_is_a_warning(line: str, level: str) -> None:
    (kept,) = [e for e in distill(line).evidence if e.text == line]
    assert kept.level == level


def test_an_exception_class_named_failed_is_a_root_error() -> None:
    d = distill("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nsome later line")
    assert [r.text for r in d.root_errors][:1] == ["torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"]


# A notebook's traceback (IPython's layout), shaped like those pasted from Jupyter.
_IPYTHON = """---------------------------------------------------------------------------
ValueError                                Traceback (most recent call last)
Cell In[1], line 4
      1 from vllm import LLM
----> 4 llm = LLM(model="org/model", tensor_parallel_size=4)

File ~/envs/vllm/lib/python3.12/site-packages/vllm/utils.py:1022, in deprecate_args.<locals>.wrapper.<locals>.inner(*args, **kwargs)
   1020         )
-> 1022 return fn(*args, **kwargs)

File ~/envs/vllm/lib/python3.12/site-packages/vllm/model_executor/models/registry.py:317, in _ModelRegistry._raise_for_unsupported(self, architectures)
"""


def test_an_ipython_traceback_is_read_like_a_python_one() -> None:
    whole = distill(_IPYTHON + "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.\n")
    assert [r.text for r in whole.root_errors] == [
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now."
    ]
    assert not whole.truncated
    assert "_raise_for_unsupported" in whole.query  # the innermost frame's function, not its signature's arguments
    cut = distill(_IPYTHON)
    assert cut.truncated  # the exception line is missing: no code line or cell header stands in for it
    assert not any("Cell In" in r.text or "---->" in r.text for r in cut.root_errors)
    frames = [c.text for c in cut.cleaned if c.kind == "frame"]
    assert any('File "~/envs/vllm/lib/python3.12/site-packages/vllm/utils.py", line 1022, in deprecate_args' in f
               for f in frames)
    # the line that ran is the frame's code line; the numbered lines around it are IPython's context only
    assert any(f.strip() == "return fn(*args, **kwargs)" for f in frames)
    assert "from vllm import LLM" not in cut.query and "1020" not in " ".join(c.text for c in cut.cleaned)


def test_ipython_layout_is_only_rewritten_where_a_notebook_printed_it() -> None:
    line = "File ~/notes.txt:12, in a sentence someone wrote"
    assert [c.text for c in distill(line).cleaned] == [line]  # no cell header, no IPython traceback: left as is


def test_a_headerless_frame_keeps_the_code_line_under_it() -> None:
    """A paste that starts at a frame and ends on its code line: that line is the statement that failed (the
    cut-traceback matcher reads it), kept as a frame line as a walked traceback keeps it, never a root error."""
    log = (
        'File "/opt/env/lib/python3.10/site-packages/vllm/entrypoints/llm.py", line 129, in __init__\n'
        "    engine_args = EngineArgs("
    )
    d = distill(log)
    assert [(c.line_no, c.kind) for c in d.cleaned] == [(1, "frame"), (2, "frame")]
    assert d.cleaned[1].text.strip() == "engine_args = EngineArgs(" and not d.root_errors


def test_a_traceback_indented_as_a_whole_ends_at_its_exception_line() -> None:
    """pip prints a failed build's output indented: the exception line sits at the header's indentation."""
    log = (
        "      Traceback (most recent call last):\n"
        '        File "/t/cpp_extension.py", line 2058, in _join_cuda_home\n'
        "          raise EnvironmentError('CUDA_HOME environment variable is not set. ')\n"
        "      OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n"
        "      [end of output]"
    )
    d = distill(log)
    assert not d.truncated
    assert [r.text for r in d.root_errors][:1] == ["OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root."]
