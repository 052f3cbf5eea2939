"""Root line and component (bot/diagnosis/root.py) and the triage data behind them (kb/triage/): no model needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.diagnosis.distill import distill
from bot.diagnosis.facts import read_facts
from bot.diagnosis.root import classify, frame_file, read_root, search_phrase
from bot.models import COMPONENTS, Evidence, Match, Note
from bot.present.i18n import note_text, t
from bot.present.render import shown_scores
from kb.glossary import default_glossary
from kb.loader import load_kb
from kb.triage import default_component_map, load_triage, read_only

REPO = Path(__file__).resolve().parents[1]


def _read(text: str, verdict: str = "unknown", matches: tuple[Match, ...] = ()):
    return read_root(distill(text), read_facts(text), verdict, matches)  # type: ignore[arg-type]


WRAPPED = """\
INFO 03-14 09:12:01 [__init__.py:239] Automatically detected platform cuda.
ERROR 03-14 09:12:41 [multiproc_executor.py:396] WorkerProc failed to start.
ERROR 03-14 09:12:41 [multiproc_executor.py:396] Traceback (most recent call last):
ERROR 03-14 09:12:41 [multiproc_executor.py:396]   File "/x/vllm/worker.py", line 370, in worker_main
ERROR 03-14 09:12:41 [multiproc_executor.py:396]     worker = WorkerProc(*args, **kwargs)
ERROR 03-14 09:12:41 [multiproc_executor.py:396] ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (8000).
ERROR 03-14 09:12:43 [core.py:396] EngineCore failed to start.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_exception_under_wrapper_lines_is_the_root() -> None:
    reading = _read(WRAPPED)
    assert reading.root is not None and reading.kind == "exception"
    assert reading.root.line == 6 and reading.root.text.startswith("ValueError: The model's max seq len")
    assert reading.root.component == "gpu-memory"


def test_a_bare_killed_is_the_root_only_when_nothing_better_exists() -> None:
    alone = _read("INFO 01-01 [a.py:1] Loading weights\nKilled\n")
    assert alone.root is not None and alone.root.text == "Killed" and alone.kind == "wrapper"
    assert alone.root.component == "host-memory"
    better = _read("Killed\nOSError: [Errno 28] No space left on device: '/root/.cache/huggingface/x'\n")
    assert better.root is not None and "No space left" in better.root.text


@pytest.mark.parametrize(("text", "component"), [
    ("INFO 01-01 [gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 2048\n", "gpu-memory"),
    ("WARNING 01-01 [ray_utils.py:200] The object store is using /tmp instead of /dev/shm because /dev/shm has only "
     "67108864 bytes available. This will harm performance!\n", "parallelism"),
])
def test_an_info_or_warning_line_that_states_the_cause_is_the_root(text: str, component: str) -> None:
    reading = _read(text)
    assert reading.root is not None and reading.root.line == 1 and reading.kind == "notice"
    assert reading.root.component == component


def test_no_root_when_the_paste_is_cut_before_its_exception_or_holds_only_warnings() -> None:
    cut = _read("Traceback (most recent call last):\n  File \"/x/vllm/engine.py\", line 3, in run\n    self.load()\n"
                "  File \"/x/vllm/loader.py\", line 9, in load\n    open(path)\n")
    assert cut.root is None and cut.missing == "truncated"
    warned = _read("WARNING 03-14 09:12:13 [config.py:1] Casting torch.bfloat16 to torch.float16.\n"
                   "INFO 03-14 09:12:14 [api.py:2] Started server process\n")
    assert warned.root is None and warned.missing == "warnings_only"
    assert "WARNING" in t("root.missing.warnings_only", "en")


