"""Distilled log → ranked KB matches with evidence and a verdict.

Three signals, strongest first:
1. signatures: exact regex fingerprints from the case files (elastic-recheck style) on the cleaned lines;
2. BM25 over the masked query (exact tokens: flags, error names, library names);
3. dense MiniLM cosine over the same query (paraphrases, reordered messages).
Retrieval scores are fused (weighted, or reciprocal-rank fusion: chosen by `vllm-doctor eval`), then
mapped to a 0..1 confidence. The verdict comes from calibrated thresholds (docs/matching.md): a confident
wrong answer is worse than "unknown", so "match" needs a signature hit or very strong agreement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal, Protocol

from bot.diagnosis.frames import FrameIndex, cut_frames
from bot.diagnosis.ranker import Candidate, PasteContext
from bot.diagnosis.versions import Versions, check_case, known_versions
from bot.models import Distilled, Evidence, LogFacts, LogLine, Match, Note, Verdict, WrappedLine
from indexer.text import mask
from kb.loader import KnowledgeBase
from kb.rules import FACTS, FactValue, Node, evaluate, fact_names
from kb.rules import explain as explain_rule
from kb.schema import Case, FactRule

Mode = Literal["hybrid", "bm25", "dense"]
Fusion = Literal["weighted", "rrf"]

TOP_K = 5
RRF_K = 60
# Calibrated on tests/eval/dev.jsonl with `vllm-doctor eval` (see docs/matching.md for the sweep). The
# defaults below are what the eval's coordinate search picks on all labelled logs ("params tuned on all
# logs" in its output; every held-back fold picked the same values from its own training folds except
# fold 0, which kept 0.70 here), so the shipped matcher is the one the held-back numbers measure.
DEFAULT_MATCH_THRESHOLD = 0.80
DEFAULT_UNCERTAIN_THRESHOLD = 0.40
# Dense cosine between a masked log and a case is ~0.15 for unrelated text and ~0.8 for a paraphrase.
DENSE_FLOOR, DENSE_CEIL = 0.25, 0.80
# A retrieval-only best case must beat the runner-up by this much to be a confident 'match'.
RETRIEVAL_MARGIN = 0.08
# An earlier unexplained error line must read this much like another case to mark a paste as two failures.
FIRST_FAILURE_MIN = 0.5
RELATED_SHARE = 0.6
# At most this many plain lines (no logger prefix) are searched on their own in a quiet paste.
PLAIN_TEXT_MAX = 4
# Candidates below this are not shown at all (ordinary chatter has nothing near it).
MIN_SCORE = 0.10
# Feedback prior ("Fixed it" / "Didn't help", bot/kb_growth/feedback.py): added to a case's score, clamped here
# so no caller can move a ranking by more than this (docs/kb-growth.md).
MAX_PRIOR = 0.03

_QUIET = ("info", "debug", "warning")
_EXCEPTION_TEXT = re.compile(r"(?:^|[^A-Za-z0-9_.])(?:[A-Za-z_]\w*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception): \S")
_FRAME_TEXT = re.compile(r'File "[^"]+", line \d+')
_TRACEBACK_HEADER = re.compile(r"Traceback \(most recent call last\)")
# a logger record with nothing after its "[file.py:123]" tag (the message went to the next lines)
_EMPTY_RECORD = re.compile(r"\[[\w.]+:\d+\]\s*$")
_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
_STOP = frozenset(
    "the and for with that this from are was not you your has have but use when num path hex uuid into "
    "its can will than then more most file line none true false self".split()
)


class SearchHit(Protocol):
    case_id: str
    dense: float
    bm25: float
    dense_rank: int | None
    bm25_rank: int | None


class SearchIndex(Protocol):
    def search(self, query: str, k: int = 10) -> Sequence[SearchHit]: ...


class Rescorer(Protocol):
    """The learned ranker (bot/diagnosis/ranker.py BoundRanker): a new score per candidate, None to keep the fixed one."""

    def rescore(
        self, cands: Sequence[Candidate], ctx: PasteContext, match: float, uncertain: float
    ) -> list[float | None]: ...


@dataclass(frozen=True)
class Thresholds:
    match: float = DEFAULT_MATCH_THRESHOLD
    uncertain: float = DEFAULT_UNCERTAIN_THRESHOLD

    def verdict(self, score: float) -> Verdict:
        if score >= self.match:
            return "match"
        if score >= self.uncertain:
            return "uncertain"
        return "unknown"


@dataclass(frozen=True)
class MatchParams:
    """Every tunable number of the matcher in one value, so `vllm-doctor eval` can tune it on one split of
    the labelled logs and report another (docs/matching.md). Defaults are the calibrated values."""

    match_threshold: float = DEFAULT_MATCH_THRESHOLD
    uncertain_threshold: float = DEFAULT_UNCERTAIN_THRESHOLD
    retrieval_margin: float = RETRIEVAL_MARGIN
    dense_weight: float = 0.5
    bm25_weight: float = 0.5
    signature_root: float = 0.80  # base score of a signature hit on a root-error line
    signature_other: float = 0.72  # ... on any other line
    signature_info: float = 0.70  # ... only on INFO/WARNING lines (weighs less than a root error)
    signature_symptom: float = 0.65  # ... of a symptom case (engine dead, worker died)
    retrieval_scale: float = 0.65  # retrieval-only score multiplier
    frame_weight: float = 0.65  # added for the frames a cut traceback shares with a case (bot/diagnosis/frames.py)
    fact_rule: float = 0.85  # score of a case whose fact rule the log proves (kb/rules.py)
    fixed_version_penalty: float = 0.15  # the log shows a version where the case is already fixed
    secondary_gap: float = 0.01  # how far a demoted symptom/advisory sits below the cause it yields to

    def thresholds(self) -> Thresholds:
        return Thresholds(self.match_threshold, self.uncertain_threshold)


@dataclass(frozen=True)
class Ranking:
    """What the matcher found: the ranked answer, advisories noticed on the side, notes for the reader (values;
    the presentation words them)."""

    verdict: Verdict
    matches: tuple[Match, ...]
    also_noticed: tuple[Match, ...] = ()
    notes: tuple[Note, ...] = ()


@dataclass
class _Entry:
    """A candidate while it is being ranked (mutable: demotion rules adjust its score)."""

    case: Case
    score: float
    strong: bool  # a cause's signature or a proven fact rule: ranked above everything else
    signature: bool
    unexplained: bool  # a root error its signatures do not hit (an advisory: or a cause fingerprint is present)
    parts: dict[str, float]
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class _PasteSignals:
    """What one paste offers every candidate (Matcher._read_paste): computed once, read by Matcher._entry."""

    sig_hits: dict[str, list[SignatureHit]]
    retrieval: dict[str, tuple[float, dict[str, float]]]  # the paste's search (plus its plain lines' own)
    plain: dict[str, float]  # the asker's plain lines searched on their own (empty when not run)
    frame_scores: dict[str, float]  # fingerprints among the frames of a cut traceback
    root_lines: frozenset[int]
    crash_lines: frozenset[int]  # root errors that are not INFO/WARNING lines
    crashed: frozenset[int]  # what an advisory cannot explain (0: a traceback was printed)
    proven: dict[str, list[tuple[FactRule, str]]]
    known: Versions
    cause_evident: bool
    plain_other: float
    best_other: float


def facts_mapping(facts: LogFacts | None) -> dict[str, FactValue | None]:
    """LogFacts → the names a rule may use (kb.rules.FACTS)."""
    if facts is None:
        return {}
    values: dict[str, FactValue | None] = {f.name: getattr(facts, f.name) for f in fields(facts) if f.name in FACTS}
    return values


def _earlier_root(distilled: Distilled, hits: list[SignatureHit]) -> LogLine | None:
    """The first root error before a symptom's own line: the cause the symptom points to."""
    hit_lines = {h.line.line_no for h in hits}
    first_hit = min(hit_lines, default=distilled.total_lines + 1)
    for root in distilled.root_errors:
        if root.line_no >= first_hit:
            break
        if (root.line_no not in hit_lines and root.level not in _QUIET and root.kind != "frame"
                and not _FRAME_TEXT.search(root.text) and not _EMPTY_RECORD.search(root.text)):
            return root
    return None


