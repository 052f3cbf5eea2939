"""Every value that crosses a stage boundary, for both flows (bot/pipeline.py composes the stages):

    explain (pastes):  Paste (bot/diagnosis/paste.py) → Distilled (LogLine) → Diagnosis (Match, Evidence) → Explanation
                       LogFacts: what the log says about the setup
    diagnose (hosts):  HostRequest → CheckResult per check → HostReport per host → FleetReport → reply
                       HostFacts: a FleetReport's lines as the explain step's context

Paste stays in bot/diagnosis/paste.py: only its entry functions may make one (secrets are redacted there, once).
Plain dataclasses with pure helpers only; nothing here talks to the outside world or imports a stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["match", "uncertain", "unknown"]
Language = Literal["en", "zh"]
Confidence = Literal["low", "medium", "high"]
# Host facts the explain step may read: a mapping (rendered "key: value") or ready lines.
HostFacts = Mapping[str, object] | Sequence[str]
# Logger level of a line, read from the prefix that cleaning removed ("" = no level prefix).
LogLevel = Literal["", "debug", "info", "warning", "error"]
# The part of a deployment a root line blames (issue 25's list; bot/diagnosis/root.py decides, kb/triage/ has the
# steps).
Component = Literal[
    "gpu-memory", "host-memory", "cuda-driver-stack", "python-packages", "model-files", "parallelism",
    "gpu-hardware", "serving-api", "engine-config", "platform", "other",
]
COMPONENTS: tuple[Component, ...] = (
    "gpu-memory", "host-memory", "cuda-driver-stack", "python-packages", "model-files", "parallelism",
    "gpu-hardware", "serving-api", "engine-config", "platform", "other",
)


@dataclass(frozen=True)
class LogLine:
    """A cleaned log line with its 1-based line number in the original paste."""

    line_no: int
    text: str
    kind: Literal["root", "frame", "context"] = "context"
    level: LogLevel = ""


@dataclass(frozen=True)
class WrappedLine:
    """An error line whose message a narrow terminal (or rich's console) wrapped onto the bare lines below it,
    joined: signatures may match across the wrap, never inside one line alone (that line is scanned as it is)."""

    line: LogLine  # at the first line's number, with the joined text
    head_len: int  # length of the first line's text within it


@dataclass(frozen=True)
class Distilled:
    """What distillation keeps of a paste."""

    evidence: tuple[LogLine, ...]  # lines that matter, in original order (root errors + last frames + context)
    root_errors: tuple[LogLine, ...]  # exception / CUDA error / NCCL WARN lines
    query: str  # masked text (numbers, hex, paths, IPs) for BM25 and the dense encoder
    total_lines: int
    total_bytes: int
    language: Language = "en"  # language of the human text around the log
    notes: tuple[str, ...] = ()  # e.g. "input truncated to the last 2 MB", "decoded as latin-1"
    cleaned: tuple[LogLine, ...] = ()  # all cleaned, de-duplicated lines (for signature scanning)
    truncated: bool = False  # the paste ends inside a traceback: its final exception line is missing
    # a short paste of nothing but logger INFO/DEBUG/WARNING lines: it is about them (a start-up hint alone)
    quiet_only: bool = False
    wrapped: tuple[WrappedLine, ...] = ()  # soft-wrapped error messages, joined (for signature scanning)


@dataclass(frozen=True)
class Evidence:
    line_no: int
    text: str
    why: str  # English, for the JSON edge: "signature: No available memory for the cache blocks", "fact: …"
    kind: EvidenceKind  # what the line proves: code reads this, never the wording of `why`
    # a proven fact rule: its position in the case's `rules` (the presentation words it from the case, in the
    # answer's language; `why` keeps the English for the JSON edge)
    rule: int | None = None


# What an evidence line is. signature, fact_rule and fact establish a case; the others only point at one.
EvidenceKind = Literal[
    "signature",  # a case's signature regex fired on the line
    "fact_rule",  # a case's fact rule holds on the facts the log states (Evidence.rule: which one)
    "fact",  # a fact the proven rule used, on the line that states it
    "frame",  # a traceback frame the case names (a paste cut before its exception)
    "earlier_root",  # an earlier root error above a symptom case: the line to diagnose
    "shared_terms",  # words the line shares with the case (lexical / dense similarity)
    "question_terms",  # a question's words or glossary terms that led to the case
]


# What a Note says (bot/present/i18n.py words each kind, in either language, at the edge).
NoteKind = Literal[
    "truncated",  # the paste ends inside a traceback; the answer is a guess from the frames and facts above it
    "truncated_answered",  # ... and the answer rests on the error lines and facts before the cut traceback
    "two_failures",  # the error on `line` came first and reads like another problem; `case_id` matched after it
    "consequence",  # a symptom case: the earlier root error on `line` is the cause to fix
    "consequence_unseen",  # a symptom case whose earlier root error the paste does not show
    "upgrade",  # `package` is fixed in `version` (the case's fixed_in); the paste shows `shown`, older
    "already_fixed",  # ... and `shown` already has the fix
    "inside_affects",  # `package` `version` is the case's `affects` specifier; `shown` lies inside it
    "outside_affects",  # ... and `shown` lies outside it
]


@dataclass(frozen=True)
class Note:
    """A finding of the ranking for the reader (bot/diagnosis/match.py, bot/diagnosis/versions.py), as a value: the
    presentation (bot/present/render.py, bot/slack/reply/, the JSON edge) words it in the answer's language
    (bot/present/i18n.note_text)."""

    kind: NoteKind
    line: int | None = None  # two_failures, consequence: the paste line (1-based) the note points at
    case_id: str = ""  # two_failures: the case matched only after that line
    package: str = ""  # version notes: the package the case names ("vllm", "torch", ...)
    version: str = ""  # upgrade / already_fixed: the fixed_in version; *_affects: the affects specifier
    shown: str = ""  # version notes: the version known for this paste
    source: Literal["log", "host"] = "log"  # where `shown` was read: the log, or a host's /vllm-diagnose run
    host: str = ""  # the host's label when source == "host"


@dataclass(frozen=True)
class Match:
    case_id: str
    title: str
    title_zh: str
    area: str
    score: float  # 0..1, calibrated confidence that this case is the cause
    signature_hit: bool
    evidence: tuple[Evidence, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)  # component scores (signature, bm25, dense, fused)
    notes: tuple[Note, ...] = ()  # e.g. Note("upgrade", package="vllm", version="0.6.4", shown="0.5.3")


@dataclass(frozen=True)
class Root:
    """The earliest line that states the error to fix (not a wrapper such as 'WorkerProc failed to start'),
    and the component it blames. JSON: {"line": N, "text": "...", "component": "..."}; None when the paste
    states no cause (cut before the exception)."""

    line: int  # 1-based line number in the paste, as Evidence.line_no
    text: str  # the cleaned (redacted) line
    component: Component
    raised_at: RaisedAt | None = None  # the traceback frame right above the root line: where the error was raised


@dataclass(frozen=True)
class RaisedAt:
    """Where the root line's exception was raised: the innermost frame of the traceback that ends in it.
    JSON: {"file": "vllm/config.py", "line": 1834, "function": "__post_init__", "log_line": 17}."""

    file: str  # below site-packages (vllm/config.py), else the file's name (train.py): no user paths
    line: int  # line in that file
    function: str
    log_line: int  # the frame's line in the paste
    app: bool = False  # the application's own code, not the serving stack (kb/triage/components.yaml `libraries`)


@dataclass(frozen=True)
class Change:
    """One setting that differs between a working run's log and the failing one (`explain --since`)."""

    group: Literal["versions", "engine", "memory"]
    name: str  # the LogFacts field
    before: str  # as the working log states it
    after: str  # as the failing log states it
    before_line: int | None = None
    after_line: int | None = None


@dataclass(frozen=True)
class FilledValue:
    """One placeholder of the fix commands, filled from the log (bot/diagnosis/fix_values.py). `reason` is an i18n key
    (bot/present/i18n.py, "fit.*") worded with `params` at the edge; `lines` are the paste lines it was read from."""

    name: str  # a kb.schema.PLACEHOLDERS name, e.g. "max_model_len_fit"
    value: str
    reason: str = ""  # "" for a value the log states as it is
    params: tuple[tuple[str, str], ...] = ()
    lines: tuple[int, ...] = ()


@dataclass(frozen=True)
class FixValues:
    """The fix commands' placeholders this paste fills, and what could not be filled or disagreed."""

    values: dict[str, FilledValue] = field(default_factory=dict)
    # (i18n key, params): two values the log states for one setting, a value that does not fit …
    notes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    matches: tuple[Match, ...]  # best first, at most 5
    distilled: Distilled
    elapsed_ms: float = 0.0
    # Advisory cases whose signature fired on a paste whose root error they do not explain: shown as
    # "also noticed", never as the answer.
    also_noticed: tuple[Match, ...] = ()
    facts: LogFacts | None = None  # what the log says about the setup (bot/diagnosis/facts.py)
    notes: tuple[Note, ...] = ()  # matcher notes, e.g. Note("truncated"): the final error line is missing
    kind: Literal["log", "question"] = "log"  # question: short text without a log (bot/diagnosis/question.py)
    root: Root | None = None  # the line to fix and its component (bot/diagnosis/root.py); None: no line states a cause
    # the fix commands' placeholders filled from this log (bot/diagnosis/fix_values.py)
    fix_values: FixValues | None = None

    @property
    def best(self) -> Match | None:
        return self.matches[0] if self.matches else None


@dataclass(frozen=True)
class LogFacts:
    """What vLLM, torch and the platform printed about themselves in a paste (read by bot/diagnosis/facts.py).

    Every field is None when the log does not say it. Sizes are GiB; `sources` maps a field name to the
    1-based line number it was read from, so evidence can quote the line. Shared by the explain flow
    (rules over facts, the answer's "what the log says about your setup"), pictures and report drafts.
    """

    vllm_version: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None
    python_version: str | None = None
    model: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None  # "8.0"
    gpu_count: int | None = None
    total_gpu_memory_gib: float | None = None
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    kv_cache_gib: float | None = None
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    max_concurrency: float | None = None
    num_attention_heads: int | None = None
    kv_cache_tokens: int | None = None  # V1 engine: "GPU KV cache size: 445,888 tokens"
    # the longest context the KV cache holds, as the error states it ("the estimated maximum model length is
    # 21440", V0's "… stored in KV cache (23648)")
    estimated_max_model_len: int | None = None
    kv_cache_needed_gib: float | None = None  # V1: "(16.00 GiB KV cache is needed, …"
    port: int | None = None  # --port, non-default args, "Uvicorn running on http://0.0.0.0:8000"
    launch_command: str | None = None  # the `vllm serve …` / api_server line the log starts with (redacted)
    platform: str | None = None  # a platform other than Linux + NVIDIA the log names ("Ascend NPU", "ROCm", …)
    sources: dict[str, int] = field(default_factory=dict)
    quotes: dict[int, str] = field(default_factory=dict)  # line number → the cleaned line a fact came from
    # field → the other values the log states for it, with their lines (the first stated one is used)
    conflicts: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def known(self) -> dict[str, str | int | float | bool]:
        """The facts the log states, in field order (for JSON and the answer)."""
        skip = ("sources", "quotes", "conflicts")
        return {k: v for k, v in self.__dict__.items() if k not in skip and v is not None}


# --- explain: the answer ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Explanation:
    """The answer to a paste: from the LLM (validated, cites a retrieved case) or the KB case text."""

    case_id: str  # one of the retrieved case ids, or "none"
    summary: str
    why: str
    fix_steps: list[str]
    confidence: Confidence
    language: Language
    source: Literal["llm", "kb"]
    note: str | None = None  # one line: why this is a KB-only answer, or anything the reader should know
    model: str | None = None
    cached: bool = False
    timings: dict[str, float] = field(
        default_factory=dict, compare=False
    )  # ms: prepare, llm, validate, total

    def text(self) -> str:
        """Plain text: summary, why, numbered steps (what the stream previews while it is written)."""
        parts = [p for p in (self.summary, self.why) if p]
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(self.fix_steps, 1))
        return "\n\n".join([*parts, steps] if steps else parts)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["timings"] = {k: round(v, 1) for k, v in self.timings.items()}
        return out