def test_the_root_says_where_it_was_raised() -> None:
    root = _read(WRAPPED).root
    assert root is not None and root.raised_at is not None  # the frame above the ValueError, two lines up
    assert (root.raised_at.file, root.raised_at.line, root.raised_at.function, root.raised_at.log_line) == \
        ("vllm/worker.py", 370, "worker_main", 4)  # a source checkout: from the library directory down
    installed = _read('Traceback (most recent call last):\n'
                      '  File "/home/alice/venv/lib/python3.12/site-packages/vllm/config.py", line 1834, in __post_init__\n'
                      '    raise ValueError(\n'
                      'ValueError: OpenTelemetry is not available.\n').root
    assert installed is not None and installed.raised_at is not None
    assert installed.raised_at.file == "vllm/config.py" and "alice" not in installed.raised_at.file
    generated = _read('  File "/x/site-packages/vllm/config.py", line 9, in build\n    return Cfg()\n'
                      '  File "<string>", line 6, in __init__\nValueError: bad value\n').root
    assert generated is not None and generated.raised_at is not None and generated.raised_at.function == "build"
    bare = _read("ERROR 01-01 [a.py:1] something\nValueError: no traceback above\n").root
    assert bare is not None and bare.raised_at is None
    chained = _read('  File "/x/site-packages/vllm/a.py", line 3, in f\nKeyError: 1\n'
                    "During handling of the above exception, another exception occurred:\n"
                    "RuntimeError: failed in the handler\n")
    assert chained.root is not None and chained.root.text.startswith("KeyError") and chained.root.raised_at is not None


@pytest.mark.parametrize(("path", "shown", "app"), [
    ("/usr/local/lib/python3.12/dist-packages/vllm/config.py", "vllm/config.py", False),
    ("/home/bob/venv/lib/python3.11/site-packages/verl/workers/fsdp_workers.py", "verl/workers/fsdp_workers.py", True),
    ("/usr/lib/python3.12/multiprocessing/process.py", "multiprocessing/process.py", False),
    ("/workspace/vllm/vllm/entrypoints/utils.py", "vllm/entrypoints/utils.py", False),  # a source checkout
    ("/home/bob/projects/eval/run_eval.py", "run_eval.py", True),  # the user's own script: no user path shown
    ("D:\\envs\\x\\Lib\\subprocess.py", "subprocess.py", False),
])
def test_frame_files_are_shown_from_their_package_and_told_apart_from_the_application(
        path: str, shown: str, app: bool) -> None:
    assert frame_file(path) == (shown, app)


def _raised_in(path: str, message: str) -> str:
    return f'Traceback (most recent call last):\n  File "{path}", line 7, in check\n    raise ValueError(\n{message}\n'


def test_an_error_the_application_raises_is_its_own_unless_it_names_the_stack() -> None:
    app = "/opt/conda/lib/python3.11/site-packages/lm_eval/models/api_models.py"
    own = _read(_raised_in(app, "AssertionError: Context length must be greater than 0")).root
    assert own is not None and own.component == "other"  # "must be greater" is a broad engine-config keyword
    vllm_side = _read(_raised_in("/x/site-packages/vllm/config.py",
                                 "AssertionError: Context length must be greater than 0")).root
    assert vllm_side is not None and vllm_side.component == "engine-config"
    named = _read(_raised_in(app, "ValueError: max_num_batched_tokens is smaller than max_model_len")).root
    assert named is not None and named.component == "engine-config"  # the app checks a vLLM setting
    drift = _read(_raised_in(app, "AttributeError: 'LLMEngine' object has no attribute 'model_executor'")).root
    assert drift is not None and drift.component == "python-packages"  # code written for another vLLM release
    specific = _read(_raised_in(app, "ModuleNotFoundError: No module named 'flash_attn'")).root
    assert specific is not None and specific.component == "python-packages"  # a specific rule is never overridden


def test_a_failure_seen_only_from_outside_is_the_root_when_nothing_else_states_one() -> None:
    access = 'INFO:     127.0.0.1:46686 - "GET /v1/chat/completions HTTP/1.1" 401 Unauthorized\n'
    alone = _read("INFO 01-01 [api_server.py:1] Started server process\n" + access).root
    assert alone is not None and (alone.line, alone.component) == (2, "serving-api")
    beside = _read(access + "ValueError: Grammar error: Unknown format: uri\n").root
    assert beside is not None and beside.line == 2  # an error line that states the cause comes first
    waiting = _read("INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds...\n" * 3).root
    assert waiting is not None and (waiting.line, waiting.component) == (1, "serving-api")
    assert _read('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n').root is None


def test_installer_wrappers_give_way_to_the_line_that_states_why() -> None:
    uv = _read("Using Python 3.12.9 environment at: .venv\n  × No solution found when resolving dependencies:\n"
               "  ╰─▶ Because torch==2.11.0+cpu has no wheels with a matching platform tag, we can conclude that your "
               "requirements are unsatisfiable.\n").root
    assert uv is not None and uv.line == 3 and uv.component == "platform"
    cut = _read("error: subprocess-exited-with-error\n  \n  × Getting requirements to build wheel did not run "
                "successfully.\n  │ exit code: 1\n      Traceback (most recent call last):\n"
                '        File "/x/site-packages/pip/_vendor/pyproject_hooks/_in_process/_in_process.py", line 353, in '
                "<module>\n          main()\n")
    assert cut.root is None and cut.missing == "truncated"  # pip's wrappers, then a traceback cut before its error


