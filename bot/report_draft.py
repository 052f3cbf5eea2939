"""A draft upstream bug report (Markdown) for a paste the KB could not explain, in vLLM's template shape.

vLLM's bug template asks for "Your current environment" (the output of `python collect_env.py`) and
"🐛 Describe the bug" (what happened, the error with its traceback), and to search existing issues first.
The draft fills those from what we know — host facts of a diagnosis in the same thread when there is one,
else the facts the log states about itself — adds the shortest redacted excerpt that shows the root error,
what the KB suggested and whether it helped, and the search terms to try. It is only text: nothing is
sent anywhere. Everything it quotes comes from the already-redacted paste.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.models import Diagnosis, LogFacts, LogLine

MAX_EXCERPT_LINES = 40
UNKNOWN = "Could not collect"  # what collect_env itself prints for a missing value

# Section headings of vLLM's bug-report template (.github/ISSUE_TEMPLATE/400-bug-report.yml).
SECTIONS = ("Your current environment", "🐛 Describe the bug", "What vllm-doctor found",
            "Search terms for existing issues", "Before submitting a new issue...")


@dataclass(frozen=True)
class Environment:
    """The collect_env fields a maintainer reads first; None = unknown."""

    vllm: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    python: str | None = None
    os: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    gpus: tuple[str, ...] = ()
    nccl: str | None = None
    source: str = "the log"  # "the log" or "host <name> (vllm-doctor diagnose)"


def environment_from_log(facts: LogFacts) -> Environment:
    gpus: tuple[str, ...] = ()
    if facts.gpu_name:
        count = facts.gpu_count or facts.tensor_parallel_size or 1
        cap = f" (compute capability {facts.compute_capability})" if facts.compute_capability else ""
        gpus = tuple(f"GPU {i}: {facts.gpu_name}{cap}" for i in range(count))
    return Environment(vllm=facts.vllm_version, torch=facts.torch_version, torch_cuda=facts.cuda_version,
                       python=facts.python_version, driver=facts.driver_version, gpus=gpus)


def environment_from_host(host_facts: Mapping[str, Mapping[str, object]], host: str) -> Environment:
    """host_facts: check id → facts of one host's diagnosis (bot.runner.report.CheckResult.facts)."""

    def fact(check: str, name: str) -> str | None:
        value = host_facts.get(check, {}).get(name)
        return None if value in (None, "", []) else str(value)

    gpus = host_facts.get("gpu.inventory", {}).get("gpus")
    return Environment(
        vllm=fact("python.vllm_install", "version"), torch=fact("python.torch", "version"),
        torch_cuda=fact("python.torch", "cuda"), python=fact("python.runtime", "version"),
        os=fact("system.os", "PRETTY_NAME"), driver=fact("gpu.driver", "driver_version"),
        cuda_driver=fact("gpu.driver", "cuda_version"), nccl=fact("python.torch", "nccl_version"),
        gpus=tuple(str(g) for g in gpus) if isinstance(gpus, list) else (),
        source=f"host {host} (vllm-doctor diagnose)",
    )


def collect_env_text(env: Environment) -> str:
    """The fields in the order and wording `python collect_env.py` prints them."""
    def v(value: str | None) -> str:
        return value or UNKNOWN

    gpu_lines = "\n".join(env.gpus) if env.gpus else UNKNOWN
    return "\n".join([
        f"PyTorch version: {v(env.torch)}",
        f"CUDA used to build PyTorch: {v(env.torch_cuda)}",
        f"OS: {v(env.os)}",
        f"Python version: {v(env.python)}",
        f"CUDA runtime version: {v(env.cuda_driver)}",
        f"GPU models and configuration:\n{gpu_lines}",
        f"Nvidia driver version: {v(env.driver)}",
        f"NCCL version: {v(env.nccl)}",
        f"vLLM Version: {v(env.vllm)}",
        f"(filled in by vllm-doctor from {env.source}; run collect_env.py on the failing host to complete it)",
    ])


def excerpt(diagnosis: Diagnosis, max_lines: int = MAX_EXCERPT_LINES) -> list[LogLine]:
    """The shortest run of redacted evidence that ends with the (first) root error and its frames."""
    lines = list(diagnosis.distilled.evidence)
    if not lines:
        return []
    roots = diagnosis.distilled.root_errors
    if roots:
        first = roots[0].line_no
        upto = [ln for ln in lines if ln.line_no <= first + 2]
        lines = upto[-max_lines:] if upto else lines[:max_lines]
    return lines[:max_lines]


_EXC_PREFIX = re.compile(r"^(?:[\w.]+(?:Error|Exception|Exit|Warning)|RuntimeError|AssertionError):\s*")
_VARIABLE = re.compile(r"\d|/|\\|0x|'|\"|`|\(|\[|=")


