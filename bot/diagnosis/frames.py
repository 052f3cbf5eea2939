"""Traceback fingerprints: rank cases by the frames of a traceback that was cut before its exception line.

A paste cut inside a traceback (Slack truncation, copying the top of a long log) has lost the line that says
what failed; what is left is where it failed. Each case names the functions (or dotted modules) that raise
its failure (`frames:` in the case YAML, read from the vLLM / torch / transformers source), and the innermost
frames of its own example tracebacks add theirs. A cut traceback's innermost frames are scored against them,
the innermost frame counting most and a name many cases share counting little (inverse document frequency),
so `_verify_quantization` points at one case and `load_model` at several, weakly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bot.models import Distilled, LogLine
from kb.schema import Case

# 'File "…/vllm/config.py", line 204, in _verify_quantization' (after a logger or rank prefix)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# Frames every traceback passes through: they say nothing about which failure it was.
GENERIC = frozenset(
    "__init__ <module> <lambda> forward _call_impl _wrapped_call_impl wrapper inner run main __call__ "
    "collective_rpc run_engine_core from_engine_args _run_module_as_main _run_code decorate_context "
    "init wrapped_fn _wrap_awaitable result raise_exception_from_result _wrapper sync_wrapper worker_busy_loop "
    "_run_worker_process _raise_exception_on_finish run_mp_engine nim_run_mp_engine run_engine_loop "
    "get_output_async request post get generate write __torch_function__ _run_in_subprocess check_returncode "
    "launch_model execute_method run_method _chec".split()
)
# A keyword spelled like a Python function (create_weights, _dummy_sampler_run): the author named a frame.
_FUNCTION_KEYWORD = re.compile(r"^_*[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
DEPTH_DECAY = 0.6  # weight of each frame relative to the one below it (the innermost frame counts most)
FRAMES_READ = 6  # innermost frames of the cut traceback that are scored
EXAMPLE_FRAMES = 2  # innermost frames taken from each traceback in a case's examples


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback: its function, and the names on the code line printed under it."""

    function: str
    module: str  # dotted path below the install root, "" when unknown (vllm.config)
    code: str = ""
    line_no: int = 0  # of the frame line in the paste
    text: str = ""  # the frame line itself
    path: str = ""  # the file as printed
    file_line: int = 0  # the line in that file

    def terms(self) -> set[str]:
        out = {self.function} if self.function not in GENERIC else set()
        if self.module:
            out.add(f"{self.module.rsplit('.', 1)[-1]}.{self.function}")  # tokenization_auto.from_pretrained
        for name in _NAME.findall(self.code):
            parts = name.split(".")
            # vllm._C, AutoTokenizer.from_pretrained, _C: each dotted suffix of a name on the code line
            out.update(".".join(parts[i:]) for i in range(len(parts)))
        return out - GENERIC


def _module(path: str) -> str:
    path = path.replace("\\", "/")
    for root in ("site-packages/", "dist-packages/"):
        if root in path:
            path = path.rsplit(root, 1)[1]
            break
    return path[:-3].replace("/", ".") if path.endswith(".py") else ""


def read_frames(lines: Sequence[LogLine]) -> list[Frame]:
    """The frames of these lines in order, each with the code line right under it (when that line was kept)."""
    frames: list[Frame] = []
    previous: LogLine | None = None
    for line in lines:
        m = _FRAME.search(line.text)
        if m:
            frames.append(Frame(m.group(3), _module(m.group(1)), line_no=line.line_no, text=line.text,
                                path=m.group(1), file_line=int(m.group(2))))
        elif frames and previous is not None and _FRAME.search(previous.text) and line.line_no == previous.line_no + 1:
            frames[-1] = replace(frames[-1], code=line.text.strip())
        previous = line
    return frames


def cut_frames(distilled: Distilled) -> list[Frame]:
    """The innermost frames of a traceback no exception line closed, innermost first (empty when there is none):
    the one a truncated paste ends in, or one cut off by other output (start-up lines, another process)."""
    lines = distilled.cleaned or distilled.evidence
    crash = [r.line_no for r in distilled.root_errors if r.level not in ("info", "debug", "warning")]
    after = max(crash, default=0)  # the cut traceback is the last one: frames after the last error line
    tail = [ln for ln in lines if ln.line_no > after]
    return list(reversed(read_frames(tail)))[:FRAMES_READ]


def _example_terms(case: Case) -> set[str]:
    """The innermost frames of each traceback in the case's examples."""
    out: set[str] = set()
    for example in case.examples:
        run: list[str] = []
        code_next = False
        for text in example.log.splitlines():
            m = _FRAME.search(text)
            if m:
                run.append(m.group(3))
                code_next = True
                continue
            stripped = text.strip()
            if code_next or not stripped or set(stripped) <= set("^~ "):  # code and caret lines under a frame
                code_next = False
                continue
            out.update(run[-EXAMPLE_FRAMES:])  # the line that closes the traceback
            run = []
        out.update(run[-EXAMPLE_FRAMES:])
    return out - GENERIC


class FrameIndex:
    """Each case's fingerprint names, and how rare each name is across the KB."""

    def __init__(self, cases: Iterable[Case]):
        self.terms: dict[str, frozenset[str]] = {}
        for case in cases:
            found = set(case.frames) | _example_terms(case) | {k for k in case.keywords if _FUNCTION_KEYWORD.match(k)}
            if found:
                self.terms[case.id] = frozenset(found)
        n = max(1, len(self.terms))
        df: dict[str, int] = {}
        for names in self.terms.values():
            for name in names:
                df[name] = df.get(name, 0) + 1
        self._idf = {name: math.log(1 + n / k) for name, k in df.items()}
        self._idf_max = math.log(1 + n)

    def scores(self, frames: Sequence[Frame]) -> dict[str, float]:
        """case id → 0..1: depth-weighted rarity of the names the cut frames share with the case."""
        if not frames or not self.terms:
            return {}
        per_frame = [frame.terms() for frame in frames]
        out: dict[str, float] = {}
        for case_id, names in self.terms.items():
            total = 0.0
            for depth, terms in enumerate(per_frame):
                shared = terms & names
                if shared:
                    total += DEPTH_DECAY**depth * max(self._idf[t] for t in shared) / self._idf_max
            if total > 0:
                out[case_id] = min(1.0, total)
        return out

    def evidence(self, frames: Sequence[Frame], case_id: str) -> list[tuple[Frame, list[str]]]:
        """The cut frames that share a fingerprint name with the case, innermost first, with those names."""
        names = self.terms.get(case_id, frozenset())
        return [(frame, sorted(frame.terms() & names)) for frame in frames if frame.terms() & names]