def test_the_earliest_statement_of_a_cuda_error_is_the_root_whatever_its_case() -> None:
    root = _read("INFO 02-21 [gpu_model_runner.py:1] Starting to load model\n"
                 "CUDA Error: operation not supported at /workspace/csrc/cumem_allocator.cpp:62\n"
                 "ERROR 02-21 [core.py:291] RuntimeError: CUDA Error: operation not supported at "
                 "/workspace/csrc/cumem_allocator.cpp:62\n").root
    assert root is not None and root.line == 2


def test_when_no_rule_names_a_component_the_library_that_raised_it_does() -> None:
    ray = _read(_raised_in("/usr/local/lib/python3.12/dist-packages/ray/_private/utils.py",
                           "RuntimeError: Version mismatch: The cluster was started with:")).root
    assert ray is not None and ray.component == "parallelism"
    config = _read(_raised_in("/usr/local/lib/python3.10/dist-packages/vllm/config.py",
                              "ValueError: Unknown pool type: process")).root
    assert config is not None and config.component == "engine-config"
    image = _read(_raised_in("/x/site-packages/transformers/models/qwen2_vl/image_processing_qwen2_vl.py",
                             "ValueError: absolute aspect ratio must be smaller than 200, got 266.6")).root
    assert image is not None and image.component == "serving-api"  # the request's image, by the processor's glob
    unknown = _read(_raised_in("/x/site-packages/vllm/engine/llm_engine.py",
                               "RuntimeError: Version mismatch: The cluster was started with:")).root
    assert unknown is not None and unknown.component == "other"


def test_one_pasted_message_is_its_own_root_a_description_is_not() -> None:
    from bot.diagnosis.root import pasted_line_root

    def root(text: str):
        return pasted_line_root(text, distill(text), read_facts(text))

    message = root("`prompt_logprobs` must be a positive value.")
    assert message is not None and (message.line, message.component) == (1, "serving-api")
    assert root("vllm serve crashes on startup") is None
    assert root("why must prompt_logprobs be positive?") is None  # a question


def test_the_first_statement_of_an_error_is_the_root() -> None:
    logged = _read("ERROR 01-09 08:15:07 engine.py:366] Unknown RoPE scaling type ntk\n"
                   "ERROR 01-09 08:15:07 engine.py:366] Traceback (most recent call last):\n"
                   'ERROR 01-09 08:15:07 engine.py:366]   File "/x/site-packages/vllm/rope.py", line 9, in get_rope\n'
                   "ERROR 01-09 08:15:07 engine.py:366]     raise ValueError(f\"Unknown RoPE scaling type {t}\")\n"
                   "ERROR 01-09 08:15:07 engine.py:366] ValueError: Unknown RoPE scaling type ntk\n").root
    assert logged is not None and logged.line == 1  # logged before the traceback that repeats it
    other = _read("ERROR 01-09 engine.py:366] Something else went wrong first\n"
                  "ValueError: Unknown RoPE scaling type ntk\n").root
    assert other is not None and other.line == 2  # a different message is not the same statement


def test_an_exception_inside_an_indented_traceback_is_a_candidate() -> None:
    root = _read("  Traceback (most recent call last):\n"
                 '    File "/huggingfaceserver/vllm/vllm_model.py", line 141, in start_engine\n'
                 "      OpenAIServingChat(\n"
                 "  TypeError: OpenAIServingChat.__init__() got an unexpected keyword argument 'enable_reasoning'\n"
                 "  During handling of the above exception, another exception occurred:\n"
                 "2025-05-30 06:29:14.120 1 kserve ERROR [__main__.py:<module>():322] Failed to start model server\n"
                 ).root
    assert root is not None and root.line == 4


def test_pydantic_v1_states_its_error_under_the_header() -> None:
    root = _read("pydantic.v1.error_wrappers.ValidationError: 1 validation error for H2OChatOpenAI\n__root__\n"
                 "  Did not find openai_api_key, please add an environment variable `OPENAI_API_KEY` which contains "
                 "it, or pass  `openai_api_key` as a named parameter. (type=value_error)\n").root
    assert root is not None and root.line == 3


