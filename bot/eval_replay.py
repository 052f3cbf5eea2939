"""`vllm-doctor eval FILE --replay`: the team-learning loop replayed on labelled logs, in file order.

Each log is diagnosed as a user's paste would be. One that gets no confident answer, and that no draft
accepted so far explains, joins the unknowns, clustered by the shape of its root line (the first root error
line with numbers, paths, hex and quoted names generalised: bot/kb_growth/suggest.generalise). When a
cluster holds MIN_PASTES pastes from different threads, a case is drafted: a signature from the shared root
line that fires on every paste of the cluster, on no healthy start-up log and on no example of an existing
KB case. A simulated reviewer accepts every draft; later logs that its signature hits are answered by it.

Reported (last line, JSON): drafts, purity (share of drafts whose logs share one label), answered_before and
answered_after (logs answered right, i.e. a confident answer of their own label, without and with the loop),
false_drafts (drafts whose signature fires on a replayed log of another label). A log's label is its
`expected` case, else its `label` field, else its own id (an uncovered log without a label is a failure of its
own: a draft that joins two of them counts as impure).
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.eval_tuning import CachedMatching
from bot.evaluate import load_labelled
from bot.kb_growth.lint import cleaned_lines, healthy_logs, signature_fires
from bot.kb_growth.suggest import _probe_case, generalise, suggest_title
from bot.match import Matcher, MatchParams, SignatureScanner
from bot.models import Distilled
from bot.pipeline import Pipeline
from kb.schema import Case

MIN_PASTES = 2
# A drafted signature keeps at least this much literal text besides the exception class and errno: "IndexError:
# list index out of range" or "[Errno 2] No such file or directory" name no failure of their own.
MIN_DRAFT_LITERAL = 30
_CLASS_PREFIX = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\s*:\s*|\\\[Errno [^\]]*\\\]\s*")
_REGEX_PART = re.compile(r"\\S\+|\\d\+|\[\^?[^\]]*\]\*?\+?|\([^)]*\)[*+?]?|\s\+| \+|\\.")


@dataclass
class Draft:
    pattern: str
    title: str
    logs: list[int] = field(default_factory=list)  # indices of the logs it was drafted from

    def probe(self) -> Case:
        return _probe_case(self.pattern)


@dataclass
class ReplayResult:
    drafts: list[Draft]
    labels: list[str]
    answered_before: int
    answered_after: int
    false_drafts: int
    fires: dict[int, list[int]]  # draft index -> replayed logs its signature hits

    def purity(self) -> float:
        if not self.drafts:
            return 0.0
        pure = sum(1 for d in self.drafts if len({self.labels[i] for i in d.logs}) == 1)
        return round(pure / len(self.drafts), 4)

    def as_dict(self) -> dict[str, Any]:
        return {
            "logs": len(self.labels),
            "drafts": len(self.drafts),
            "purity": self.purity(),
            "answered_before": self.answered_before,
            "answered_after": self.answered_after,
            "false_drafts": self.false_drafts,
        }


def _root_line(distilled: Distilled, scanner: SignatureScanner) -> str | None:
    """The paste's root line: the first exception / error line that is not a traceback header, a frame, or a
    line a KB signature already explains (a symptom's "engine is dead" is no new failure)."""
    for r in distilled.root_errors:
        if r.kind == "frame" or "Traceback (most recent call last)" in r.text or not r.text.strip():
            continue
        if scanner.scan([r]):
            continue
        return r.text.strip()
    return None


def _literal(pattern: str) -> int:
    """Characters of literal text a drafted signature keeps beyond the exception class and errno."""
    body = _CLASS_PREFIX.sub("", pattern)
    return len(_REGEX_PART.sub("", body).strip())


def replay(doctor: Pipeline, rows: Sequence[dict[str, Any]], min_pastes: int = MIN_PASTES,
           healthy_dir: Path | None = None, matching: CachedMatching | None = None) -> ReplayResult:
    matching = matching or CachedMatching(doctor.kb, doctor.index, doctor.distil)
    matcher = Matcher(doctor.kb, matching.index, params=MatchParams(), ranker=doctor.matcher.ranker)
    healthy = healthy_logs(healthy_dir)
    scanner = SignatureScanner(doctor.kb.cases)
    examples = [cleaned_lines(ex.log) for c in doctor.kb.cases for ex in c.examples]
    labels = [str(r.get("expected") or r.get("label") or r.get("id") or f"row-{n}") for n, r in enumerate(rows, 1)]
    threads = [str(r.get("source") or r.get("id") or n) for n, r in enumerate(rows)]
    drafts: list[Draft] = []
    clusters: dict[str, list[int]] = {}
    shapes: dict[int, str] = {}
    before = after = 0
    for i, row in enumerate(rows):
        prepared = matching.distilled(str(row["log"]))
        right_before = False
        if prepared is not None:
            verdict, matches = matcher.match(prepared[0], "hybrid", prepared[1])
            right_before = verdict == "match" and bool(matches) and matches[0].case_id == row.get("expected")
            confident = verdict == "match"
        else:
            confident = False
        before += int(right_before)
        if prepared is None:
            continue
        lines = prepared[0].cleaned or prepared[0].evidence
        hit = next((d for d in drafts if signature_fires(d.probe(), lines)), None)
        if hit is not None:
            after += int(labels[hit.logs[0]] == labels[i]) if not confident else int(right_before)
            continue
        after += int(right_before)
        if confident:
            continue
        root = _root_line(prepared[0], scanner)
        shape = generalise(root) if root else None
        if shape is None or _literal(shape) < MIN_DRAFT_LITERAL:
            continue
        shapes[i] = shape
        members = clusters.setdefault(shape, [])
        members.append(i)
        if len({threads[j] for j in members}) < min_pastes:
            continue
        probe = _probe_case(shape)
        member_lines = [(matching.distilled(str(rows[j]["log"])) or prepared)[0].cleaned for j in members]
        if not all(signature_fires(probe, ml) for ml in member_lines):
            continue
        if any(signature_fires(probe, h) for _, h in healthy) or any(signature_fires(probe, ex) for ex in examples):
            clusters[shape] = []  # a shape that fires on healthy start-ups or known cases never becomes a draft
            continue
        drafts.append(Draft(shape, suggest_title(prepared[0]), list(members)))
        del clusters[shape]
    fires: dict[int, list[int]] = {}
    false = 0
    for d_i, d in enumerate(drafts):
        probe = d.probe()
        fires[d_i] = [
            j for j, row in enumerate(rows)
            if (p := matching.distilled(str(row["log"]))) is not None and signature_fires(probe, p[0].cleaned)
        ]
        label = labels[d.logs[0]]
        false += int(any(labels[j] != label for j in fires[d_i]))
    return ReplayResult(drafts, labels, before, after, false, fires)


def run_replay(path: Path, doctor: Pipeline, as_json: bool) -> int:
    rows = load_labelled(path)
    matching = CachedMatching(doctor.kb, doctor.index, doctor.distil)
    cache = Path(".cache/ranker-matching.pkl")  # vllm-doctor train's distillations and searches, when present
    if cache.is_file():
        try:
            matching.restore(pickle.loads(cache.read_bytes()))
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
            pass
    result = replay(doctor, rows, matching=matching)
    if not as_json:
        for d in result.drafts:
            print(f"draft ({len(d.logs)} pastes): {d.title}\n  signature: {d.pattern}\n  logs: "
                  + ", ".join(str(rows[i].get("id") or i) for i in d.logs))
    print(json.dumps(result.as_dict()))
    return 0