@dataclass(frozen=True)
class SignatureHit:
    line: LogLine
    pattern: str


def _scoped_flags(pattern: str) -> str:
    """'(?i)foo' → '(?i:foo)' so patterns with global flags can sit inside one alternation."""
    m = re.match(r"^\(\?([aiLmsux]+)\)", pattern)
    return f"(?{m.group(1)}:{pattern[m.end():]})" if m else pattern


class SignatureScanner:
    """All case signatures; one combined regex pre-filters lines so most lines cost a single search."""

    def __init__(self, cases: Iterable[Case]):
        self._patterns: list[tuple[str, str, re.Pattern[str]]] = []
        for case in cases:
            for pattern in case.signatures:
                self._patterns.append((case.id, pattern, re.compile(pattern)))
        try:
            combined = "|".join(f"(?:{_scoped_flags(p)})" for _, p, _ in self._patterns)
            self._prefilter: re.Pattern[str] | None = re.compile(combined) if combined else None
        except re.error:
            self._prefilter = None

    def scan(self, lines: Iterable[LogLine]) -> dict[str, list[SignatureHit]]:
        hits: dict[str, list[SignatureHit]] = {}
        for line in lines:
            if self._prefilter is not None and not self._prefilter.search(line.text):
                continue
            for case_id, pattern, compiled in self._patterns:
                if compiled.search(line.text):
                    bucket = hits.setdefault(case_id, [])
                    if len(bucket) < 5 and all(h.line.line_no != line.line_no for h in bucket):
                        bucket.append(SignatureHit(line, pattern))
        return hits

    def scan_wrapped(self, wrapped: Iterable[WrappedLine], hits: dict[str, list[SignatureHit]]) -> None:
        """Add the hits of signatures that match a soft-wrapped message only across its wrap."""
        for w in wrapped:
            if self._prefilter is not None and not self._prefilter.search(w.line.text):
                continue
            for case_id, pattern, compiled in self._patterns:
                m = compiled.search(w.line.text)
                if m is None or not m.start() < w.head_len < m.end():
                    continue
                bucket = hits.setdefault(case_id, [])
                if len(bucket) < 5 and all(h.line.line_no != w.line.line_no for h in bucket):
                    bucket.append(SignatureHit(w.line, pattern))