def test_a_paste_cut_right_after_the_raising_source_line_is_rooted_there() -> None:
    cut = _read('ERROR 10-25 13:08:43 [core.py:708]   File "/x/site-packages/vllm/v1/core/kv_cache_utils.py", line 699, in check\n'
                'ERROR 10-25 13:08:43 [core.py:708]     raise ValueError("No available memory for the cache blocks. "\n')
    assert cut.root is not None and cut.kind == "source" and cut.root.line == 2
    assert cut.root.component == "gpu-memory" and t("root.kind.source", "zh")
    bare = _read('  File "/x/site-packages/vllm/engine.py", line 3, in run\n    raise\n')
    assert bare.root is None  # a bare re-raise states nothing


def test_a_traceback_with_no_exception_line_says_it_was_cut() -> None:
    framed = _read('(EngineCore_DP0 pid=1)   File "/v/site-packages/vllm/v1/engine/core.py", line 109, in __init__\n'
                   "(EngineCore_DP0 pid=1)     num_gpu_blocks = self._initialize_kv_caches(\n"
                   "(EngineCore_DP0 pid=1)     ^\n")
    assert framed.root is None and framed.missing == "truncated"


def test_two_unrelated_failures_answer_the_first_and_name_the_second() -> None:
    text = ("OSError: [Errno 116] Stale file handle: '/mnt/nfs/m/model-00001-of-00004.safetensors'\n"
            "INFO 01-01 [x.py:1] retrying\n"
            "OSError: [Errno 98] Address already in use\n")
    reading = _read(text)
    assert reading.root is not None and reading.root.line == 1 and reading.root.component == "model-files"
    assert [o.line_no for o in reading.others] == [3] and classify(reading.others[0].text) == "serving-api"


def test_a_match_takes_its_line_and_component_from_the_case() -> None:
    m = Match("port-in-use", "Port in use", "端口被占用", "serving", 0.95, True,
              evidence=(Evidence(3, "OSError: [Errno 98] Address already in use", "signature: Address already in use", "signature"),))
    reading = _read("INFO start\nWARNING x\nOSError: [Errno 98] Address already in use\n", "match", (m,))
    assert reading.kind == "case" and reading.root is not None
    assert (reading.root.line, reading.root.component) == (3, "serving-api")


def test_a_root_line_longer_than_10_kb_is_kept_whole() -> None:
    long = "ValueError: bad value " + "x" * 12_000
    reading = _read(f"INFO start\n{long}\n")
    assert reading.root is not None and reading.root.text == long


@pytest.mark.parametrize(("line", "component"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "gpu-memory"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-driver-stack"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "cuda-driver-stack"),
    ("ModuleNotFoundError: No module named 'vllm._version'", "python-packages"),
    ("OSError: [Errno 116] Stale file handle: '/mnt/nfs/models/m/model-00003-of-00037.safetensors'", "model-files"),
    ("torch.distributed.DistBackendError: NCCL error in: ../nccl.cpp:1970, unhandled system error", "parallelism"),
    ("RuntimeError: NVIDIA GPU has fallen off the bus (Xid 79)", "gpu-hardware"),
    ("OSError: [Errno 98] Address already in use", "serving-api"),
    ("RuntimeError: vLLM does not support Windows natively", "platform"),
    ("vllm serve: error: unrecognized arguments: --foo", "engine-config"),
    ("AttributeError: 'str' object has no attribute 'additional_kwargs'", "other"),
    ("ImportError: DLL load failed while importing _C: The specified procedure could not be found.", "platform"),
    ("httpx.ConnectError: All connection attempts failed", "serving-api"),
    ("ValueError: Unknown RoPE scaling type extended", "model-files"),
    ("zzz happened", "other"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to "
     "allocate 1879048192 bytes.", "host-memory"),  # host RAM, although it says "not enough memory"
    ("AssertionError: Expandable segments are not compatible with memory pool. Please track "
     "https://github.com/pytorch/pytorch/issues/147851", "gpu-memory"),  # a quoted https:// URL is not the API's
    ('INFO:     127.0.0.1:46686 - "GET /v1/chat/completions HTTP/1.1" 401 Unauthorized', "serving-api"),  # not the Hub's
    ("ValueError: fp8_e5m2 kv-cache is not supported with fp8 checkpoints.", "engine-config"),
    ("ValueError: Grammar error: Unknown format: uri", "serving-api"),
    ("RuntimeError: Tried to erase Node size_1 but it still had 2 users in the graph", "cuda-driver-stack"),
    ("RuntimeError: CUDA error: invalid device ordinal", "cuda-driver-stack"),  # the labelling rules' call
    ("RuntimeError: No HIP GPUs are available", "platform"),
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1016',
     "cuda-driver-stack"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount()", "cuda-driver-stack"),
    ('{"msg":"exec container process `/opt/venv/bin/vllm`: Exec format error","level":"error"}', "platform"),
    ("OSError: [Errno 24] Too many open files", "platform"),
    ("RuntimeError: pidfd_getfd: Operation not permitted", "platform"),
    ("vllm: error: unrecognized arguments: --temperature 0.8", "engine-config"),  # the CLI's, whatever flag
    ("`prompt_logprobs` must be a positive value.", "serving-api"),
    ("Value error, VLLM_USE_V2_MODEL_RUNNER does not yet support: hybrid/mamba models", "engine-config"),
    ("  ╰─▶ Because torch==2.11.0+cpu has no wheels with a matching platform tag (e.g. `macosx_14_0_x86_64`)",
     "platform"),
])
def test_component_rules(line: str, component: str) -> None:
    assert classify(line) == component


