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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.diagnosis.match import Matcher, MatchParams, SearchHit, SearchIndex, SignatureScanner
from bot.diagnosis.root import read_root
from bot.evaluation.eval_tuning import CachedMatching
from bot.evaluation.evaluate import load_labelled
from bot.kb_growth.clusters import (
    DEFAULT_SIMILARITY,
    MIN_DRAFT_LITERAL,
    MIN_PASTES,
    ClusterDraft,
    Clusters,
    Embed,
    Unknown,
    cluster_root,
    draft_of,
    literal_chars,
    shape_of,
)
from bot.kb_growth.lint import cleaned_lines, healthy_logs, signature_fires
from bot.kb_growth.suggest import _probe_case
from bot.models import Distilled
from bot.pipeline import Pipeline
from kb.loader import KnowledgeBase
from kb.schema import Case

__all__ = ["MIN_DRAFT_LITERAL", "MIN_PASTES", "Draft", "ReplayResult", "replay", "run_replay"]


@dataclass
class Draft:
    pattern: str
    title: str
    logs: list[int] = field(default_factory=list)  # indices of the logs it was drafted from

    def probe(self) -> Case:
        return _probe_case(self.pattern)

    @classmethod
    def of(cls, drafted: ClusterDraft) -> Draft:
        return cls(drafted.signature, drafted.title, [int(u.key) for u in drafted.members])


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


class _Without:
    """The search index with some cases' hits left out (leave-cases-out: the KB as if they were never written)."""

    def __init__(self, index: SearchIndex, held: frozenset[str]):
        self._index = index
        self._held = held

    def search(self, query: str, k: int = 10) -> Sequence[SearchHit]:
        return [h for h in self._index.search(query, k + len(self._held)) if h.case_id not in self._held][:k]


def without_cases(kb: KnowledgeBase, held: frozenset[str]) -> KnowledgeBase:
    return KnowledgeBase(tuple(c for c in kb.cases if c.id not in held), f"{kb.content_hash}-without-{len(held)}",
                         {k: v for k, v in kb.case_hashes.items() if k not in held}, kb.errors)


def _root_line(distilled: Distilled, scanner: SignatureScanner) -> str | None:
    """The paste's root line as the loop clusters it (bot/kb_growth/clusters.cluster_root, no root.py line)."""
    return cluster_root(distilled, scanner)


def _literal(pattern: str) -> int:
    return literal_chars(pattern)


def replay(doctor: Pipeline, rows: Sequence[dict[str, Any]], min_pastes: int = MIN_PASTES,
           healthy_dir: Path | None = None, matching: CachedMatching | None = None,
           embed: Embed | None = None, similarity: float = DEFAULT_SIMILARITY,
           hold_out: frozenset[str] = frozenset()) -> ReplayResult:
    """Stream `rows` through the loop (bot/kb_growth/clusters.py, as the product does) with a reviewer who
    accepts every draft. `embed`: root-line embeddings for merging near shapes (None: shapes only). `hold_out`:
    case ids removed from the KB for the replay (their logs are then failures the KB does not know)."""
    matching = matching or CachedMatching(doctor.kb, doctor.index, doctor.distil)
    kb = without_cases(doctor.kb, hold_out) if hold_out else doctor.kb
    index: SearchIndex = _Without(matching.index, hold_out) if hold_out else matching.index
    matcher = Matcher(kb, index, params=MatchParams(), ranker=None if hold_out else doctor.matcher.ranker)
    healthy = healthy_logs(healthy_dir)
    scanner = SignatureScanner(kb.cases)
    examples = [cleaned_lines(ex.log) for c in kb.cases for ex in c.examples]
    labels = [str(r.get("expected") or r.get("label") or r.get("id") or f"row-{n}") for n, r in enumerate(rows, 1)]
    threads = [str(r.get("source") or r.get("id") or n) for n, r in enumerate(rows)]
    clusters = Clusters(embed, similarity)
    drafts: list[Draft] = []
    before = after = 0
    for i, row in enumerate(rows):
        prepared = matching.distilled(str(row["log"]))
        right_before = False
        confident = False
        matches: Sequence[Any] = ()
        verdict = "unknown"
        if prepared is not None:
            verdict, matches = matcher.match(prepared[0], "hybrid", prepared[1])
            right_before = verdict == "match" and bool(matches) and matches[0].case_id == row.get("expected")
            confident = verdict == "match"
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
        reading = read_root(prepared[0], prepared[1], verdict, matches)  # type: ignore[arg-type]
        root = cluster_root(prepared[0], scanner, reading.root.text if reading.root else None)
        shape = shape_of(root)
        if root is None or shape is None:
            continue
        component = reading.root.component if reading.root else "other"
        cluster = clusters.add(Unknown(i, root, shape, threads[i], tuple(lines), threads[i], component))
        drafted = draft_of(cluster, min_pastes=min_pastes, healthy=healthy, examples=examples)
        if drafted is not None:
            drafts.append(Draft.of(drafted))
            clusters.remove(cluster)
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


def run_replay(path: Path, doctor: Pipeline, as_json: bool, hold_out_cases: bool = False) -> int:
    """`hold_out_cases`: leave-cases-out, every case some row expects is removed from the KB for the replay."""
    rows = load_labelled(path)
    held = frozenset(str(r["expected"]) for r in rows if r.get("expected")) if hold_out_cases else frozenset()
    matching = CachedMatching(doctor.kb, doctor.index, doctor.distil)
    cache = Path(".cache/ranker-matching.pkl")  # vllm-doctor train's distillations and searches, when present
    if cache.is_file():
        try:
            matching.restore(pickle.loads(cache.read_bytes()))
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
            pass
    settings = doctor.settings
    result = replay(doctor, rows, matching=matching, min_pastes=int(settings.kb_draft_min_pastes),
                    embed=doctor.index.encoder().encode, similarity=float(settings.kb_draft_similarity),
                    healthy_dir=settings.kb_healthy_logs_dir, hold_out=held)
    if not as_json:
        for d in result.drafts:
            print(f"draft ({len(d.logs)} pastes): {d.title}\n  signature: {d.pattern}\n  logs: "
                  + ", ".join(str(rows[i].get("id") or i) for i in d.logs))
    figures = result.as_dict()
    if held:
        figures["held_out_cases"] = len(held)
    print(json.dumps(figures))
    return 0