_META = re.compile(r"\\[dDsSwWbBAZ]|\\.|[\^$.*+?()\[\]{}|]")


def signature_literals(cases: Iterable[Case]) -> list[str]:
    """The longest literal run of each signature (e.g. 'tool choice requires --enable-auto-tool-choice')."""
    out = []
    for case in cases:
        for pattern in case.signatures:
            body = re.sub(r"^\(\?[aiLmsux]+\)", "", pattern)
            body = re.sub(r"\[[^\]]*\]|\(\?[:=!<][^)]*", " ", body)  # character classes, group prefixes
            runs = [r.strip(" :;,'\"") for r in _META.split(body)]
            best = max(runs, key=len, default="")
            if len(best) >= 5:
                out.append(best)
    return out


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


class Matcher:
    def __init__(
        self,
        kb: KnowledgeBase,
        index: SearchIndex,
        thresholds: Thresholds | None = None,
        fusion: Fusion = "weighted",
        priors: Mapping[str, float] | None = None,
        params: MatchParams | None = None,
        ranker: Rescorer | None = None,
    ):
        """priors: optional case id → small score adjustment from user feedback (clamped to ±MAX_PRIOR).

        thresholds, when given, override the ones in params (settings overrides). ranker: the learned ranker
        (VLLM_DOCTOR_RANKER=learned, bot/diagnosis/ranker.py); None: the fixed fusion."""
        self.params = params or MatchParams()
        self.ranker = ranker
        self.kb = kb
        self.priors = priors
        self.cases = kb.by_id()
        self.index = index
        self.thresholds = thresholds or self.params.thresholds()
        self.fusion: Fusion = fusion
        self.scanner = SignatureScanner(kb.cases)
        self._rules: dict[str, list[tuple[FactRule, Node]]] = {
            c.id: [(r, r.ast()) for r in c.rules] for c in kb.cases if c.rules
        }
        self.frames = FrameIndex(kb.cases)
        self._case_words = {c.id: _words(c.search_text() + " " + " ".join(e.log for e in c.examples)) for c in kb.cases}

    # -- scoring -----------------------------------------------------------------------------------
    def _retrieval_scores(self, query: str, mode: Mode) -> dict[str, tuple[float, dict[str, float]]]:
        if not query.strip():
            return {}
        hits = list(self.index.search(query, k=20))
        if not hits:
            return {}
        top_bm25 = max((h.bm25 for h in hits), default=0.0) or 1.0
        out: dict[str, tuple[float, dict[str, float]]] = {}
        for h in hits:
            dense = max(0.0, min(1.0, (h.dense - DENSE_FLOOR) / (DENSE_CEIL - DENSE_FLOOR)))
            bm25 = max(0.0, h.bm25 / top_bm25) if h.bm25 > 0 else 0.0
            # A lexical score is only meaningful when the query shares rare words with the case.
            if mode == "dense":
                score = dense
            elif mode == "bm25":
                score = bm25 * min(1.0, h.bm25 / 8.0)
            elif self.fusion == "rrf":
                rrf = sum(1.0 / (RRF_K + r) for r in (h.dense_rank, h.bm25_rank) if r is not None)
                score = rrf / (2.0 / (RRF_K + 1)) * dense ** 0.5
            else:
                p = self.params
                score = p.dense_weight * dense + p.bm25_weight * bm25 * min(1.0, h.bm25 / 8.0)
            out[h.case_id] = (
                score,
                {"dense": round(h.dense, 4), "bm25": round(h.bm25, 4), "retrieval": round(score, 4)},
            )
        return out

    def match(
        self, distilled: Distilled, mode: Mode = "hybrid", facts: LogFacts | None = None
    ) -> tuple[Verdict, tuple[Match, ...]]:
        ranking = self.rank(distilled, mode, facts)
        return ranking.verdict, ranking.matches

    def rank(
        self, distilled: Distilled, mode: Mode = "hybrid", facts: LogFacts | None = None,
        versions: Versions | None = None,
    ) -> Ranking:
        """Ranked cases, the advisories noticed on the side, and notes (truncated paste, versions).

        versions: package → version known for this paste (bot.diagnosis.versions.known_versions: the log's, then a
        host diagnosed in the same Slack thread); default: the versions in `facts`."""
        s = self._read_paste(distilled, mode, facts, versions)
        entries = [
            self._entry(case, s, distilled)
            # sorted: equal scores then rank the same in every process (a set's order follows the hash seed)
            for case_id in sorted(set(s.sig_hits) | set(s.retrieval) | set(s.proven) | set(s.frame_scores))
            if (case := self.cases.get(case_id)) is not None
        ]
        # An advisory whose signature fired on a paste that crashed for another reason is noticed, not an answer.
        noticed = [e for e in entries if e.case.role == "advisory" and e.signature and e.unexplained and not e.strong]
        entries = [e for e in entries if e not in noticed]
        self._demote_secondary(entries, s)
        earliest = self._earliest_cause(entries, s.sig_hits)
        if self.ranker is not None and entries:
            self._apply_ranker(self.ranker, entries, s, distilled, earliest)
        # Two failures in one paste: the earliest root error is the answer (what came after may be its
        # consequence, or a second problem); score decides among the rest.
        entries.sort(key=lambda e: (e.strong, e.case.id == earliest, e.score), reverse=True)
        entries = [e for e in entries if e.score >= MIN_SCORE]  # near-zero candidates are noise

        first_failure = (
            self._unexplained_first_failure(entries, s.sig_hits, distilled, s.proven) if mode == "hybrid" else None
        )
        matches = [self._to_match(e, s.sig_hits, distilled, facts, s.proven) for e in entries[:TOP_K]]
        ranking_notes = self._cap_top(matches, s, distilled, first_failure)
        verdict = self.thresholds.verdict(matches[0].score) if matches else "unknown"
        also = tuple(
            self._to_match(e, s.sig_hits, distilled, facts, s.proven)
            for e in sorted(noticed, key=lambda e: -e.score)[:3]
        )
        return Ranking(verdict, tuple(matches), also, tuple(ranking_notes))

    def _read_paste(
        self, distilled: Distilled, mode: Mode, facts: LogFacts | None, versions: Versions | None
    ) -> _PasteSignals:
        """Everything the per-case scoring needs, computed once per paste."""
        sig_hits = self.scanner.scan(distilled.cleaned or distilled.evidence) if mode == "hybrid" else {}
        if mode == "hybrid":
            self.scanner.scan_wrapped(distilled.wrapped, sig_hits)
        retrieval = self._retrieval_scores(distilled.query, mode)
        plain = self._add_plain_text_scores(retrieval, distilled, mode)
        # A traceback cut before its exception line: its innermost frames say where it failed.
        cut = cut_frames(distilled) if mode == "hybrid" else []
        # Root errors in the strict sense: warnings that merely mention "error" explain no crash.
        crash_lines = frozenset(r.line_no for r in distilled.root_errors if r.level not in _QUIET)
        # What an advisory cannot explain: those, any exception named mid-line ("…报错ValueError: …"), and a
        # traceback the paste was cut inside.
        crashed = set(crash_lines) | {
            ln.line_no
            for ln in (distilled.cleaned or distilled.evidence)
            if ln.level not in ("info", "debug") and _EXCEPTION_TEXT.search(ln.text)
        }
        if distilled.truncated or any(c.kind == "frame" for c in distilled.cleaned):
            crashed.add(0)  # a traceback was printed (even one cut before its exception line): something crashed
        proven = self._proven_rules(facts_mapping(facts)) if mode == "hybrid" else {}

        def not_advisory(case_id: str) -> bool:
            return case_id in self.cases and self.cases[case_id].role != "advisory"

        return _PasteSignals(
            sig_hits=sig_hits,
            retrieval=retrieval,
            plain=plain,
            frame_scores=self.frames.scores(cut),
            root_lines=frozenset(r.line_no for r in distilled.root_errors),
            crash_lines=crash_lines,
            crashed=frozenset(crashed),
            proven=proven,
            known=known_versions(facts) if versions is None else versions,
            # A cause whose fingerprint (or fact rule) is in the paste explains it: advisories yield to it.
            cause_evident=any(
                case_id in self.cases and self.cases[case_id].role == "cause" for case_id in (*sig_hits, *proven)
            ),
            # the asker's own lines (a title among start-up output) read like another case
            plain_other=max((r for cid, r in plain.items() if not_advisory(cid)), default=0.0),
            best_other=max((r for cid, (r, _) in retrieval.items() if not_advisory(cid)), default=0.0),
        )

    def _entry(self, case: Case, s: _PasteSignals, distilled: Distilled) -> _Entry:
        """One candidate's score: its strongest signal (signature by line kind, proven rule, retrieval, cut
        frames), then version and feedback adjustments."""
        p = self.params
        case_id = case.id
        r, parts = s.retrieval.get(case_id, (0.0, {}))
        parts = dict(parts)
        hits = s.sig_hits.get(case_id, [])
        hit_lines = {h.line.line_no for h in hits}
        quiet_hits = all(h.line.level in _QUIET for h in hits)
        unexplained = bool(s.crash_lines - hit_lines) or (
            case.role == "advisory"
            and (
                s.cause_evident
                or bool(s.crashed - hit_lines)
                # A hint on a start-up INFO/WARNING line, in a paste whose text reads more like another case:
                # ordinary start-up output, not what the paste is about.
                or (quiet_hits and (s.best_other > r or s.plain_other > s.plain.get(case_id, 0.0)))
            )
        )
        if hits:
            if case.role == "symptom":
                base = p.signature_symptom
            elif any(h.line.line_no in s.root_lines and h.line.level != "warning" for h in hits):
                base = p.signature_root
            elif quiet_hits:
                base = p.signature_info
            else:
                base = p.signature_other
            score = base + 0.2 * r
            parts["signature"] = 1.0
        else:
            score = p.retrieval_scale * r
        if case_id in s.frame_scores and not hits:
            score += p.frame_weight * s.frame_scores[case_id]
            parts["frames"] = round(s.frame_scores[case_id], 4)
        if case_id in s.proven:
            score = max(score, p.fact_rule + 0.1 * r)
            parts["fact_rule"] = 1.0
        # A signature (or proven rule) of a cause is the strongest evidence; an advisory counts as one only
        # when nothing else in the paste crashed.
        # A hint printed at start-up (INFO/WARNING) by every such deployment proves the setting, not that the
        # paste is about it: on its own it is never a confident answer.
        # (A paste of nothing but such lines is about them: then the hint is the answer.)
        startup_hint = (
            case.role == "advisory" and bool(hits) and case_id not in s.proven
            and quiet_hits and not distilled.quiet_only
        )
        strong = bool(hits or case_id in s.proven) and not startup_hint and (
            case.role == "cause" or (case.role == "advisory" and (not unexplained or case_id in s.proven))
        )
        if startup_hint:
            score = min(score, self.thresholds.match - 0.01)
        notes: list[Note] = []
        version = check_case(case.affects, case.fixed_in, s.known)  # bot/diagnosis/versions.py
        if version.note:
            notes.append(version.note)
        if version.superseded:
            score = max(0.0, score - p.fixed_version_penalty)
            parts["fixed_version"] = -p.fixed_version_penalty
        prior = self._prior(case_id)
        if prior:
            score = max(0.0, score + prior)
            parts["prior"] = round(prior, 4)
        parts["score"] = round(score, 4)
        return _Entry(case, score, strong, bool(hits), unexplained, parts, notes)

    def _apply_ranker(
        self, ranker: Rescorer, entries: list[_Entry], s: _PasteSignals, distilled: Distilled, earliest: str | None
    ) -> None:
        """The learned ranker's score replaces the fused one (in place) where it knows the case; the order of
        strong evidence and the role demotions stay the matcher's."""
        total = max(distilled.total_lines, 1)
        cands = []
        for e in entries:
            hits = s.sig_hits.get(e.case.id, [])
            cands.append(Candidate(
                case_id=e.case.id, role=e.case.role, score=e.score, strong=e.strong, signature=e.signature,
                sig_root=any(h.line.line_no in s.root_lines and h.line.level not in _QUIET for h in hits),
                sig_quiet=bool(hits) and all(h.line.level in _QUIET for h in hits),
                unexplained=e.unexplained, earliest=e.case.id == earliest,
                dense=float(e.parts.get("dense", 0.0)), bm25=float(e.parts.get("bm25", 0.0)),
                retrieval=float(e.parts.get("retrieval", 0.0)), frames=float(e.parts.get("frames", 0.0)),
                fact_rule="fact_rule" in e.parts, version_penalty="fixed_version" in e.parts,
                first_hit=min((h.line.line_no for h in hits), default=total) / total,
                plain_text="plain_text" in e.parts,
            ))
        ctx = PasteContext(distilled.total_lines, distilled.truncated, len(distilled.root_errors), distilled.quiet_only)
        new = ranker.rescore(cands, ctx, self.thresholds.match, self.thresholds.uncertain)
        for e, c, score in zip(entries, cands, new, strict=True):
            if score is None or e.score < MIN_SCORE:  # unknown to the model, or noise the fixed ranking drops
                continue
            if c.role == "advisory" and c.sig_quiet and not c.fact_rule and not distilled.quiet_only:
                score = min(score, self.thresholds.match - 0.01)  # a start-up hint is never a confident answer
            e.parts["fixed_score"] = round(e.score, 4)
            e.score = max(0.0, score + self._prior(e.case.id))
            e.parts["score"] = round(e.score, 6)
        self._demote_secondary(entries, s)

    def _cap_top(
        self, matches: list[Match], s: _PasteSignals, distilled: Distilled, first_failure: LogLine | None
    ) -> list[Note]:
        """Keep the top answer below `match` where its evidence cannot carry one (in place); the notes that
        say why."""
        if not matches:
            return []
        below_match = round(self.thresholds.match - 0.01, 3)

        def cap() -> None:
            matches[0] = replace(matches[0], score=min(matches[0].score, below_match))

        notes: list[Note] = []
        if first_failure is not None:  # two failures: the later one's fingerprint is no confident answer
            cap()
            notes.append(Note("two_failures", line=first_failure.line_no, case_id=matches[0].case_id))
        top = matches[0]
        top_case = self.cases.get(top.case_id)
        if top_case is not None and top_case.role == "symptom" and _earlier_root(distilled, s.sig_hits.get(top.case_id, [])):
            # The engine died of an error the paste shows and no cause explains: the consequence is certain, the
            # diagnosis is not (its note points at that line).
            cap()
        # Retrieval alone is only trusted when it clearly separates the best case from the next one; two close
        # candidates mean "uncertain", never a confident answer.
        if (len(matches) >= 2 and not top.signature_hit and "fact_rule" not in top.scores
                and top.score - matches[1].score < self.params.retrieval_margin):
            cap()
        if not distilled.truncated and "frames" in top.scores and "fact_rule" not in top.scores:
            cap()  # frames of a traceback whose exception line is missing are a guess, however rare their names
        if distilled.truncated:
            # A fingerprint on a message line (not a frame of the cut traceback) still stands on its own.
            complete = "fact_rule" in top.scores or any(
                h.line.kind != "frame" and not _FRAME_TEXT.search(h.line.text) for h in s.sig_hits.get(top.case_id, [])
            )
            # complete: the answer rests on an error line or a proven fact elsewhere in the paste, not on the cut frames
            notes.append(Note("truncated_answered" if complete else "truncated"))
            if not complete:  # frames alone never make a confident answer
                cap()
        return notes

    def _add_plain_text_scores(
        self, retrieval: dict[str, tuple[float, dict[str, float]]], distilled: Distilled, mode: Mode
    ) -> dict[str, float]:
        """A paste with no error line, whose few lines without a logger prefix (a title, the asker's words) sit
        among many logger lines: those lines are searched on their own as well, and each case keeps its better
        score, so hundreds of start-up lines cannot drown what the asker wrote. Returns the scores of that
        search alone (empty when it did not run)."""
        if any(r.level not in _QUIET for r in distilled.root_errors):
            return {}
        plain = [e for e in distilled.evidence if e.level == "" and e.kind == "context" and not _FRAME_TEXT.search(e.text)]
        if not plain or len(plain) > PLAIN_TEXT_MAX or len(plain) == len(distilled.evidence):
            return {}
        query = "\n".join(mask(e.text) for e in plain)
        alone = self._retrieval_scores(query, mode)
        for case_id, (score, parts) in alone.items():
            if score > retrieval.get(case_id, (0.0, {}))[0]:
                retrieval[case_id] = (score, {**parts, "plain_text": 1.0})
        return {case_id: score for case_id, (score, _) in alone.items()}

    @staticmethod
    def _earliest_cause(entries: list[_Entry], sig_hits: dict[str, list[SignatureHit]]) -> str | None:
        """The strong cause whose fingerprint sits on the earliest error line (not an INFO/WARNING line, not a
        traceback frame: a frame says where a failure passed, its exception line says what failed, so a
        frame's fingerprint must not outrank the exception line of its own traceback)."""
        first: dict[str, int] = {}
        for e in entries:
            if e.strong and e.case.role == "cause":
                lines = [h.line.line_no for h in sig_hits.get(e.case.id, [])
                         if h.line.level not in _QUIET and h.line.kind != "frame" and not _FRAME_TEXT.search(h.line.text)]
                if lines:
                    first[e.case.id] = min(lines)
        if len(first) < 2:
            return None
        return min(first, key=lambda c: (first[c], c))

    def _unexplained_first_failure(
        self,
        entries: list[_Entry],
        sig_hits: dict[str, list[SignatureHit]],
        distilled: Distilled,
        proven: dict[str, list[tuple[FactRule, str]]],
    ) -> LogLine | None:
        """The exception line of an earlier traceback that no signature explains and that, searched on its own,
        does not read like the top case (not in its top results): the paste holds two failures and the
        top answer explains only the later one. One extra search, only for pastes with such a line."""
        if not entries or not entries[0].signature or entries[0].case.id in proven:
            return None
        top = entries[0].case.id
        # A symptom's line explains nothing: the engine that died before the top case's error is a failure of
        # its own (it is searched below like any other earlier line).
        hit_lines = {
            h.line.line_no for case_id, hits in sig_hits.items()
            if case_id not in self.cases or self.cases[case_id].role != "symptom" for h in hits
        }
        first_hit = min(h.line.line_no for h in sig_hits.get(top, []))
        # A logger's error record right above "Traceback (most recent call last):" ("Initializing service
        # error") introduces that traceback: the same failure, not an earlier one.
        headers = {c.line_no for c in distilled.cleaned if _TRACEBACK_HEADER.match(c.text.strip())}
        earlier = next(
            (r for r in distilled.root_errors
             if r.line_no < first_hit and r.line_no not in hit_lines and r.level not in _QUIET
             and r.kind != "frame" and not _FRAME_TEXT.search(r.text) and r.line_no + 1 not in headers
             ),
            None,
        )
        if earlier is None:
            return None
        # Searched on its own, the earlier line must read like one other problem: clearly (a fused score that
        # alone would be an 'uncertain' answer), of another area than the top case (an NCCL wrapper error above
        # its NCCL cause, an OutOfMemoryError header above the OOM it names are one failure), and not nearly
        # as much like the top case itself.
        scored = sorted(self._retrieval_scores(mask(earlier.text), "hybrid").items(), key=lambda kv: -kv[1][0])
        if not scored or scored[0][1][0] < FIRST_FAILURE_MIN:
            return None
        best = self.cases.get(scored[0][0])
        if best is None or best.id == top or best.area == entries[0].case.area:
            return None
        if dict(scored).get(top, (0.0, {}))[0] >= RELATED_SHARE * scored[0][1][0]:
            return None  # it reads like the top case nearly as much: one failure told twice
        return earlier

    def _demote_secondary(self, entries: list[_Entry], s: _PasteSignals) -> None:
        """A symptom never outranks a cause with evidence; an advisory never tops a paste that crashed."""
        p = self.params
        # When symptom fingerprints account for every error line, a cause that merely reads alike is no evidence
        # (a paste of "failed to be inspected" alone is answered by the symptom: the real error is not in it).
        symptom_lines = {
            h.line.line_no for e in entries if e.case.role == "symptom" for h in s.sig_hits.get(e.case.id, [])
        }
        all_symptom = bool(s.crash_lines) and s.crash_lines <= symptom_lines
        evidenced = [
            e.score for e in entries
            if e.case.role == "cause" and (e.strong or (e.score >= p.uncertain_threshold and not all_symptom))
        ]
        non_advisory = [e.score for e in entries if e.case.role != "advisory"]
        for e in entries:
            if e.case.role == "symptom" and evidenced:
                e.score = max(0.0, min(e.score, max(evidenced) - p.secondary_gap))
                e.parts["score"] = round(e.score, 4)
            elif e.case.role == "advisory" and e.unexplained and not e.strong:
                cap = self.thresholds.match - 0.01
                if non_advisory:
                    cap = min(cap, max(non_advisory) - p.secondary_gap)
                e.score = max(0.0, min(e.score, cap))
                e.parts["score"] = round(e.score, 4)

    def _proven_rules(self, facts: Mapping[str, FactValue | None]) -> dict[str, list[tuple[FactRule, str]]]:
        if not any(v is not None for v in facts.values()):
            return {}
        out: dict[str, list[tuple[FactRule, str]]] = {}
        for case_id, rules in self._rules.items():
            for rule, ast in rules:
                if evaluate(ast, facts):
                    out.setdefault(case_id, []).append((rule, explain_rule(ast, facts)))
        return out

    def _to_match(
        self,
        e: _Entry,
        sig_hits: dict[str, list[SignatureHit]],
        distilled: Distilled,
        facts: LogFacts | None,
        proven: dict[str, list[tuple[FactRule, str]]],
    ) -> Match:
        case = e.case
        evidence = self._evidence(case.id, sig_hits.get(case.id, []), distilled)
        if "frames" in e.parts:  # ranked on the frames of a cut traceback: show them first
            shown = tuple(
                Evidence(frame.line_no, frame.text, "frame: " + ", ".join(names), "frame")
                for frame, names in self.frames.evidence(cut_frames(distilled), case.id)[:2]
            )
            evidence = shown + tuple(ev for ev in evidence if ev.line_no not in {s.line_no for s in shown})
        notes = list(e.notes)
        if case.id in proven:
            evidence = self._rule_evidence(case, proven[case.id], facts) + evidence
        if case.role == "symptom":
            earlier = _earlier_root(distilled, sig_hits.get(case.id, []))
            if earlier is not None:
                evidence = (Evidence(earlier.line_no, earlier.text, "earlier root error: diagnose this line", "earlier_root"),) + evidence
                notes.append(Note("consequence", line=earlier.line_no))
            else:
                notes.append(Note("consequence_unseen"))
        return Match(
            case_id=case.id,
            title=case.title,
            title_zh=case.title_zh,
            area=case.area,
            score=round(min(e.score, 1.0), 3),
            signature_hit=e.signature,
            evidence=evidence[:4],
            scores=e.parts,
            notes=tuple(notes),
        )

    def _rule_evidence(
        self, case: Case, proven: list[tuple[FactRule, str]], facts: LogFacts | None
    ) -> tuple[Evidence, ...]:
        sources = facts.sources if facts is not None else {}
        quotes = facts.quotes if facts is not None else {}
        out: list[Evidence] = []
        for rule, arithmetic in proven[:1]:
            names = sorted(fact_names(rule.ast()), key=lambda n: sources.get(n, 0))
            lines = sorted({sources[n] for n in names if n in sources})
            first = lines[0] if lines else 0
            position = next((i for i, r in enumerate(case.rules or ()) if r is rule), None)
            out.append(Evidence(first, arithmetic, f"fact rule: {rule.says}", "fact_rule", rule=position))
            for line_no in lines[:2]:
                used = ", ".join(n for n in names if sources.get(n) == line_no)
                out.append(Evidence(line_no, quotes.get(line_no, ""), f"fact: {used}", "fact"))
        return tuple(out)

    def _prior(self, case_id: str) -> float:
        if not self.priors:
            return 0.0
        return max(-MAX_PRIOR, min(MAX_PRIOR, float(self.priors.get(case_id, 0.0))))

    def _evidence(self, case_id: str, hits: list[SignatureHit], distilled: Distilled) -> tuple[Evidence, ...]:
        if hits:
            return tuple(Evidence(h.line.line_no, h.line.text, f"signature: {h.pattern}", "signature") for h in hits[:3])
        words = self._case_words[case_id]
        ranked = []
        for line in distilled.root_errors or distilled.evidence:
            overlap = _words(mask(line.text)) & words  # masked: path fragments are not evidence
            if overlap:
                ranked.append((len(overlap), line, sorted(overlap)[:6]))
        ranked.sort(key=lambda t: -t[0])
        return tuple(
            Evidence(line.line_no, line.text, "shared terms: " + ", ".join(terms), "shared_terms") for _, line, terms in ranked[:3]
        )