def test_the_line_a_traceback_quotes_is_code_not_the_root() -> None:
    text = ("ERROR [serving.py:323]   File \"/x/vllm/renderers/hf.py\", line 451, in safe_apply_chat_template\n"
            "ERROR [serving.py:323]     raise ChatTemplateResolutionError(\n"
            "ERROR [serving.py:323] vllm.entrypoints.chat_utils.ChatTemplateResolutionError: As of transformers "
            "v4.44, default chat template is no longer allowed\n")
    reading = _read(text)
    assert reading.root is not None and reading.root.line == 3


@pytest.mark.parametrize(("text", "line"), [
    # an exception in repr form under a "dead engine" notice
    ("CRITICAL 01-08 09:20:26 launcher.py:99] MQLLMEngine is already dead, terminating server process\n"
     "ERROR 01-08 09:20:26 engine.py:135] AttributeError(\"'_OpNamespace' 'vllm' object has no attribute 'x'\")\n",
     2),
    # pydantic's header wraps the message below it
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
     "  Value error, User-specified max_model_len (513) is greater than the derived max_model_len (512)\n", 2),
    # pip's resolver preamble, then the conflict itself
    ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.\n"
     "llmcompressor 0.9.0 requires compressed-tensors==0.13.0, but you have compressed-tensors 0.12.2 which is "
     "incompatible\n", 2),
    # a client's retry warning is where its only error is stated
    ("2025-06-11 15:26:16 | INFO | app:_generate:542 - generating\n"
     "2025-06-11 15:26:16 | WARNING | app.core.llm:call:180 - (ConnectError): All connection attempts failed\n", 2),
])
def test_the_line_that_states_the_error(doctor, text: str, line: int) -> None:
    distilled, facts = doctor.distil(text)  # the pipeline's distillation (its keywords keep more lines)
    reading = read_root(distilled, facts, "unknown", ())
    assert reading.root is not None and reading.root.line == line, reading


def test_off_linux_nvidia_a_generic_error_is_the_platforms() -> None:
    text = "CANN_VERSION : 8.1.RC1\nRuntimeError: call aclnnGather failed, detail: index out of range\n"
    reading = _read(text)
    assert reading.root is not None and reading.root.component == "platform"
    reading = _read("RuntimeError: call aclnnGather failed, detail: index out of range\n")
    assert reading.root is not None and reading.root.component == "other"
    kunlun = _read("INFO vllm_kunlun/platform.py:12] Using Kunlun XPU P800\n"
                   "ValueError: Check 0 == ret failed, left operand=0, speculative_attention failed\n")
    assert kunlun.root is not None and kunlun.root.component == "platform"
    assert read_facts("torch_musa 2.1 loaded\n").platform == "Moore Threads MUSA"


