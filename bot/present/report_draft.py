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


def search_terms(diagnosis: Diagnosis, limit: int = 3, root: LogLine | None = None) -> list[str]:
    """Quoted phrases from the root line, then the other root errors, with variable parts cut off: what to
    paste into issue search."""
    terms: list[str] = []
    lines = list(diagnosis.distilled.root_errors or diagnosis.distilled.evidence[:3])
    if root is not None:
        lines = [root, *(ln for ln in lines if ln.line_no != root.line_no)]
    for line in lines:
        text = line.text.strip()
        exc = re.match(r"^([\w.]*(?:Error|Exception))\b", text)
        body = re.sub(r"^\[Errno \d+\]\s*", "", _EXC_PREFIX.sub("", text))
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


# Lines that only say that something else failed: a report is titled by the error they wrap.
_WRAPPER = re.compile(
    r"WorkerProc (?:failed to start|initialization failed)|Engine core initialization failed|EngineCore failed to "
    r"start|Engine process failed to start|See (?:stack trace|root cause)|EngineDeadError|died unexpectedly|"
    r"^raise\b|Worker proc \S+ died|initialization failed due to an exception in a background process", re.I)
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b\s*:")


def root_line(diagnosis: Diagnosis) -> LogLine | None:
    """The line a report is about: `Diagnosis.root` when the root stage set it, else the earliest exception
    line that is not a wrapper ("WorkerProc failed to start"), else the first root error."""
    root = getattr(diagnosis, "root", None)
    if root is not None:
        return LogLine(root.line, root.text, "root")
    roots = sorted(diagnosis.distilled.root_errors, key=lambda ln: ln.line_no)
    unwrapped = [ln for ln in roots if not _WRAPPER.search(ln.text.strip())]
    for candidates in ([ln for ln in unwrapped if _EXCEPTION_LINE.match(ln.text.strip())], unwrapped, roots):
        if candidates:
            return candidates[0]
    return None


def _title(root: LogLine | None) -> str:
    """`OSError: [Errno 116] Stale file handle` from the root line, the quoted path at its end cut off."""
    if root is None:
        return "vLLM fails (see log)"
    text = re.sub(r":\s*(?:'[^']*'|\"[^\"]*\")\s*$", "", root.text.strip())
    return (text[:90] + "…") if len(text) > 90 else text


# Who and where: a user name in a home directory or a shell prompt, internal host names and addresses.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(/home/|/Users/|\\Users\\)(?!<user>)[^/\\\s'\"]+"), r"\1<user>"),
    (re.compile(r"(?<![\w.])[a-z_][\w.-]*@[\w-]+(?:\.[\w-]+)*(?=:)"), "<user>@<host>"),
    (re.compile(r"\b(?:10\.\d{1,3}|172\.(?:1[6-9]|2\d|3[01])|192\.168)\.\d{1,3}\.\d{1,3}\b"), "<internal-ip>"),
    (re.compile(r"\b[\w-]+(?:\.[\w-]+)*\.(?:local|internal|corp|lan|intranet|intra)\b"), "<host>"),
)


