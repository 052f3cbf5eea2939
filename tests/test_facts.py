"""Facts read from a paste (bot/diagnosis/facts.py): one real line of each shape vLLM, torch and the platform print,
across vLLM 0.2 → 0.11+ (the thread each line was printed in is named beside it)."""

from __future__ import annotations

from dataclasses import fields

import pytest
from packaging.version import Version

from bot.diagnosis.facts import FACT_LABELS, fact_lines, read_facts
from bot.diagnosis.versions import known_versions
from bot.models import LogFacts
from kb.rules import FACTS

CASES: list[tuple[str, str, dict[str, object]]] = [
    (
        "0.2/0.3 engine config, no version (netease-youdao/QAnything#302)",
        "INFO 04-27 10:11:03 llm_engine.py:70] Initializing an LLM engine with config: "
        "model='/model_repos/CustomLLM/Qwen-7B-QAnything', tokenizer='/model_repos/CustomLLM/Qwen-7B-QAnything', "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=True, dtype=torch.bfloat16, "
        "max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1, quantization=None, "
        "enforce_eager=False, seed=0)\n"
        "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256",
        {"vllm_version": None, "model": "/model_repos/CustomLLM/Qwen-7B-QAnything", "dtype": "bfloat16",
         "max_model_len": 4096, "tensor_parallel_size": 1, "quantization": None, "enforce_eager": False,
         "gpu_blocks": 0, "cpu_blocks": 256},
    ),
    (
        "0.4.2 engine config + weights + blocks (vllm-project/vllm#5104)",
        "INFO 05-29 10:26:04 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: "
        "model='facebook/opt-125m', speculative_config=None, tokenizer='facebook/opt-125m', dtype=torch.float16, "
        "max_seq_len=2048, tensor_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        "enforce_eager=False, kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, seed=0, "
        "served_model_name=facebook/opt-125m)\n"
        "INFO 05-29 10:26:05 model_runner.py:175] Loading model weights took 0.2389 GB\n"
        "INFO 05-29 10:26:06 gpu_executor.py:114] # GPU blocks: 4700, # CPU blocks: 7281",
        {"vllm_version": "0.4.2", "model": "facebook/opt-125m", "dtype": "float16", "max_model_len": 2048,
         "kv_cache_dtype": None, "weights_gib": 0.2389, "gpu_blocks": 4700, "cpu_blocks": 7281},
    ),
    (
        "0.6.4 one-line profiling, blocks without '#', concurrency (vllm-project/vllm#10517)",
        "Loading model weights took 14.9888 GB\n"
        "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB "
        "memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90\n"
        "GPU blocks: 1478, # CPU blocks: 2048\n"
        "Maximum concurrency for 29000 tokens per request: 0.82x",
        {"weights_gib": 14.9888, "total_gpu_memory_gib": 23.58, "non_torch_gib": 0.35, "kv_cache_gib": 2.89,
         "gpu_memory_utilization": 0.9, "gpu_blocks": 1478, "cpu_blocks": 2048, "max_concurrency": 0.82},
    ),
    (
        "0.6.5 profiling table (vllm-project/vllm#10511)",
        "INFO 12-13 19:54:18 worker.py:243] Memory profiling results:\n"
        "INFO 12-13 19:54:18 worker.py:243] total_gpu_memory     79.22GiB\n"
        "INFO 12-13 19:54:18 worker.py:243] gpu_memory_utilization       0.90\n"
        "INFO 12-13 19:54:18 worker.py:243] model weights take   14.96GiB\n"
        "INFO 12-13 19:54:18 worker.py:243] non_torch_memory     1.79GiB\n"
        "INFO 12-13 19:54:18 worker.py:243] PyTorch activation peak memory       1.26GiB\n"
        "INFO 12-13 19:54:18 worker.py:243] available_kv_cache_memory    53.29GiB",
        {"total_gpu_memory_gib": 79.22, "weights_gib": 14.96, "non_torch_gib": 1.79, "activation_peak_gib": 1.26,
         "kv_cache_gib": 53.29},
    ),
    (
        "0.7/0.8 profiling sentences, negative KV cache, CUDA blocks (vllm-project/vllm#14447, #12126)",
        "(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] the current vLLM instance can use "
        "total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB\n"
        "(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] model weights take 21.21GiB; "
        "non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory "
        "reserved for KV Cache is -1.57GiB.\n"
        "INFO 01-16 09:40:00 executor_base.py:95] # CUDA blocks: 6001, # CPU blocks: 1638",
        {"total_gpu_memory_gib": 23.58, "gpu_memory_utilization": 0.99, "weights_gib": 21.21, "non_torch_gib": 0.2,
         "activation_peak_gib": 0.37, "kv_cache_gib": -1.57, "gpu_blocks": 6001, "cpu_blocks": 1638},
    ),
    (
        "V1 engine 0.8.3 config (vllm-project/vllm#16141)",
        "INFO 04-06 18:44:06 [core.py:61] Initializing a V1 LLM engine (v0.8.3) with config: "
        "model='Qwen/Qwen2.5-0.5B-Instruct-AWQ', speculative_config=None, tokenizer='Qwen/Qwen2.5-0.5B-Instruct-AWQ', "
        "skip_tokenizer_init=False, tokenizer_mode=auto, trust_remote_code=False, dtype=torch.float16, "
        "max_seq_len=512, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, "
        "pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=awq_marlin, enforce_eager=False, "
        "kv_cache_dtype=auto,  device_config=cuda",
        {"vllm_version": "0.8.3", "model": "Qwen/Qwen2.5-0.5B-Instruct-AWQ", "dtype": "float16", "max_model_len": 512,
         "pipeline_parallel_size": 1, "quantization": "awq_marlin", "enforce_eager": False},
    ),
    (
        "V1 model loading, KV cache memory, tokens, concurrency (vllm-project/vllm#17122, #21348)",
        "INFO 04-24 16:33:00 [gpu_model_runner.py:1316] Model loading took 14.9889 GiB and 3.652170 seconds\n"
        "Available KV cache memory: 8.11 GiB\n"
        "INFO 04-24 16:33:13 [kv_cache_utils.py:634] GPU KV cache size: 158,656 tokens\n"
        "INFO 04-24 16:33:13 [kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 4.84x",
        {"weights_gib": 14.9889, "kv_cache_gib": 8.11, "kv_cache_tokens": 158656, "max_concurrency": 4.84},
    ),
    (
        "0.9+ non-default args (vllm-project/vllm issue in club-3090#295)",
        "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model_tag': "
        "'~/.cache/huggingface/qwen3.6-27b-autoround-int4', 'trust_remote_code': True, 'dtype': 'float16', "
        "'max_model_len': 262144, 'quantization': 'auto_round', 'tensor_parallel_size': 2, "
        "'disable_custom_all_reduce': True, 'kv_cache_dtype': 'fp8_e5m2', 'enable_prefix_caching': True, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}",
        {"model": "~/.cache/huggingface/qwen3.6-27b-autoround-int4", "dtype": "float16", "max_model_len": 262144,
         "quantization": "auto_round", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8_e5m2"},
    ),
    (
        "0.6.x API server version + Namespace (vllm-project/vllm issues, 0.6.3.post1 / 0.6.6.post1)",
        "INFO 02-14 03:50:41 api_server.py:528] vLLM API server version 0.6.3.post1\n"
        "INFO 02-14 03:50:41 api_server.py:529] args: Namespace(subparser='serve', "
        "model_tag='sophosympatheia/Midnight-Miqu-70B-v1.0', config='', host=None, port=8000, "
        "model='sophosympatheia/Midnight-Miqu-70B-v1.0', dtype='bfloat16', kv_cache_dtype='fp8', block_size=32, "
        "max_model_len=None, tensor_parallel_size=4, gpu_memory_utilization=0.95, enforce_eager=True)",
        {"vllm_version": "0.6.3.post1", "model": "sophosympatheia/Midnight-Miqu-70B-v1.0", "dtype": "bfloat16",
         "kv_cache_dtype": "fp8", "block_size": 32, "max_model_len": None, "tensor_parallel_size": 4,
         "gpu_memory_utilization": 0.95, "enforce_eager": True},
    ),
    (
        "bf16 on a T4: GPU name and compute capability (vllm-project/vllm#1157)",
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        "Your Tesla T4 GPU has compute capability 7.5.",
        {"gpu_name": "Tesla T4", "compute_capability": "7.5"},
    ),
    (
        "torch on Blackwell: sm_120 (vllm-project/vllm#21633), python from dist-packages",
        "vllm-1  | /usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:287: UserWarning: \n"
        "vllm-1  | NVIDIA GeForce RTX 5070 Ti with CUDA capability sm_120 is not compatible with the current "
        "PyTorch installation.",
        {"gpu_name": "NVIDIA GeForce RTX 5070 Ti", "compute_capability": "12.0", "python_version": "3.12"},
    ),
    (
        "torch OOM, total capacity (vllm-project/vllm#10637)",
        "CUDA out of memory. Tried to allocate 524.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which "
        "137.12 MiB is free.",
        {"total_gpu_memory_gib": 15.77},
    ),
    (
        "nvidia-smi header and GPU row (vllm-project/vllm#8185)",
        "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |\n"
        "|   0  Tesla T4                       Off |   00000000:00:04.0 Off |                    0 |",
        {"driver_version": "580.95.05", "cuda_version": "13.0", "gpu_name": "Tesla T4"},
    ),
    (
        "collect_env (vllm-project/vllm bug template)",
        "PyTorch version: 2.3.0+cu121\nCUDA runtime version: 12.1.105\nNvidia driver version: 535.104.05\n"
        "Python version: 3.10.14 (main, Mar 21 2024, 16:24:04) [GCC 11.2.0] (64-bit runtime)\n"
        "GPU models and configuration:\nGPU 0: NVIDIA A100-SXM4-80GB\nvLLM Version: 0.5.0.post1",
        {"torch_version": "2.3.0+cu121", "cuda_version": "12.1", "driver_version": "535.104.05",
         "python_version": "3.10.14", "gpu_name": "NVIDIA A100-SXM4-80GB", "vllm_version": "0.5.0.post1"},
    ),
    (
        "image tag and pins",
        "docker run --gpus all vllm/vllm-openai:v0.6.4.post1 --model x\npip install vllm==0.5.3 torch==2.3.1",
        {"vllm_version": "0.6.4.post1", "torch_version": "2.3.1"},
    ),
    (
        "TP vs heads and visible GPUs (vllm-project/vllm#2652, #26028)",
        "ValueError: Total number of attention heads (52) must be divisible by tensor parallel size (8).\n"
        "WARNING 03-30 14:11:45 [ray_utils.py:352] Tensor parallel size (16) exceeds available GPUs (8).",
        {"num_attention_heads": 52, "tensor_parallel_size": 8, "gpu_count": 8},
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), CASES, ids=[c[0].split(" (")[0] for c in CASES])
def test_real_lines(name: str, text: str, expected: dict[str, object]) -> None:
    facts = read_facts(text)
    for key, value in expected.items():
        assert getattr(facts, key) == value, f"{name}: {key} = {getattr(facts, key)!r}, expected {value!r}"
        if value is not None:
            line_no = facts.sources[key]
            assert facts.quotes[line_no] and line_no <= text.count("\n") + 1


def test_first_value_wins_and_sources_point_at_the_line() -> None:
    text = "noise\n# GPU blocks: 512, # CPU blocks: 2048\nmore\n# GPU blocks: 9, # CPU blocks: 1\n"
    facts = read_facts(text)
    assert facts.gpu_blocks == 512 and facts.sources["gpu_blocks"] == 2
    assert facts.quotes[2] == "# GPU blocks: 512, # CPU blocks: 2048"


def test_nothing_stated_nothing_known() -> None:
    facts = read_facts("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'a'\n")
    assert facts.known() == {} and fact_lines(facts) == []


def test_secrets_in_facts_are_redacted() -> None:
    facts = read_facts("INFO args: Namespace(model='hf_abcdefghijklmnopqrstuvwxyzABCDEFGH/model', port=1)")
    assert facts.model is not None and "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH" not in facts.model


def test_non_default_args_are_data_not_code() -> None:
    facts = read_facts("non-default args: {'model': __import__('os').system('true'), 'max_model_len': 4096}")
    assert facts.max_model_len == 4096  # fell back to key=value reading; nothing was evaluated


def test_rule_names_labels_and_logfacts_agree() -> None:
    names = {f.name for f in fields(LogFacts)} - {"sources", "quotes", "conflicts"}
    assert set(FACTS) == names
    assert set(FACT_LABELS) == names
    from bot.present.i18n import FACT_LABELS_ZH

    assert set(FACT_LABELS_ZH) == names, set(FACT_LABELS) ^ set(FACT_LABELS_ZH)  # every fact has its Chinese label


def test_linear_in_paste_size() -> None:
    """Bounded work per marker: a paste of 200k lines with a marker on every line still reads the facts
    once and keeps the first value (no wall clock: the hit cap is what bounds the work)."""
    text = "\n".join(f"INFO # GPU blocks: {i}, # CPU blocks: 1 model weights take {i}GiB" for i in range(200_000))
    facts = read_facts(text)
    assert facts.gpu_blocks == 0 and facts.weights_gib == 0.0


@pytest.mark.parametrize("version", ["0.9.0.1", "0.6.3.post1", "0.11.0rc2.dev3+g1234abc",
                                     "0.10.1.dev12+gabc123.d20250801"])
@pytest.mark.parametrize("shape", [
    "INFO 06-12 09:14:06 [api_server.py:1287] vLLM API server version {v}",
    "INFO 06-12 09:14:16 [core.py:70] Initializing a V1 LLM engine (v{v}) with config: model='m', dtype=auto",
    "vLLM Version: {v}",
    "pip install vllm=={v}.",
])
def test_versions_parse_exactly(version: str, shape: str) -> None:
    facts = read_facts(shape.format(v=version))
    assert facts.vllm_version == version
    assert known_versions(facts)["vllm"].version == Version(version)


def test_launch_command_port_and_conflicts_are_read() -> None:
    log = ("user@box:~$ VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --max-model-len=8192\n"
           "INFO non-default args: {'model': 'meta-llama/Llama-3.1-70B-Instruct', 'port': 9000}\n"
           "INFO:     Uvicorn running on http://0.0.0.0:9000 (Press CTRL+C to quit)\n")
    facts = read_facts(log)
    assert facts.launch_command == "VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --max-model-len=8192"
    assert (facts.model, facts.tensor_parallel_size, facts.max_model_len, facts.port) == (
        "meta-llama/Llama-3.1-8B-Instruct", 2, 8192, 9000)
    assert facts.conflicts == {"model": (("meta-llama/Llama-3.1-70B-Instruct", 2),)}
    assert "conflicts" not in facts.known()
