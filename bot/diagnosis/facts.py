"""Paste → LogFacts: what vLLM, torch and the platform print about themselves.

One linear pass: str.find over the lower-cased paste locates the few line shapes that carry facts (engine
config, `non-default args`, `Namespace(...)`, memory profiling, block counts, nvidia-smi, collect_env,
torch's OOM message, site-packages paths, image tags); only those lines are cleaned and parsed. The first
value seen wins (ranks and retries repeat the same numbers). Shapes covered span vLLM 0.2 → 0.11+; each has
a real line in tests/test_facts.py. Sizes are GiB (vLLM's "GB" is GiB too).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import fields

from packaging.version import InvalidVersion, Version

from bot.diagnosis.redact import redact
from bot.models import LogFacts
from indexer.literals import literal_set
from indexer.text import clean_line, strip_ansi

FactValue = str | int | float | bool
MAX_HITS_PER_MARKER = 40  # occurrences of one marker looked at (bounded: linear in the paste)
MAX_QUOTE = 400

_NUM = r"(-?\d+(?:\.\d+)?)"
_GIB = _NUM + r"\s*Gi?B"
# PEP 440 as vLLM prints it: 0.9.0.1, 0.6.3.post1, 0.11.0rc2.dev3+g1234abc (checked by _version_text)
_VERSION = r"v?(\d+(?:\.\d+)+(?:[._-]?(?:a|b|rc|post|dev)\d*)*(?:\+[\w.]+)?)"


def _version_text(value: str) -> str | None:
    """The version as printed, when packaging reads it (a trailing full stop is prose, not the version)."""
    text = value.strip().rstrip(".")
    try:
        Version(text)
    except InvalidVersion:
        return None
    return text


def _dtype(value: str) -> str:
    v = value.strip("'\" ").removeprefix("torch.").lower()
    return {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32"}.get(v, v)


def _bool(value: str) -> bool | None:
    v = value.strip("'\" ").lower()
    return True if v == "true" else False if v == "false" else None


def _int(value: str) -> int | None:
    try:
        return int(value.replace(",", "").strip("'\" "))
    except ValueError:
        return None


def _float(value: str) -> float | None:
    try:
        return float(value.strip("'\" "))
    except ValueError:
        return None


def _text(value: str) -> str | None:
    v = value.strip().strip("'\"")
    return None if v in ("", "None", "auto") else v


# key in an engine-config line / non-default args / Namespace → (LogFacts field, converter)
_CONFIG_KEYS: dict[str, tuple[str, Callable[[str], FactValue | None]]] = {
    "model": ("model", _text),
    "dtype": ("dtype", lambda v: None if _text(v) is None else _dtype(v)),
    "max_seq_len": ("max_model_len", _int),
    "max_model_len": ("max_model_len", _int),
    "tensor_parallel_size": ("tensor_parallel_size", _int),
    "pipeline_parallel_size": ("pipeline_parallel_size", _int),
    "quantization": ("quantization", _text),
    "gpu_memory_utilization": ("gpu_memory_utilization", _float),
    "enforce_eager": ("enforce_eager", _bool),
    "kv_cache_dtype": ("kv_cache_dtype", _text),
    "block_size": ("block_size", _int),
    "port": ("port", _int),
}
_CONFIG_PAIR = re.compile(r"\b(" + "|".join(_CONFIG_KEYS) + r")['\"]?\s*[=:]\s*('[^']*'|\"[^\"]*\"|[\w./+\-]+)")

# (marker that str.find looks for, regex on the cleaned line, handler)
_Handler = Callable[[re.Match[str], "_Facts"], None]


class _Facts:
    """Accumulates facts; the first value of a field wins and remembers its line."""

    def __init__(self) -> None:
        self.values: dict[str, FactValue] = {}
        self.sources: dict[str, int] = {}
        self.quotes: dict[int, str] = {}
        self.conflicts: dict[str, list[tuple[str, int]]] = {}
        self.line_no = 0
        self.line = ""

    def set(self, name: str, value: FactValue | None) -> None:
        if value is None:
            return
        if name in self.values:
            if name in _CONFLICTING and value != self.values[name]:
                seen = self.conflicts.setdefault(name, [])
                if str(value) not in {v for v, _ in seen} and len(seen) < 5:
                    seen.append((str(value), self.line_no))
                    self.quotes.setdefault(self.line_no, self.line[:MAX_QUOTE])
            return
        self.values[name] = value
        self.sources[name] = self.line_no
        self.quotes.setdefault(self.line_no, self.line[:MAX_QUOTE])


# fields whose second, different value is worth saying (a fix command is filled with the first)
_CONFLICTING = frozenset({"model", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len",
                          "gpu_memory_utilization", "dtype", "port", "vllm_version"})

# `vllm serve MODEL …` / `python -m vllm.entrypoints.openai.api_server --model MODEL …` (a shell prompt, env
# assignments and `docker run … vllm/vllm-openai` before it allowed): the launch command and its flags
_LAUNCH = re.compile(r"^(?:\S*[$#>]\s*)?(?:[A-Za-z_]\w*=\S*\s+)*"
                     r"(?:vllm\s+serve\b|python3?\s+-m\s+vllm\.entrypoints\.openai\.api_server\b|docker\s+run\b.*"
                     r"vllm/vllm-openai\S*)(.*)$")
_FLAGS: dict[str, tuple[str, Callable[[str], FactValue | None]]] = {
    "--model": ("model", _text), "--tensor-parallel-size": ("tensor_parallel_size", _int),
    "-tp": ("tensor_parallel_size", _int), "--pipeline-parallel-size": ("pipeline_parallel_size", _int),
    "-pp": ("pipeline_parallel_size", _int), "--max-model-len": ("max_model_len", _int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float), "--port": ("port", _int),
    "--dtype": ("dtype", lambda v: None if _text(v) is None else _dtype(v)), "--quantization": ("quantization", _text),
    "-q": ("quantization", _text), "--kv-cache-dtype": ("kv_cache_dtype", _text), "--block-size": ("block_size", _int),
}


def _launch(m: re.Match[str], f: _Facts) -> None:
    f.set("launch_command", re.sub(r"^\S*[$#>]\s*", "", m.group(0))[:MAX_QUOTE])  # without the shell prompt
    words = m.group(1).split()
    if words and not words[0].startswith("-") and re.search(r"\bvllm\s+serve\s", m.group(0)):
        f.set("model", _text(words[0]))  # `vllm serve MODEL`: the positional model tag
    for i, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag in _FLAGS:
            raw = inline or (words[i + 1] if i + 1 < len(words) else "")
            name, conv = _FLAGS[flag]
            if raw and not raw.startswith("-"):
                f.set(name, conv(raw))


def _config(m: re.Match[str], f: _Facts) -> None:
    for key, raw in _CONFIG_PAIR.findall(m.string):
        name, conv = _CONFIG_KEYS[key]
        f.set(name, conv(raw))


def _engine_line(m: re.Match[str], f: _Facts) -> None:
    if m.group(1):
        f.set("vllm_version", _version_text(m.group(1)))
    _config(m, f)


def _profiling_v064(m: re.Match[str], f: _Facts) -> None:
    # "Memory profiling results: total_gpu_memory=23.58GiB … non_torch_memory=0.35GiB kv_cache_size=3.81GiB …"
    for key, name in (("total_gpu_memory", "total_gpu_memory_gib"), ("non_torch_memory", "non_torch_gib"),
                      ("kv_cache_size", "kv_cache_gib")):
        km = re.search(key + r"=" + _GIB, m.string)
        if km:
            f.set(name, float(km.group(1)))
    util = re.search(r"gpu_memory_utilization=" + _NUM, m.string)
    if util:
        f.set("gpu_memory_utilization", float(util.group(1)))


def _set(name: str, conv: Callable[[str], FactValue | None] = float, group: int = 1) -> _Handler:
    def handler(m: re.Match[str], f: _Facts) -> None:
        f.set(name, conv(m.group(group)))

    return handler


def _pair(first: str, second: str, conv: Callable[[str], FactValue | None] = _int) -> _Handler:
    def handler(m: re.Match[str], f: _Facts) -> None:
        f.set(first, conv(m.group(1)))
        f.set(second, conv(m.group(2)))

    return handler


def _torch_version(m: re.Match[str], f: _Facts) -> None:
    version = m.group(1)
    f.set("torch_version", version)
    cu = re.search(r"\+cu(\d+)(\d)$", version)
    if cu:
        f.set("cuda_version", f"{cu.group(1)}.{cu.group(2)}")


def _gpu_cc(m: re.Match[str], f: _Facts) -> None:
    f.set("gpu_name", m.group(1).strip())
    f.set("compute_capability", m.group(2))


def _sm(m: re.Match[str], f: _Facts) -> None:
    f.set("gpu_name", m.group(1).strip())
    digits = m.group(2)
    f.set("compute_capability", f"{digits[:-1]}.{digits[-1]}")


def _smi_header(m: re.Match[str], f: _Facts) -> None:
    f.set("driver_version", m.group(1))
    f.set("cuda_version", m.group(2))


def _non_default(m: re.Match[str], f: _Facts) -> None:
    try:
        args = ast.literal_eval(m.group(1))  # a Python dict literal printed by vLLM: data, never code
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        _config(m, f)
        return
    if not isinstance(args, dict):
        return
    for key, value in args.items():
        if key in _CONFIG_KEYS and value is not None and not isinstance(value, dict | list):
            name, conv = _CONFIG_KEYS[key]
            f.set(name, conv(str(value)))
    if "model" not in args and isinstance(args.get("model_tag"), str):
        f.set("model", args["model_tag"])


_RULES: list[tuple[str, re.Pattern[str], _Handler]] = [
    # "Initializing an LLM engine (v0.4.2) with config: model='…', dtype=torch.float16, max_seq_len=2048, …"
    # "Initializing a V1 LLM engine (v0.8.3) with config: …" (0.2: "Initializing an LLM engine with config:")
    ("llm engine", re.compile(r"Initializing an? (?:V\d )?LLM engine(?: \(v([^)\s]+)\))? with config"), _engine_line),
    ("non-default args", re.compile(r"non-default args: (\{.*\})"), _non_default),
    ("namespace(", re.compile(r"\bNamespace\("), _config),
    # "vLLM API server version 0.6.3.post1", "vLLM Version: 0.6.3.post1" (collect_env), "vllm==0.5.3", "vllm 0.6.0"
    ("api server version", re.compile(r"vLLM API server version " + _VERSION), _set("vllm_version", _version_text)),
    ("vllm version", re.compile(r"vLLM Version\s*:\s*" + _VERSION), _set("vllm_version", _version_text)),
    ("vllm==", re.compile(r"\bvllm==" + _VERSION), _set("vllm_version", _version_text)),
    ("vllm-openai:", re.compile(r"vllm/vllm-openai:" + _VERSION), _set("vllm_version", _version_text)),
    ("vllm ", re.compile(r"^vllm\s+" + _VERSION + r"\s*$"), _set("vllm_version", _version_text)),
    ("vllm serve", _LAUNCH, _launch),
    ("vllm.entrypoints.openai.api_server", _LAUNCH, _launch),
    ("vllm/vllm-openai", _LAUNCH, _launch),
    ("uvicorn running on", re.compile(r"Uvicorn running on https?://[^\s:/]+:(\d+)"), _set("port", _int)),
    ("starting vllm api server on", re.compile(r"Starting vLLM API server(?: \d+)? on https?://[^\s:/]+:(\d+)"),
     _set("port", _int)),
    # the KV cache shortfall: V1 "… max seq len (32768), (10.00 GiB KV cache is needed, which is larger than the
    # available KV cache memory (6.55 GiB). Based on the available memory, the estimated maximum model length
    # is 21440." / V0 "The model's max seq len (32768) is larger than … stored in KV cache (21440)."
    ("max seq len (", re.compile(r"max seq len \((\d+)\)"), _set("max_model_len", _int)),
    ("kv cache is needed", re.compile(r"\(" + _GIB + r" KV cache is needed.*?available KV cache memory \(" + _GIB),
     _pair("kv_cache_needed_gib", "kv_cache_gib", float)),
    ("estimated maximum model length is", re.compile(r"estimated maximum model length is (\d+)"),
     _set("estimated_max_model_len", _int)),
    ("stored in kv cache (", re.compile(r"stored in KV cache \((\d+)\)"), _set("estimated_max_model_len", _int)),
    ("torch==", re.compile(r"\btorch==(\d+\.\d+(?:\.\d+)?(?:\+\w+)?)"), _torch_version),
    ("pytorch version", re.compile(r"PyTorch version\s*:\s*(\d+\.\d+(?:\.\d+)?(?:\+\w+)?)"), _torch_version),
    ("torch ", re.compile(r"^torch\s+(\d+\.\d+\.\d+(?:\+\w+)?)\s*$"), _torch_version),
    ("cuda runtime version", re.compile(r"CUDA runtime version\s*:\s*(\d+\.\d+(?:\.\d+)?)"), _set("cuda_version", str)),
    ("cuda used to build", re.compile(r"CUDA used to build PyTorch\s*:\s*(\d+\.\d+)"), _set("cuda_version", str)),
    ("nvidia/cuda:", re.compile(r"nvidia/cuda:(\d+\.\d+(?:\.\d+)?)"), _set("cuda_version", str)),
    ("driver version", re.compile(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+)"), _smi_header),
    ("driver version", re.compile(r"Nvidia driver version\s*:\s*([\d.]+)"), _set("driver_version", str)),
    ("python version", re.compile(r"Python version\s*:\s*(\d+\.\d+(?:\.\d+)?)"), _set("python_version", str)),
    ("site-packages", re.compile(r"python(\d\.\d+)[/\\](?:site|dist)-packages"), _set("python_version", str)),
    ("dist-packages", re.compile(r"python(\d\.\d+)[/\\](?:site|dist)-packages"), _set("python_version", str)),
    # memory profiling, 0.6.4 one-liner / 0.6.5 table / 0.7+ sentences / V1
    ("memory profiling results:", re.compile(r"Memory profiling results: .*total_gpu_memory="), _profiling_v064),
    ("total_gpu_memory", re.compile(r"total_gpu_memory \(" + _GIB + r"\) x gpu_memory_utilization \(" + _NUM + r"\)"),
     _pair("total_gpu_memory_gib", "gpu_memory_utilization", float)),
    ("total_gpu_memory", re.compile(r"^total_gpu_memory\s+" + _GIB), _set("total_gpu_memory_gib")),
    ("model weights take", re.compile(r"model weights take\s+" + _GIB), _set("weights_gib")),
    ("non_torch_memory", re.compile(r"non_torch_memory(?: takes)?\s+" + _GIB), _set("non_torch_gib")),
    ("activation peak memory", re.compile(r"activation peak memory(?: takes)?\s+" + _GIB), _set("activation_peak_gib")),
    ("reserved for kv cache", re.compile(r"reserved for KV Cache is\s+" + _GIB), _set("kv_cache_gib")),
    ("available_kv_cache_memory", re.compile(r"available_kv_cache_memory\s+" + _GIB), _set("kv_cache_gib")),
    ("available kv cache memory", re.compile(r"Available KV cache memory:\s*" + _GIB), _set("kv_cache_gib")),
    ("weights took", re.compile(r"Loading (?:model )?weights took\s+" + _GIB), _set("weights_gib")),
    ("loading took", re.compile(r"Model loading took\s+" + _GIB), _set("weights_gib")),
    ("blocks:", re.compile(r"#?\s*(?:GPU|CUDA) blocks:\s*(-?\d+),\s*#?\s*CPU blocks:\s*(\d+)"),
     _pair("gpu_blocks", "cpu_blocks")),
    ("gpu kv cache size", re.compile(r"GPU KV cache size:\s*(-?[\d,]+) tokens"), _set("kv_cache_tokens", _int)),
    ("maximum concurrency", re.compile(r"Maximum concurrency for [\d,]+ tokens per request:\s*" + _NUM + "x"),
     _set("max_concurrency")),
    # torch OOM: "GPU 0 has a total capacity of 15.77 GiB" / "(GPU 0; 15.77 GiB total capacity; …"
    ("total capacity", re.compile(r"total capacity of " + _GIB), _set("total_gpu_memory_gib")),
    ("total capacity", re.compile(_GIB + r" total capacity"), _set("total_gpu_memory_gib")),
    # GPU name and compute capability
    ("compute capability", re.compile(r"Your (.+?) GPU has compute capability (\d+\.\d+)"), _gpu_cc),
    ("cuda capability", re.compile(r"Found GPU\d+ (.+?) which is of cuda capability (\d+\.\d+)"), _gpu_cc),
    ("cuda capability", re.compile(r"(NVIDIA .+?) with CUDA capability sm_(\d+) is not compatible"), _sm),
    ("device capability", re.compile(r"Device \d+:\s*(.+?),\s*compute capability\s*(\d+\.\d+)"), _gpu_cc),
    ("gpu 0:", re.compile(r"^GPU 0:\s*(.+?)(?:\s*\(UUID.*)?$"), _set("gpu_name", str)),
    # nvidia-smi table row of GPU 0 (cleaning removed the leading "|   ")
    ("|   0  ", re.compile(r"^(?:\|\s+)?0\s+((?:NVIDIA|Tesla|Quadro|GeForce) .+?)\s{2,}(?:On|Off)\s+\|"),
     _set("gpu_name", str)),
    ("num_attention_heads", re.compile(r"num_attention_heads\W+(\d+)"), _set("num_attention_heads", _int)),
    ("attention heads (", re.compile(r"attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)"),
     _pair("num_attention_heads", "tensor_parallel_size")),
    ("exceeds available gpus", re.compile(r"Tensor parallel size \((\d+)\) exceeds available GPUs \((\d+)\)"),
     _pair("tensor_parallel_size", "gpu_count")),
    ("max local gpu count", re.compile(r"tensor_parallel_size \((\d+)\) to less than max local gpu count \((\d+)\)"),
     _pair("tensor_parallel_size", "gpu_count")),
    ("cuda_visible_devices", re.compile(r"CUDA_VISIBLE_DEVICES=([\d,]+)(?:\s|$)"),
     lambda m, f: f.set("gpu_count", len([d for d in m.group(1).split(",") if d]))),
]
# a platform other than Linux + NVIDIA (bot/diagnosis/root.py reads a generic error there as the platform's): marker,
# the pattern that confirms it, the name shown. Markers are picked so that no common word holds them ("tpu" is
# in "output", "npu" in "input"): each marker is read on a bounded number of lines.
_PLATFORMS: tuple[tuple[str, str, str], ...] = (
    ("ascend", r"\bAscend\b", "Ascend NPU"), ("cann", r"\bCANN(?:_\w+)?\b", "Ascend NPU"),
    ("torch_npu", r"\btorch_npu\b", "Ascend NPU"),
    ("rocm", r"\bROCm\b", "ROCm"), ("gfx", r"\bgfx\d{3,4}\b", "ROCm"), ("hip error", r"\bHIP error\b", "ROCm"),
    ("hiperror", r"\bhipError", "ROCm"),
    ("windows", r"\bWindows\b", "Windows"), ("dll", r"DLL load failed|\.dll\b", "Windows"),
    ("wsl", r"\bWSL\d?\b", "WSL"),
    ("ppc64le", r"\bppc64le\b", "ppc64le"), ("s390x", r"\bs390x\b", "s390x"), ("xpu", r"\bXPU\b", "Intel XPU"),
    ("gaudi", r"\bGaudi\b", "Gaudi (HPU)"), ("hpu", r"\bHPU\b", "Gaudi (HPU)"), ("habana", r"habana", "Gaudi (HPU)"),
    ("platform tpu", r"platform tpu", "TPU"), ("libtpu", r"\blibtpu", "TPU"),
    ("kunlun", r"\b[Kk]unlun", "Kunlun XPU"), ("cambricon", r"\bCambricon\b", "Cambricon MLU"),
    ("torch_mlu", r"\btorch_mlu\b", "Cambricon MLU"), ("musa", r"\bMUSA\b|\btorch_musa\b", "Moore Threads MUSA"),
    ("neuron", r"\bNeuron\b", "AWS Neuron"), ("macos", r"\bmacOS\b", "macOS"), ("darwin", r"\bdarwin\b", "macOS"),
)
def _named_platform(name: str) -> _Handler:
    def handler(_m: re.Match[str], f: _Facts) -> None:
        f.set("platform", name)

    return handler


_RULES.extend((marker, re.compile(pattern, re.IGNORECASE if marker in ("habana", "darwin") else 0),
               _named_platform(name)) for marker, pattern, name in _PLATFORMS)
_MARKERS = tuple(dict.fromkeys(marker for marker, _, _ in _RULES))
_BY_MARKER: dict[str, list[tuple[re.Pattern[str], _Handler]]] = {}
for _marker, _pattern, _handler in _RULES:
    _BY_MARKER.setdefault(_marker, []).append((_pattern, _handler))
_KNOWN = {f.name for f in fields(LogFacts)}


def read_facts(text: str) -> LogFacts:
    """Facts stated in a decoded paste. Linear: all markers are found in one Aho-Corasick pass, each on at
    most MAX_HITS_PER_MARKER lines; only the lines holding one are cleaned and matched."""
    if "\x1b" in text:
        text = strip_ansi(text)
    lower = text.lower()
    lines = text.split("\n")
    hits = literal_set(_MARKERS).first_lines(lower, MAX_HITS_PER_MARKER)
    facts = _Facts()
    for idx in sorted(hits):
        line = clean_line(lines[idx].rstrip("\r")).strip()
        facts.line_no, facts.line = idx + 1, line
        for marker in hits[idx]:
            for pattern, handler in _BY_MARKER[marker]:
                m = pattern.search(line)
                if m:
                    handler(m, facts)
    values = {k: (redact(v) if isinstance(v, str) else v) for k, v in facts.values.items() if k in _KNOWN}
    quotes = {n: redact(q) for n, q in facts.quotes.items()}
    conflicts = {k: tuple((redact(v), n) for v, n in seen) for k, seen in facts.conflicts.items() if k in _KNOWN}
    return LogFacts(**values, sources=dict(facts.sources), quotes=quotes,  # type: ignore[arg-type]
                    conflicts=conflicts)


# Labels for people (the answer's "what the log says about your setup"), in display order.
FACT_LABELS: dict[str, str] = {
    "vllm_version": "vLLM",
    "torch_version": "torch",
    "cuda_version": "CUDA",
    "driver_version": "NVIDIA driver",
    "python_version": "Python",
    "gpu_name": "GPU",
    "compute_capability": "compute capability",
    "gpu_count": "GPUs visible",
    "total_gpu_memory_gib": "GPU memory (GiB)",
    "model": "model",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "KV cache dtype",
    "max_model_len": "max_model_len",
    "tensor_parallel_size": "tensor parallel",
    "pipeline_parallel_size": "pipeline parallel",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enforce_eager": "enforce_eager",
    "block_size": "block size",
    "num_attention_heads": "attention heads",
    "weights_gib": "weights (GiB)",
    "activation_peak_gib": "activation peak (GiB)",
    "non_torch_gib": "non-torch memory (GiB)",
    "kv_cache_gib": "KV cache (GiB)",
    "kv_cache_tokens": "KV cache (tokens)",
    "gpu_blocks": "GPU blocks",
    "cpu_blocks": "CPU blocks",
    "max_concurrency": "max concurrency (x)",
    "estimated_max_model_len": "longest context the KV cache holds (tokens)",
    "kv_cache_needed_gib": "KV cache needed (GiB)",
    "port": "port",
    "launch_command": "launch command",
    "platform": "platform",
}


def fact_lines(facts: LogFacts | None, label_of: Callable[[str, str], str] | None = None) -> list[str]:
    """'label: value' per known fact, in display order (plain text; callers escape for their medium).
    label_of(name, english_label) words a label in the answer's language (presentation passes it)."""
    if facts is None:
        return []
    known = facts.known()
    out = []
    for name, label in FACT_LABELS.items():
        if name in known:
            value = known[name]
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            out.append(f"{label_of(name, label) if label_of else label}: {shown}")
    return out