def mask_identity(text: str) -> str:
    """/home/alice/ → /home/<user>/, alice@gpu07: → <user>@<host>:, 10.0.3.7 → <internal-ip>, *.corp → <host>."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


_VERSION_FIELDS = (("vllm", "vLLM"), ("torch", "PyTorch"), ("torch_cuda", "CUDA (torch build)"),
                   ("python", "Python"), ("driver", "NVIDIA driver"))


def merge_environment(log_env: Environment, other: Environment) -> tuple[Environment, list[str]]:
    """The versions the log states win over a host report's (the log is the run that failed; the host may
    have changed since); each difference is said. Fields the log does not state come from the host."""
    merged: dict[str, str | None] = {}
    differences: list[str] = []
    for name, label in _VERSION_FIELDS:
        mine, theirs = getattr(log_env, name), getattr(other, name)
        merged[name] = mine or theirs
        if mine and theirs and mine != theirs:
            differences.append(f"{label}: {mine} in the log (used above), {theirs} on {other.source}")
    source = other.source if not any(getattr(log_env, n) for n, _ in _VERSION_FIELDS) else \
        f"the log's versions and {other.source}"
    gpus = other.gpus or log_env.gpus
    env = Environment(vllm=merged["vllm"], torch=merged["torch"], torch_cuda=merged["torch_cuda"],
                      python=merged["python"], os=other.os, driver=merged["driver"],
                      cuda_driver=other.cuda_driver, gpus=gpus, nccl=other.nccl, source=source)
    return env, differences


def _collect_env_differences(collect_env: str, facts: LogFacts) -> list[str]:
    """Versions the log states that differ from a pasted collect_env output (the log is the failing run)."""
    from bot.diagnosis.facts import read_facts  # the same reader: collect_env's "vLLM Version: …" lines

    pasted = read_facts(collect_env)
    out = []
    for name, label in (("vllm_version", "vLLM"), ("torch_version", "PyTorch"), ("cuda_version", "CUDA"),
                        ("python_version", "Python"), ("driver_version", "NVIDIA driver")):
        mine, theirs = getattr(facts, name), getattr(pasted, name)
        if mine and theirs and str(mine) != str(theirs):
            out.append(f"{label}: {mine} in the log, {theirs} in the collect_env output")
    return out


def _startup_completed(diagnosis: Diagnosis, before: int) -> bool:
    return any("application startup complete" in ln.text.lower() or "uvicorn running on" in ln.text.lower()
               for ln in diagnosis.distilled.cleaned if ln.line_no < before)


def _expected_actual(diagnosis: Diagnosis, facts: LogFacts, root: LogLine | None) -> list[str]:
    out: list[str] = []
    if facts.launch_command:
        line = facts.sources.get("launch_command")
        out += [f"Launch command (from the log{f', line {line}' if line else ''}):", "", "```bash",
                facts.launch_command, "```", ""]
    model = f" `{facts.model}`" if facts.model else ""
    if root is None:
        return out + ["**Expected:** the server runs without errors.", "",
                      "**Actual:** the log stops without a final error line.", ""]
    started = _startup_completed(diagnosis, root.line_no)
    expected = (f"the server keeps serving{model}" if started else f"the server starts and serves{model}")
    actual = ("after start-up completed, it fails" if started else "it fails at start-up")
    return out + [f"**Expected:** {expected}.", "",
                  f"**Actual:** {actual} with `{_title(root)}` (line {root.line_no}).", ""]


def _root_excerpt(diagnosis: Diagnosis, root: LogLine | None, max_lines: int = MAX_EXCERPT_LINES) -> list[LogLine]:
    """The traceback that ends in the root line (from its `Traceback` header), else the evidence excerpt."""
    cleaned = diagnosis.distilled.cleaned
    if root is not None and cleaned:
        upto = [ln for ln in cleaned if ln.line_no <= root.line_no]
        starts = [i for i, ln in enumerate(upto) if "traceback (most recent call last)" in ln.text.lower()]
        if starts and upto and upto[-1].line_no == root.line_no:
            block = upto[starts[-1]:]
            return block[-max_lines:]
    return excerpt(diagnosis, max_lines)


def draft(diagnosis: Diagnosis, facts: LogFacts, *, env: Environment | None = None,
          feedback: Mapping[str, str] | None = None, what_happened: str = "", collect_env: str | None = None) -> str:
    """Markdown of the draft. feedback: case id → "helped" / "did not help" from the answer's buttons.
    env: a host report's environment (the log's versions win where both say one); collect_env: the output of
    `python -m vllm.collect_env`, already redacted at the entry, pasted as the environment."""
    return mask_identity(_draft(diagnosis, facts, env, feedback or {}, what_happened, collect_env))


def _draft(diagnosis: Diagnosis, facts: LogFacts, env: Environment | None, feedback: Mapping[str, str],
           what_happened: str, collect_env: str | None) -> str:
    log_env = environment_from_log(facts)
    differences: list[str] = []
    if env is None:
        env = log_env
    else:
        env, differences = merge_environment(log_env, env)
    if collect_env and collect_env.strip():
        differences = _collect_env_differences(collect_env, facts)
        env_text = collect_env.strip("\n")
    else:
        env_text = collect_env_text(env)
    root = root_line(diagnosis)
    lines_ = _root_excerpt(diagnosis, root)
    out: list[str] = [f"# [Bug]: {_title(root)}", ""]
    out += ["### Your current environment", "", "<details>",
            "<summary>The output of <code>python collect_env.py</code></summary>", "", "```text",
            env_text, "```", "", "</details>", ""]
    if differences:
        out += ["Versions differ between the failing log and the environment above (the log is the run that "
                "failed):", ""] + [f"- {d}" for d in differences] + [""]
    out += ["### 🐛 Describe the bug", ""]
    if what_happened:
        out += [what_happened, ""]
    out += _expected_actual(diagnosis, facts, root)
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
    terms = search_terms(diagnosis, root=root)
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