def search_terms(diagnosis: Diagnosis, limit: int = 3) -> list[str]:
    """Quoted phrases from the root errors with variable parts cut off: what to paste into issue search."""
    terms: list[str] = []
    for line in diagnosis.distilled.root_errors or diagnosis.distilled.evidence[:3]:
        text = line.text.strip()
        exc = re.match(r"^([\w.]*(?:Error|Exception))\b", text)
        body = _EXC_PREFIX.sub("", text)
        # "unable to mmap 1693… bytes from file <…>: Cannot allocate memory (12)" → two fixed phrases
        phrases = [p for p in (_fixed_words(chunk) for chunk in re.split(r":\s+", body)[:3]) if len(p) >= 10]
        if phrases:
            term = " ".join(f'"{p}"' for p in phrases[:2]) + (f" {exc.group(1).rsplit('.', 1)[-1]}" if exc else "")
            if term not in terms:
                terms.append(term)
        if len(terms) >= limit:
            break
    return terms


def _fixed_words(chunk: str) -> str:
    """The leading words of a message before the first variable part (number, path, quote, bracket)."""
    words: list[str] = []
    for word in chunk.split():
        if _VARIABLE.search(word) or len(words) >= 9:
            break
        words.append(word.strip(".,:;"))
    return " ".join(w for w in words if w)


def draft(diagnosis: Diagnosis, facts: LogFacts, *, env: Environment | None = None,
          feedback: Mapping[str, str] | None = None, what_happened: str = "") -> str:
    """Markdown of the draft. feedback: case id → "helped" / "did not help" from the answer's buttons."""
    env = env or environment_from_log(facts)
    feedback = feedback or {}
    lines_ = excerpt(diagnosis)
    root = diagnosis.distilled.root_errors[0].text.strip() if diagnosis.distilled.root_errors else ""
    title = (root[:90] + "…") if len(root) > 90 else root
    out: list[str] = [f"# [Bug]: {title or 'vLLM fails (see log)'}", ""]
    out += ["### Your current environment", "", "<details>",
            "<summary>The output of <code>python collect_env.py</code></summary>", "", "```text",
            collect_env_text(env), "```", "", "</details>", ""]
    out += ["### 🐛 Describe the bug", ""]
    if what_happened:
        out += [what_happened, ""]
    setup = _setup_sentence(facts)
    if setup:
        out += [setup, ""]
    if lines_:
        out += ["The error, with its traceback (redacted by vllm-doctor; line numbers of the original paste):", "",
                "```text"]
        out += [f"{ln.line_no:>6}  {ln.text}" for ln in lines_]
        out += ["```", ""]
    else:
        out += ["(The paste held no error line.)", ""]
    out += ["### What vllm-doctor found", "", f"Verdict: **{diagnosis.verdict}**."]
    if diagnosis.matches:
        out.append("Nearest known failures in the vllm-doctor knowledge base:")
        for m in diagnosis.matches[:3]:
            verdict = feedback.get(m.case_id, "no feedback yet")
            out.append(f"- `{m.case_id}` — {m.title} (score {m.score:.2f}; {verdict})")
    else:
        out.append("No known failure in the knowledge base resembles this log.")
    out.append("")
    out += ["### Search terms for existing issues", ""]
    terms = search_terms(diagnosis)
    if terms:
        out += [f"- `{t} repo:vllm-project/vllm`" for t in terms]
    else:
        out.append("- (no distinctive error text; search with the exception name and the model name)")
    out += ["", "### Before submitting a new issue...", "",
            "- [ ] I searched for relevant issues with the terms above and found none that match.", "",
            "_Draft prepared by vllm-doctor from a redacted log. Nothing was sent anywhere; review before posting._",
            ""]
    return "\n".join(out)


def _setup_sentence(facts: LogFacts) -> str:
    parts: list[str] = []
    if facts.model:
        parts.append(f"model `{facts.model}`")
    for label, value in (("dtype", facts.dtype), ("quantization", facts.quantization),
                         ("max_model_len", facts.max_model_len), ("tensor_parallel_size", facts.tensor_parallel_size),
                         ("pipeline_parallel_size", facts.pipeline_parallel_size),
                         ("gpu_memory_utilization", facts.gpu_memory_utilization),
                         ("enforce_eager", facts.enforce_eager)):
        if value is not None:
            parts.append(f"{label}={value}")
    return ("Set-up read from the log: " + ", ".join(parts) + ".") if parts else ""


def sections_of(markdown: str) -> Sequence[str]:
    """The `### ` headings of a draft, in order (tests and the Slack file title use them)."""
    return [line[4:].strip() for line in markdown.splitlines() if line.startswith("### ")]
