"""Unknown pastes clustered into drafted cases (issue 26, item 3): the team-learning loop's one implementation.

The product (`KBGrowth.cluster_drafts`, `vllm-doctor kb suggest`, the Slack review post) and the replay
(`vllm-doctor eval FILE --replay`, bot/evaluation/eval_replay.py) both add unknowns to a `Clusters` in the order they
were pasted and draft from it; nothing here is copied elsewhere.

A paste's key is the shape of its root line: the line bot/diagnosis/root.py reads (else the first exception line),
skipping lines a KB signature already explains, generalised by bot/kb_growth/suggest.generalise (numbers,
paths, hex, quoted names with digits or slashes become small regexes). A new shape joins an existing cluster
only when the two shapes differ slightly (most of the shorter one's words in the other, MERGE_WORDS) and the
MiniLM embeddings of their masked root lines are close (cosine >= the similarity setting); the embedding
function is handed in (the pipeline's encoder), so no heavy library is imported here.

A traceback's frame and source lines (`File "…", line N`, "return f(*args, **kwargs)", also under a worker
prefix) never key a cluster.

A cluster becomes a draft when its pastes come from at least `min_pastes` different threads and one signature
from the shared root line fires on every paste of the cluster, on no healthy start-up log and on no example of
an existing KB case. Signatures that keep too little literal text beyond exception class names, errno, Python's
own message templates, the messages a library prints around any failure of its kind ("cannot open shared object
file", "CUDA error:", NCCL's "(run with NCCL_DEBUG=INFO for details)", PyTorch's out-of-memory text) and a
path's directories (MIN_DRAFT_LITERAL: "IndexError: list index out of range", "TypeError: '…' object is not
subscriptable", "CUDA error: … encountered" name no failure of their own) are never drafted.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bot.diagnosis.match import SignatureScanner
from bot.kb_growth.lint import signature_fires
from bot.kb_growth.suggest import _escape, _probe_case, generalise, title_from_line
from bot.models import Distilled, LogLine
from indexer.text import clean_line, mask, strip_prefixes

MIN_PASTES = 2
DEFAULT_SIMILARITY = 0.6  # the kb_draft_similarity setting's default (chosen on dev.jsonl only)
# Two shapes "differ slightly" when this share of the shorter one's words is in the other (overlap coefficient:
# a line with a prefix the other lacks, "InternVL2 infer error:Attempted to assign …", still differs slightly).
MERGE_WORDS = 0.6
MIN_DRAFT_LITERAL = 30
_CLASS_PREFIX = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\s*:\s*|\\\[Errno [^\]]*\\\]\s*")
_REGEX_PART = re.compile(r"\.\*\?|\\S\+|\\d\+|\[\^?[^\]]*\]\*?\+?|\([^)]*\)[*+?]?|\s\+| \+|\\.")
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{2,}")
# Lines that only say another line failed: the wrappers of kb/triage/components.yaml (bot/diagnosis/root.py) plus
# headers whose detail is on the next error line (pydantic's "1 validation error for VllmConfig", vLLM's
# "AsyncLLM output_handler failed.", "EngineCore hit an exception") and the lines saying the engine died of an
# earlier error, in any wording ("MQLLMEngine is already dead", "RuntimeError('Engine loop has died')"). A cluster
# on them would join unrelated failures.
_HEADER = re.compile(
    r"\d+ validation errors? for \w+\s*$|output_handler failed|EngineCore hit an exception|"
    r"Exception in ASGI application|Error in chat completion stream generator|"
    r"\b(?:MQLLMEngine|[Ee]ngine(?: core)?|[Ee]ngine loop|Background loop) (?:is|has) (?:already )?(?:dead|died)\b|"
    r"\bEngine(?:Core)?DeadError\b"
)


def _generic(text: str) -> bool:
    from bot.diagnosis.root import _WRAPPERS  # the wrapper rules of kb/triage/components.yaml, compiled once there

    return bool(_HEADER.search(text) or _WRAPPERS.search(text))


# A traceback's frame and source lines state no failure: `File "…", line N, in f`, the caret marks under a line,
# and the code shown below a frame ("return self._call_impl(*args, **kwargs)", "output = self.model(x)"), also
# when a worker or logger prefix stands before it ("(VllmWorker rank=0 pid=1) ERROR … [multiproc_executor.py:527]
# return forward_call(*args, **kwargs)"). Two unrelated crashes share such a line whenever their stacks pass the
# same function, so it never keys a cluster.
_LOGGER_TAG = re.compile(r"^.*\[[\w.-]+\.py:\d+\]")
_PYTEST_SOURCE = re.compile(r"^>\s+(?=\S)")  # pytest marks the failing source line with ">"
_CODE_LINE = re.compile(
    r'File "[^"]+", line \d+|^\s*[\^~]+\s*$|'
    r"^\s*(?:return|raise|await|yield|assert|del)\b(?!\s*[:=])|"
    r"^\s*(?:(?:el)?if|for|while|with|async with|async for|(?:async )?def|class|except)\b[^:]*:\s*$|"
    r"^\s*(?:else|try|finally):\s*$|^\s*from [\w.]+ import [\w., ()*]+$|^\s*import [\w.]+(?: as \w+)?(?:, [\w.]+)*$|"
    r"^\s*(?:self\.)?[\w.]+(?:\[[^\]]*\])*(?:\s*,\s*[\w.]+)*\s*(?:[-+*/|&]?=)\s*(?:await\s+)?[\w.]+(?:\[[^\]]*\])*\(.*\)?\s*$"
)


def code_line(text: str) -> bool:
    """True for a traceback frame or source line, with or without a log prefix before it."""
    message = strip_prefixes(clean_line(text))
    tagged = _LOGGER_TAG.match(message)
    if tagged:
        message = message[tagged.end():]
    return bool(_CODE_LINE.search(_PYTEST_SOURCE.sub("", message)))


Embed = Callable[[list[str]], Any]  # texts -> (n, dim) array of unit rows (indexer.encoder.Encoder.encode)


# Python's own messages name no failure without the names around them ("'X' object has no attribute 'y'").
_PYTHON_TEMPLATE = re.compile(
    r"object has no attribute|object is not (?:subscriptable|callable|iterable)|got an unexpected keyword argument|"
    r"is not defined|No such file or directory|not enough values to unpack|list index out of range|"
    r"missing \d*\\?d?\+? ?required positional arguments?|cannot import name"
)
# Read on the signature's plain text (regex parts and escaped characters dropped, as counted):
# - an exception class anywhere in the line ("torch.distributed.DistBackendError", "RayTaskError(ActorDiedError)"),
#   not only as its prefix: the class says which library raised, not which failure;
# - the messages a library prints around any failure of its kind: the dynamic loader's "cannot open shared object
#   file", CUDA's "CUDA error:", NCCL's "NCCL error in: … (run with NCCL_DEBUG=INFO for details), NCCL version",
#   pip's "subprocess-exited-with-error", subprocess's "returned non-zero exit status", json's "line N column N
#   (char N)", PyTorch's "CUDA out of memory. Tried to allocate …". Two failures of one family ("libcudnn.so.8:
#   cannot open …" and "libcudart.so.12: cannot open …", "CUDA error: uncorrectable ECC error encountered" and
#   "… an illegal memory access was encountered") share them, so a signature of only these joins different
#   failures;
# - a file path's directories ("/torch/csrc/distributed/c10d/" of "…/NCCLUtils.hpp"): where the code lives, not
#   what failed.
_CLASS_ANYWHERE = re.compile(r"\b[A-Za-z_]*[A-Z]\w*(?:Error|Exception)\b")
_LIBRARY_TEMPLATE = re.compile(
    r"cannot open shared object file|\bCUDA error\b:?|\bNCCL error(?: in)?:?|run with NCCL_DEBUG=\S*\s*for details|"
    r"NCCL version|subprocess-exited-with-error|returned non-zero exit status|"
    r"(?:Expecting value|Extra data)?:?\s*line\s*column\s*char",
    re.I,
)
# PyTorch's out-of-memory message: the same words for weights, KV cache, activations and a leak
_TORCH_OOM = re.compile(
    r"(?:CUDA|HIP|XPU|NPU) out of memory\.?|Tried to allocate|GPU\s*has a total(?: capacity)?(?: of)?|"
    r"total capacity(?: of)?|of which|is free|"
    r"Including non-PyTorch memory,?|this process has|memory in use|Of the allocated memory|"
    r"is allocated by PyTorch,?(?: and)?|is reserved by PyTorch but unallocated|reserved in total by PyTorch|"
    r"If reserved (?:but unallocated )?memory is (?:large|>> allocated memory) try setting(?: max_split_size_mb)?|"
    r"to avoid fragmentation|See documentation for Memory Management(?: and PYTORCH_CUDA_ALLOC_CONF)?|"
    r"PYTORCH_CUDA_ALLOC_CONF|expandable_segments:True|already allocated|(?:\bhas\s*)?[KMG]iB\b",
    re.I,
)
# a path's directories (its file name stays: "vllm/_C….so: undefined symbol" names the library that failed)
_PATH_DIRS = re.compile(r"(?<![\w/])/(?:[\w.@+-]*/)+|\b[\w.@+-]+/(?:[\w.@+-]*/)+")


def literal_chars(pattern: str) -> int:
    """Characters of literal text a drafted signature keeps beyond exception classes, errno, Python's own
    message templates, the messages a library prints around any failure of its kind, and file paths."""
    body = _PYTHON_TEMPLATE.sub("", _CLASS_PREFIX.sub("", pattern))
    plain = _REGEX_PART.sub("", body)  # regex parts and escaped characters dropped (`\.`, `\(`)
    plain = _PATH_DIRS.sub("", _LIBRARY_TEMPLATE.sub("", _CLASS_ANYWHERE.sub("", plain)))
    if "out of memory" in plain.lower():
        plain = _TORCH_OOM.sub("", plain)
    return len(plain.strip())


def cluster_root(distilled: Distilled, scanner: SignatureScanner, root_text: str | None = None) -> str | None:
    """The paste's root line for clustering: bot/diagnosis/root.py's root line (`root_text`) unless a KB signature
    already explains it (a symptom's "engine is dead" is no new failure), else the first exception / error
    line that is not a traceback header, a frame or an explained line."""
    if root_text and root_text.strip() and not _generic(root_text) and not code_line(root_text) \
            and not scanner.scan([LogLine(1, root_text.strip(), "root")]):
        if "Traceback (most recent call last)" not in root_text:
            return root_text.strip()
    for r in distilled.root_errors:
        if r.kind == "frame" or "Traceback (most recent call last)" in r.text or not r.text.strip():
            continue
        if code_line(r.text):
            continue
        if _generic(r.text):
            continue
        if scanner.scan([r]):
            continue
        return r.text.strip()
    return None


def shape_of(root: str | None) -> str | None:
    """The cluster key of a root line, or None when it is too generic to ever be a draft."""
    shape = generalise(root) if root else None
    if shape is None or literal_chars(shape) < MIN_DRAFT_LITERAL:
        return None
    return shape


@dataclass(frozen=True)
class Unknown:
    """One paste without a confident answer."""

    key: Any  # the caller's id (candidate row id, replayed log index)
    root: str  # its root line (redacted)
    shape: str
    thread: str  # pastes from one thread count once
    lines: tuple[LogLine, ...]  # cleaned lines, for checking signatures
    permalink: str | None = None
    component: str = "other"
    versions: tuple[tuple[str, str], ...] = ()


@dataclass
class Cluster:
    members: list[Unknown] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return len({u.thread for u in self.members})


@dataclass(frozen=True)
class ClusterDraft:
    """A drafted case for reviewers: everything the Slack post and `kb suggest` show."""

    signature: str
    title: str
    component: str
    members: tuple[Unknown, ...]
    threads: int
    links: tuple[str, ...]

    @property
    def pastes(self) -> int:
        return len(self.members)

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "signature": self.signature, "component": self.component,
                "pastes": self.pastes, "threads": self.threads, "links": list(self.links),
                "roots": [u.root for u in self.members[:5]]}


def contains_message(root: str, shape: str) -> bool:
    """`root` states the whole message of `shape` (its exception class aside), e.g. a client's wrapper around
    the server's error: "openai.InternalServerError: … status Failure: ValueError('BitAndBytes with enforce_eager =
    False is not supported yet.')" holds "ValueError: BitAndBytes with enforce_eager = False is not supported
    yet." Only a message with MIN_DRAFT_LITERAL of literal text of its own counts."""
    body = _CLASS_PREFIX.sub("", shape, count=1)
    if literal_chars(body) < MIN_DRAFT_LITERAL:
        return False
    try:
        return re.search(body, root) is not None
    except re.error:
        return False


def _words(shape: str) -> set[str]:
    return set(_WORD.findall(shape))


def slightly_different(a: str, b: str) -> bool:
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return False
    return len(wa & wb) / min(len(wa), len(wb)) >= MERGE_WORDS


class Clusters:
    """Unknowns added in paste order; `add` returns the cluster the paste joined."""

    def __init__(self, embed: Embed | None = None, similarity: float = DEFAULT_SIMILARITY,
                 vectors: dict[str, np.ndarray] | None = None):
        """vectors: root line → embedding, kept by the caller between rounds (each line is embedded once)."""
        self.embed = embed
        self.similarity = similarity
        self.clusters: list[Cluster] = []
        self._by_shape: dict[str, Cluster] = {}
        self._vectors: dict[str, np.ndarray] = {} if vectors is None else vectors

    def _vector(self, root: str) -> np.ndarray | None:
        if self.embed is None:
            return None
        if root not in self._vectors:  # masked as the index embeds text: numbers and paths say nothing here
            vec = np.asarray(self.embed([mask(root)]), dtype=np.float32).reshape(-1)
            norm = float(np.linalg.norm(vec))
            self._vectors[root] = vec / norm if norm > 0 else vec
        return self._vectors[root]

    def add(self, unknown: Unknown) -> Cluster:
        cluster = self._by_shape.get(unknown.shape)
        if cluster is None:  # one root line holds the other's whole message, under a wrapper of its own
            cluster = next((other for other in self.clusters if other.members and (
                any(contains_message(unknown.root, s) for s in other.shapes)
                or any(contains_message(m.root, unknown.shape) for m in other.members))), None)
        if cluster is None and self.embed is not None:
            vec = self._vector(unknown.root)
            best, best_sim = None, self.similarity
            for other in self.clusters:
                if not any(slightly_different(unknown.shape, s) for s in other.shapes):
                    continue
                for member in other.members:
                    mv = self._vector(member.root)
                    sim = float(np.dot(vec, mv)) if vec is not None and mv is not None else 0.0
                    if sim >= best_sim:
                        best, best_sim = other, sim
            cluster = best
        if cluster is None:
            cluster = Cluster()
            self.clusters.append(cluster)
        if unknown.shape not in cluster.shapes:
            cluster.shapes.append(unknown.shape)
        self._by_shape[unknown.shape] = cluster
        cluster.members.append(unknown)
        return cluster

    def remove(self, cluster: Cluster) -> None:
        """A drafted (or dismissed) cluster starts again empty: later pastes of it are counted anew."""
        cluster.members.clear()


_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")
MIN_RUN = 3  # characters of a shared run kept between gaps


def _common_signature(roots: Sequence[str]) -> str | None:
    """A signature from the runs of words every root line shares, in order (merged shapes whose numbers,
    prefixes or single words differ): digits generalised, runs joined by `.*?`."""
    if len(roots) < 2:
        return None
    common = [(tok, False) for tok in _TOKEN.findall(roots[0])]  # (token, a gap before it)
    for other in roots[1:]:
        tokens = _TOKEN.findall(other)
        blocks = difflib.SequenceMatcher(None, [t for t, _ in common], tokens, autojunk=False).get_matching_blocks()
        kept: list[tuple[str, bool]] = []
        end_a = end_b = -1
        for a, b, size in blocks:
            for k in range(size):
                tok, gap = common[a + k]
                if k == 0 and kept:
                    gap = gap or a != end_a or b != end_b
                kept.append((tok, gap if kept else False))
            if size:
                end_a, end_b = a + size, b + size
        common = kept
    runs: list[str] = []
    current = ""
    for tok, gap in common:
        if gap and current:
            runs.append(current)
            current = ""
        current += tok
    runs.append(current)
    pieces = [r.strip() for r in runs if len(r.strip()) >= MIN_RUN]
    if not pieces:
        return None
    pattern = ".*?".join(re.sub(r"\d+", r"\\d+", _escape(p)) for p in pieces)
    pattern = re.sub(r"(?:\\ | ){2,}", " +", pattern)
    try:
        re.compile(pattern)
    except re.error:
        return None
    return pattern


def draft_signature(cluster: Cluster, healthy: Sequence[tuple[str, Sequence[LogLine]]],
                    examples: Sequence[Sequence[LogLine]]) -> str | None:
    """A signature from the shared root line that fires on every paste, on no healthy log and on no known
    case's example; None when no candidate does."""
    counts: dict[str, int] = {}
    for u in cluster.members:
        counts[u.shape] = counts.get(u.shape, 0) + 1
    options = sorted(counts, key=lambda s: -counts[s])
    prefix = _common_signature([u.root for u in cluster.members])
    if prefix is not None and prefix not in options:
        options.append(prefix)
    for pattern in options:
        if literal_chars(pattern) < MIN_DRAFT_LITERAL:
            continue
        probe = _probe_case(pattern)
        if not all(signature_fires(probe, u.lines) for u in cluster.members):
            continue
        if any(signature_fires(probe, lines) for _, lines in healthy):
            continue
        if any(signature_fires(probe, ex) for ex in examples):
            continue
        return pattern
    return None


def draft_of(cluster: Cluster, *, min_pastes: int, healthy: Sequence[tuple[str, Sequence[LogLine]]],
             examples: Sequence[Sequence[LogLine]]) -> ClusterDraft | None:
    """The cluster's draft, once its pastes come from `min_pastes` threads and a signature passes."""
    if cluster.threads < max(min_pastes, 1) or not cluster.members:
        return None
    signature = draft_signature(cluster, healthy, examples)
    if signature is None:
        return None
    components = [u.component for u in cluster.members if u.component != "other"]
    component = max(set(components), key=components.count) if components else "other"
    links = tuple(dict.fromkeys(u.permalink or u.thread for u in cluster.members))
    return ClusterDraft(signature, title_from_line(cluster.members[0].root), component,
                        tuple(cluster.members), cluster.threads, links)