@pytest.mark.parametrize(("text", "rooted"), [
    ("Bus error (core dumped)", True),
    ("Illegal Instruction (Core Dumped) when Running Model with CPU Docker Image", True),
    ("how do I fix CUDA out of memory?", False),
    ("vllm 启动报 CUDA out of memory 怎么办", False),
])
def test_a_pasted_error_line_has_a_root_a_question_has_none(doctor, text: str, rooted: bool) -> None:
    diagnosis = doctor.match(text)
    assert diagnosis.kind == "question"
    assert (diagnosis.root is not None) == rooted, diagnosis.root


def test_search_phrase_keeps_the_stable_part_of_the_message() -> None:
    phrase = search_phrase("OSError: [Errno 116] Stale file handle: '/mnt/nfs/models/x/model-00003-of-00037.safetensors'")
    assert phrase == "OSError: [Errno 116] Stale file handle"
    phrase = search_phrase("RuntimeError: NCCL error on 10.0.0.12:29500 rank 3, handle 0x7f3a2c001234, 2.50 GiB")
    assert not re.search(r"\d{2}|0x", phrase) and phrase.startswith("RuntimeError: NCCL error")


def test_every_case_has_a_component_and_every_component_a_triage() -> None:
    kb = load_kb()
    cmap = default_component_map()
    unmapped = [c.id for c in kb.cases if cmap.for_case(c.id, c.area) is None]
    assert not unmapped
    assert set(cmap.cases) <= {c.id for c in kb.cases}, "a per-case exception names no case"
    triage = load_triage()
    assert set(triage) == set(COMPONENTS)


def test_triage_is_bilingual_read_only_and_names_real_host_checks() -> None:
    from bot.runner.catalogue import load_catalogue

    catalogue = load_catalogue()
    for component, triage in load_triage().items():
        assert all(c in catalogue.checks for c in triage.checks), component
        for step in triage.steps:
            assert re.search(r"[\u4e00-\u9fff]", step.text_zh), step.text
            assert step.command is None or read_only(step.command)
    assert not read_only("rm -rf ~/.cache/huggingface") and not read_only("pip install -U vllm")
    assert not read_only("echo x > /etc/hosts") and read_only("dmesg -T | grep -i xid 2>/dev/null")


def test_notes_are_values_worded_in_the_answer_language() -> None:
    consequence = Note("consequence", line=12)
    assert note_text(consequence, "en") == t("note.consequence", "en", line=12) == (
        "this is a consequence; the earlier error on line 12 is the cause to fix")
    assert note_text(consequence, "zh") == t("note.consequence", "zh", line=12)
    upgrade = Note("upgrade", package="vllm", version="0.6.4", shown="0.5.3")
    assert note_text(upgrade, "zh") == t("version.upgrade", "zh", package="vllm", fixed="0.6.4",
                                         where=t("version.where_log", "zh", shown="0.5.3"))
    on_host = Note("inside_affects", package="torch", version="<2.5", shown="2.4.0", source="host", host="gpu-01")
    assert note_text(on_host, "en") == "known in torch <2.5; host gpu-01 has 2.4.0, inside that range"
    assert note_text(Note("two_failures", line=4, case_id="oom"), "en").startswith("two failures: the error on line 4")


def test_every_note_kind_is_worded_in_both_languages() -> None:
    from typing import get_args

    from bot.models import NoteKind

    for kind in get_args(NoteKind):
        note = Note(kind, line=3, case_id="c", package="vllm", version="0.6.4", shown="0.5.3")
        en, zh = note_text(note, "en"), note_text(note, "zh")
        assert en and zh and en != zh and "{" not in en + zh, kind


def test_scores_shown_follow_the_order() -> None:
    ms = [Match(c, c, c, "x", s, False) for c, s in (("a", 0.92), ("b", 1.0), ("c", 0.5))]
    assert shown_scores(ms) == [0.92, 0.92, 0.5]


@pytest.mark.parametrize("phrase", ["多卡推理一直卡住不动", "启动后卡死了", "一直卡着"])
def test_stuck_never_reads_as_gpu(phrase: str) -> None:
    found = {h.found: h.other for h in default_glossary().lookup(phrase)}
    assert not any("GPU" in other for form, other in found.items() if form == "卡")
    assert "卡" not in found


def test_one_chinese_term_for_a_known_failure() -> None:
    from bot.present.i18n import _TEXT

    chinese = [forms["zh"] for forms in _TEXT.values() if "zh" in forms]
    assert any("已知故障" in z for z in chinese) and not any("已知问题" in z for z in chinese)