# --- diagnose: hosts ------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostRequest:
    """What to check: an inventory host or group, which checks (ids or areas), up to which tier."""

    target: str
    checks: tuple[str, ...] = ()  # check ids or areas; empty = the whole catalogue up to max_tier
    max_tier: int = 0


CHECK_VERDICTS = ("ok", "skipped", "warn", "timeout", "error", "fail")  # worst last


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=CHECK_VERDICTS.index) if verdicts else "skipped"


# check id → the version facts a host report keeps in its JSON (bot/diagnosis/versions.py reads them against the
# cases' fixed_in / affects).
REPORTED_FACTS: dict[str, tuple[str, ...]] = {
    "python.vllm_install": ("version",),
    "python.torch": ("version", "cuda"),
    "gpu.driver": ("driver_version",),
    "python.runtime": ("version",),
}


@dataclass
class CheckResult:
    """One check on one host: its verdict, the KB cases it points to, and its (redacted) output."""

    id: str
    title: str
    verdict: str
    message: str
    cases: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    tier: int = 0
    why: str | None = None
    command: str | None = None  # shown in the raw file, never executed from here
    rc: int | None = None
    stdout: str = ""  # redacted
    stderr: str = ""  # redacted
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "verdict": self.verdict, "message": self.message,
                               "cases": list(self.cases), "duration_s": round(self.duration_s, 3)}
        versions = self.version_facts()
        if versions:
            out["facts"] = versions  # added key: read back by bot/runner/report.py for `explain --host-report`
        return out

    def version_facts(self) -> dict[str, str]:
        """The version facts of this check (REPORTED_FACTS); the only facts a JSON report carries, because
        other facts may hold values (environment, paths) that the redacted message does not show."""
        names = REPORTED_FACTS.get(self.id, ())
        return {n: str(self.facts[n]) for n in names
                if isinstance(self.facts.get(n), (str, int, float)) and not isinstance(self.facts.get(n), bool)}


@dataclass
class HostReport:
    """Every check of one host, or why the host could not be checked at all."""

    host: str
    address: str | None = None
    error: str | None = None  # the host could not be checked at all (unreachable, auth, host key)
    # for scripts (`--json`): HostUnreachable / AuthFailed / HostKeyMismatch / RunnerError (the host cannot
    # run the checks) / timeout (the host did not answer the prerequisite probe in time) / InternalError (a
    # bug, reported per host); None when the host was checked
    error_kind: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        return worst([c.verdict for c in self.checks])

    def by_area(self) -> dict[str, str]:
        """area -> worst verdict (for the host × area grid)."""
        areas: dict[str, list[str]] = {}
        for check in self.checks:
            areas.setdefault(check.area, []).append(check.verdict)
        return {area: worst(v) for area, v in areas.items()}

    def check(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "error": self.error, "error_kind": self.error_kind,
                "duration_s": round(self.duration_s, 3), "checks": [c.to_dict() for c in self.checks]}


@dataclass
class FleetReport:
    """One diagnose run over a host or a group (`vllm-doctor diagnose --json` writes it)."""

    target: str
    hosts: list[HostReport]
    max_tier: int = 0
    checks_requested: list[str] | None = None
    started_at: float = 0.0  # unix time
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "max_tier": self.max_tier, "duration_s": round(self.duration_s, 3),
                "hosts": [h.to_dict() for h in self.hosts]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @property
    def verdict(self) -> str:
        return worst([h.verdict for h in self.hosts])

    def host(self, name: str) -> HostReport | None:
        return next((h for h in self.hosts if h.host == name), None)

    def findings(self) -> list[tuple[str, CheckResult]]:
        """(host, result) for every check that is not ok/skipped, worst first."""
        out = [(h.host, c) for h in self.hosts for c in h.checks if c.verdict not in ("ok", "skipped")]
        return sorted(out, key=lambda hc: -CHECK_VERDICTS.index(hc[1].verdict))

    def case_ids(self) -> list[str]:
        """KB cases the findings point to, worst finding first, without duplicates."""
        seen: list[str] = []
        for _, result in self.findings():
            seen += [c for c in result.cases if c not in seen]
        return seen

    def facts_for_prompt(self, host: str | None = None, max_chars: int = 3000) -> str:
        """Short, redacted host facts for the explain step: one line per check, failures first (across
        all hosts of a group, so one healthy host's lines cannot crowd out another's failures)."""
        ranked: list[tuple[int, str]] = []
        for report in self.hosts:
            if host and report.host != host:
                continue
            if report.error:
                ranked.append((CHECK_VERDICTS.index("error"), f"{report.host}: could not be checked: {report.error}"))
                continue
            for c in report.checks:
                if c.verdict == "skipped":
                    continue
                ranked.append((CHECK_VERDICTS.index(c.verdict), f"{report.host} {c.id} [{c.verdict}]: {c.message}"))
        ranked.sort(key=lambda item: -item[0])  # stable: host order, then catalogue order within a verdict
        text = "\n".join(line for _, line in ranked)
        return text if len(text) <= max_chars else text[: max_chars - 15] + "\n[… truncated]"

    def raw_text(self) -> str:
        """Every command, exit status and (redacted) output, for upload as a file in the thread."""
        parts = [f"# vllm-doctor diagnose {self.target}  (tier ≤ {self.max_tier}, {self.duration_s:.1f} s)"]
        for report in self.hosts:
            parts.append(f"\n======== {report.host} ({report.address or report.host}) ========")
            if report.error:
                parts.append(f"HOST ERROR: {report.error}")
                continue
            shown: dict[tuple[str | None, str, str], str] = {}  # checks sharing one command share its output
            for c in report.checks:
                parts.append(f"\n--- {c.id} [{c.verdict}] {c.message}")
                if c.command:
                    parts.append(f"$ {c.command}   (rc {c.rc}, {c.duration_s:.2f} s)")
                key = (c.command, c.stdout, c.stderr)
                if c.command and key in shown:
                    parts.append(f"(same output as {shown[key]} above)")
                    continue
                shown[key] = c.id
                if c.stdout.strip():
                    parts.append(c.stdout.rstrip())
                if c.stderr.strip():
                    parts.append("[stderr]\n" + c.stderr.rstrip())
        return "\n".join(parts) + "\n"

