"""KBGrowth: the one object the Slack listeners and `vllm-doctor kb …` use to grow the KB.

    draft_from_log   a Slack message (and its thread) → pre-filled form + a draft submission
    check            form/Case → validated Case (schema + KB rules) and the nearest existing cases
    stage / submit   the author's choice: a new case, or this log as an example of case X → pending
    approve / reject reviewers only (settings: user ids and/or a user group); one decision per submission
    add_case         direct write (CLI), same checks
    vote / note_answer / outcome_text / stats      feedback and candidates for new cases

Going live: a case file is written atomically under a lock (writer.py), then the running pipeline reloads
(Pipeline.reload_if_changed: changed files are re-read and only their documents re-embedded). If the
process dies between the two, the next start finds the index manifest's KB hash differs from the files
and re-embeds just the new case (indexer/index.py), so nothing is lost.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.diagnosis.distill import distill
from bot.diagnosis.match import SignatureScanner
from bot.diagnosis.paste import Paste, redacted
from bot.errors import InvalidCase, PermissionDenied, ReviewConflict, UserInputError
from bot.kb_growth.candidates import CandidateStore
from bot.kb_growth.caseyaml import normalised
from bot.kb_growth.clusters import ClusterDraft, Clusters, Unknown, cluster_root, draft_of, shape_of
from bot.kb_growth.db import Database
from bot.kb_growth.duplicates import Similar, likely_duplicates, nearest_cases
from bot.kb_growth.feedback import FeedbackStore, Vote, VoteResult
from bot.kb_growth.form import EXAMPLE_SEPARATOR, CaseForm, case_to_form, form_to_case
from bot.kb_growth.gitcommit import CommitResult, author_string, commit_file
from bot.kb_growth.lint import LintReport, cleaned_lines, healthy_logs, lint_case, signature_fires
from bot.kb_growth.regex_safety import unsafe_signature
from bot.kb_growth.submissions import Submission, SubmissionStore
from bot.kb_growth.suggest import (
    SignatureSuggestion,
    example_text,
    suggest_area,
    suggest_id,
    suggest_signatures,
    suggest_title,
)
from bot.kb_growth.sync import publish
from bot.kb_growth.writer import CaseWriter, Written
from bot.storage import StorageError
from kb.loader import DEFAULT_CASES_DIR, load_case_file
from kb.schema import AREAS, Case, Example

log = logging.getLogger(__name__)

MAX_SOURCE_TEXT = 64 * 1024
LOOP_AUTHOR = "vllm-doctor"  # author of the cases the team-learning loop drafts
GROUP_CACHE_S = 60.0


@functools.lru_cache(maxsize=4096)
def _distilled(text: str) -> Any:
    """A stored candidate's distillation (the loop re-reads every open candidate after each unknown answer)."""
    return distill(text)


class ReviewerPolicy:
    """Who may approve or reject: listed user ids, plus members of a user group (looked up through
    `group_members(group_id)`, cached for a minute)."""

    def __init__(
        self,
        user_ids: Collection[str] = (),
        group_id: str | None = None,
        group_members: Callable[[str], Collection[str]] | None = None,
    ):
        self.user_ids = frozenset(u for u in user_ids if u)
        self.group_id = group_id or None
        self._group_members = group_members
        self._cache: tuple[float, frozenset[str]] | None = None
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self.user_ids or (self.group_id and self._group_members))

    def _group(self) -> frozenset[str]:
        if not self.group_id or self._group_members is None:
            return frozenset()
        with self._lock:
            if self._cache and time.monotonic() - self._cache[0] < GROUP_CACHE_S:
                return self._cache[1]
        try:
            members = frozenset(self._group_members(self.group_id))
        except Exception as exc:  # noqa: BLE001 - a failed lookup must refuse, not crash the click
            log.warning("could not read the members of reviewer group %s: %s", self.group_id, exc)
            return frozenset()
        with self._lock:
            self._cache = (time.monotonic(), members)
        return members

    def is_reviewer(self, user_id: str | None) -> bool:
        return bool(user_id) and (user_id in self.user_ids or user_id in self._group())

    def reviewers(self) -> list[str]:
        return sorted(self.user_ids | self._group())


@dataclass(frozen=True)
class Draft:
    submission: Submission
    form: CaseForm
    suggestions: list[SignatureSuggestion]
    nearest: list[Similar]


@dataclass(frozen=True)
class Checked:
    case: Case
    report: LintReport
    nearest: list[Similar]
    duplicates: list[Similar]


@dataclass(frozen=True)
class Applied:
    written: Written
    live_seconds: float  # write → reloaded KB and index (the case is matched from here on)
    live: bool  # False when the write dir is not the directory the pipeline reads
    commit: CommitResult | None
    resolved_candidates: int


@dataclass(frozen=True)
class Approval:
    submission: Submission
    applied: Applied


class KBGrowth:
    def __init__(
        self,
        settings: Any,
        pipeline: Any,
        *,
        group_members: Callable[[str], Collection[str]] | None = None,
        attach_priors: bool = True,
        replica: str | None = None,
    ):
        self.settings = settings
        self.pipeline = pipeline
        self.db = Database(settings.store_target(settings.kb_db_path))
        self.feedback = FeedbackStore(self.db)
        self.candidates = CandidateStore(self.db)
        self.submissions = SubmissionStore(self.db)
        read_dir = Path(getattr(pipeline, "cases_dir", None) or settings.kb_dir or DEFAULT_CASES_DIR)
        self.write_dir = Path(settings.kb_write_dir) if settings.kb_write_dir else read_dir
        self.live = self.write_dir.resolve() == read_dir.resolve()
        if not self.live:
            log.warning(
                "new KB cases are written to %s but the bot reads %s: they go live only after a deploy",
                self.write_dir, read_dir,
            )
        self.writer = CaseWriter(self.write_dir)
        self.replica = replica or "local"  # who published a KB change (bot/kb_growth/sync.py)
        self.reviewers = ReviewerPolicy(settings.kb_reviewers, settings.kb_reviewer_group, group_members)
        self.duplicate_threshold = float(settings.kb_duplicate_threshold)
        self._healthy_dir = Path(settings.kb_healthy_logs_dir) if settings.kb_healthy_logs_dir else None
        self._root_vectors: dict[str, Any] = {}  # unknown root lines embedded once per process (clusters.py)
        recovered = self.submissions.recover()
        if recovered:
            log.warning("%d interrupted KB approval(s) put back to pending", recovered)
        if attach_priors:
            self.attach_priors()

    @classmethod
    def from_settings(cls, settings: Any, pipeline: Any, **kw: Any) -> KBGrowth:
        return cls(settings, pipeline, **kw)

    def attach_priors(self) -> bool:
        """Hand the live feedback priors to the pipeline's matcher (Pipeline.set_priors, when it has one)."""
        setter = getattr(self.pipeline, "set_priors", None)
        if callable(setter):
            setter(self.feedback.priors())
            return True
        return False

    # -- checks --------------------------------------------------------------------------------------
    @property
    def healthy(self) -> Any:
        return healthy_logs(self._healthy_dir)

    def _others(self, exclude: str | None = None) -> list[Case]:
        return [c for c in self.pipeline.kb.cases if c.id != exclude]

    def lint(self, case: Case, *, replacing: str | None = None) -> LintReport:
        return lint_case(case, healthy=self.healthy, others=self._others(exclude=replacing))

    def validate(self, case_or_form: Case | CaseForm, *, replacing: str | None = None) -> tuple[Case, LintReport]:
        """Schema + KB rules; InvalidCase names each bad field. Fast (no embedding): fits a Slack ack."""
        case = form_to_case(case_or_form) if isinstance(case_or_form, CaseForm) else case_or_form
        case = normalised(case)
        self._refuse_unsafe_signatures(case.signatures, case.id, replacing)  # before lint runs them on logs
        report = self.lint(case, replacing=replacing)
        if not report.ok:
            raise InvalidCase(report.by_field(), where=f"case {case.id}")
        return case, report

    def _refuse_unsafe_signatures(self, signatures: Sequence[str], case_id: str, replacing: str | None) -> None:
        """InvalidCase for a signature new to the KB that could backtrack without end (regex_safety.py); the
        live case's own signatures (curated, reviewed in git) are kept as they are."""
        live = self.pipeline.kb.by_id().get(replacing or case_id)
        trusted = set(live.signatures) if live is not None else set()
        problems = [why for p in signatures if p not in trusted and (why := unsafe_signature(p)) is not None]
        if problems:
            raise InvalidCase({"signatures": "; ".join(problems)}, where=f"case {case_id}")

    def check(self, case_or_form: Case | CaseForm, *, replacing: str | None = None) -> Checked:
        """validate(), then the nearest existing cases (runs the pipeline's match: ~0.1–1 s)."""
        case, report = self.validate(case_or_form, replacing=replacing)
        nearest = nearest_cases(
            self.pipeline,
            [ex.log for ex in case.examples],
            exclude=[replacing] if replacing else [],
            overlaps=report.overlaps,
        )
        return Checked(case, report, nearest, likely_duplicates(nearest, self.duplicate_threshold))

    # -- Slack: draft → check → stage → submit → review ---------------------------------------------------
    def suggest(self, text: str | Paste, *, permalink: str | None = None,
                more_examples: Sequence[tuple[str, str]] = ()) -> tuple[CaseForm, list[SignatureSuggestion], list[Similar]]:
        """Pre-fill from a log: its evidence lines as the first example, suggested signatures, title, area,
        and the nearest known cases. Nothing is stored."""
        paste = redacted(text)  # from here on only the redacted text exists
        distilled = distill(paste)
        matches: tuple[Any, ...] = ()
        try:
            matches = self.pipeline.match(paste).matches
        except UserInputError:
            pass
        suggestions = suggest_signatures(paste.text, healthy=self.healthy, others=self._others(), distilled=distilled)
        blocks = [f"{permalink or 'https://slack.com/'}\n{example_text(paste.text, distilled)}"]
        for url, more in more_examples:
            blocks.append(f"{url}\n{example_text(redacted(more).text)}")
        form = CaseForm(
            title=suggest_title(distilled),
            area=suggest_area(distilled, matches),
            severity="high",
            signatures="\n".join(s.pattern for s in suggestions),
            examples=f"\n{EXAMPLE_SEPARATOR}\n".join(blocks),
        )
        nearest = [Similar(m.case_id, m.title, m.area, float(m.score), m.signature_hit) for m in matches[:3]]
        return form, suggestions, nearest

    def draft_from_log(
        self,
        text: str | Paste,
        *,
        author_id: str,
        author_name: str = "",
        channel: str | None = None,
        message_ts: str | None = None,
        permalink: str | None = None,
        more_examples: Sequence[tuple[str, str]] = (),
    ) -> Draft:
        """suggest(), and a draft submission that the Slack form refers to by id."""
        paste = redacted(text)
        form, suggestions, nearest = self.suggest(paste, permalink=permalink, more_examples=more_examples)
        sub = self.submissions.create_draft(
            author_id=author_id,
            author_name=author_name,
            channel=channel,
            message_ts=message_ts,
            permalink=permalink,
            source_text=paste.text[-MAX_SOURCE_TEXT:],
            prefill={
                "form": form.as_dict(),
                "nearest": [dataclasses.asdict(s) for s in nearest],
                "suggestions": [dataclasses.asdict(s) for s in suggestions],
            },
        )
        return Draft(sub, form, suggestions, nearest)

    def stage(self, sub_id: str, checked: Checked) -> Submission:
        report = {
            "nearest": [dataclasses.asdict(s) for s in checked.nearest],
            "duplicates": [s.case_id for s in checked.duplicates],
            "warnings": [w.message for w in checked.report.warnings],
        }
        return self.submissions.stage(
            sub_id, kind="new", case=checked.case.model_dump(mode="json"), target_case=None, report=report
        )

    def submit(self, sub_id: str, choice: str = "new") -> Submission:
        """choice: "new", or the id of an existing case to add the log to as an example."""
        sub = self.submissions.get_or_raise(sub_id)
        if sub.case is None:
            raise ReviewConflict("this form was not checked yet; submit it again")
        if choice == "new":
            return self.submissions.submit(sub_id, kind="new")
        if choice not in self.pipeline.kb.by_id():
            raise UserInputError(f"there is no case {choice!r} any more; choose again")
        return self.submissions.submit(sub_id, kind="example", target_case=choice)

    def approve(self, sub_id: str, reviewer_id: str, reviewer_name: str = "", *, as_maintainer: bool = False) -> Approval:
        """as_maintainer: the caller has shell access to the KB (CLI), so the reviewer list does not apply."""
        if not as_maintainer and not self.reviewers.is_reviewer(reviewer_id):
            raise PermissionDenied("Only KB reviewers can approve cases.")
        self.refuse_healthy_hits(self.submissions.get_or_raise(sub_id))
        sub = self.submissions.claim(sub_id, reviewer_id)
        try:
            applied = self._apply(sub, reviewer_name or reviewer_id)
        except Exception as exc:
            self.submissions.release(sub_id, note=str(exc)[:500])
            raise
        done = self.submissions.finish(
            sub_id, written_case=applied.written.case.id, written_path=str(applied.written.path)
        )
        return Approval(done, applied)

    def reject(self, sub_id: str, reviewer_id: str, note: str = "", *, as_maintainer: bool = False) -> Submission:
        if not as_maintainer and not self.reviewers.is_reviewer(reviewer_id):
            raise PermissionDenied("Only KB reviewers can reject cases.")
        return self.submissions.reject(sub_id, reviewer_id, note)

    def _apply(self, sub: Submission, reviewer: str) -> Applied:
        assert sub.case is not None
        proposed = Case.model_validate(sub.case)
        author = author_string(sub.author_name or sub.author_id, sub.author_id)
        if sub.kind == "example" and sub.target_case:
            return self.add_examples(
                sub.target_case,
                proposed.examples,
                proposed.signatures,
                author=author,
                message=f"kb: new example for {sub.target_case}\n\nFrom Slack ({sub.author_name or sub.author_id}), "
                f"approved by {reviewer}.",
            )
        return self.add_case(
            proposed,
            author=author,
            message=f"kb: add {proposed.id}: {proposed.title}\n\nProposed in Slack by "
            f"{sub.author_name or sub.author_id}, approved by {reviewer}.",
        )

    # -- writes (CLI and approvals) ------------------------------------------------------------------
    def add_case(self, case: Case, *, author: str | None = None, message: str | None = None) -> Applied:
        """Validate against the KB as it is now, write (renaming a taken id), go live."""
        case = normalised(case)
        report = self.lint(case)
        if not report.ok:
            raise InvalidCase(report.by_field(), where=f"case {case.id}")
        commit: list[CommitResult] = []

        def after(written: Written) -> None:
            if self.settings.kb_git_commit:
                msg = message or f"kb: add {written.case.id}: {written.case.title}"
                commit.append(commit_file(written.path, msg, author))

        written = self.writer.add(case, then=after)
        return self._go_live(written, commit[0] if commit else None)

    def add_examples(
        self,
        case_id: str,
        examples: Sequence[Example],
        candidate_signatures: Sequence[str] = (),
        *,
        author: str | None = None,
        message: str | None = None,
    ) -> Applied:
        """Append examples to an existing case (and, if its signatures miss them, the proposed signatures
        that hit them). The file is re-read under the write lock, so concurrent edits are not lost."""
        commit: list[CommitResult] = []
        with self.writer.locked():
            path = self.writer.path_of(case_id)
            if path is None:
                raise UserInputError(f"there is no case file for {case_id!r} any more")
            current = load_case_file(path)
            data = current.model_dump(mode="json")
            known_logs = {ex.log.strip() for ex in current.examples}
            signatures = list(current.signatures)
            self._refuse_unsafe_signatures([p for p in candidate_signatures if p not in signatures], case_id, None)
            for ex in examples:
                if ex.log.strip() in known_logs:
                    continue
                data["examples"].append(ex.model_dump(mode="json"))
                if ex.source not in data["references"]:
                    data["references"].append(ex.source)
                probe = Case.model_construct(id=case_id, signatures=signatures)  # type: ignore[call-arg]  # unvalidated probe: signature_fires reads id and signatures only
                if not signature_fires(probe, distill(ex.log).cleaned):
                    for pattern in candidate_signatures:
                        single = Case.model_construct(id=case_id, signatures=[pattern])  # type: ignore[call-arg]  # as above
                        if pattern not in signatures and signature_fires(single, distill(ex.log).cleaned):
                            signatures.append(pattern)
                            break
            data["signatures"] = signatures
            updated = normalised(Case.model_validate(data))
            report = self.lint(updated, replacing=case_id)
            if not report.ok:
                raise InvalidCase(report.by_field(), where=f"case {case_id}")

            def after(written: Written) -> None:
                if self.settings.kb_git_commit:
                    commit.append(commit_file(written.path, message or f"kb: new example for {case_id}", author))

            written = self.writer.replace(updated, then=after)
        return self._go_live(written, commit[0] if commit else None)

    def _go_live(self, written: Written, commit: CommitResult | None) -> Applied:
        started = time.perf_counter()
        if self.live:
            self.pipeline.reload_if_changed()
        if getattr(self.settings, "database_url", None):  # the other replicas apply it within VLLM_DOCTOR_KB_POLL seconds
            try:
                publish(self.db, self.write_dir, written.path, self.replica)
            except (StorageError, OSError, ValueError) as exc:
                log.error("case %s is live here but could not be shared with other replicas: %s",
                          written.case.id, exc)
        seconds = time.perf_counter() - started
        if commit is not None and not commit.ok:
            log.warning("case %s written but not committed: %s", written.case.id, commit.detail)
        resolved = self.candidates.resolve_with(written.case)
        log.info(
            "KB case %s %s at %s; live in %.2f s", written.case.id, "updated" if written.replaced else "added",
            written.path, seconds,
        )
        return Applied(written, seconds, self.live, commit, resolved)

    # -- feedback and candidates ------------------------------------------------------------------------
    def vote(
        self,
        *,
        answer_id: str,
        user_id: str,
        value: Vote,
        case_id: str | None,
        verdict: str,
        channel: str,
        evidence: str = "",
    ) -> VoteResult:
        result = self.feedback.vote(
            answer_id=answer_id, user_id=user_id, value=value, case_id=case_id, verdict=verdict, channel=channel,
            evidence=evidence,
        )
        if value == "not_helpful" and evidence.strip():
            self.candidates.add(
                evidence, "not_helpful", case_id=case_id, channel=channel, user_id=user_id, answer_id=answer_id
            )
        return result

    def note_answer(
        self, *, answer_id: str, verdict: str, evidence: str, channel: str | None = None, user_id: str | None = None,
        root_text: str | None = None, component: str | None = None, thread: str | None = None,
        permalink: str | None = None, versions: dict[str, str] | None = None,
    ) -> None:
        """Call after every answer: logs the KB could not explain become candidates for new cases, with their
        root line, component, thread and versions (the team-learning loop clusters them). "unknown" here means
        no confident answer: an `uncertain` verdict is kept too."""
        if verdict != "match" and evidence.strip():
            self.candidates.add(evidence, "unknown", channel=channel, user_id=user_id, answer_id=answer_id,
                                root_text=root_text, component=component, thread=thread, permalink=permalink,
                                versions=versions)

    # -- the team-learning loop: unknowns clustered into drafted cases (bot/kb_growth/clusters.py) ----------
    def _embed(self) -> Any:
        index = getattr(self.pipeline, "index", None)
        encoder = getattr(index, "encoder", None)
        return encoder().encode if callable(encoder) else None

    def cluster_drafts(self, *, include_posted: bool = False) -> list[ClusterDraft]:
        """Drafted cases from the open unknown candidates, oldest first; ones already posted to reviewers are
        left out unless include_posted."""
        scanner = SignatureScanner(self.pipeline.kb.cases)
        examples = [cleaned_lines(ex.log) for c in self.pipeline.kb.cases for ex in c.examples]
        clusters = Clusters(self._embed(), float(getattr(self.settings, "kb_draft_similarity", 0.6)), self._root_vectors)
        min_pastes = int(getattr(self.settings, "kb_draft_min_pastes", 2))
        drafts: list[ClusterDraft] = []
        posted = self.posted_signatures()
        for cand in self.candidates.unknowns():
            distilled = _distilled(cand.text)
            root = cluster_root(distilled, scanner, cand.root_text)
            shape = shape_of(root)
            if root is None or shape is None:
                continue
            lines = tuple(distilled.cleaned or distilled.evidence)
            for thread, link in cand.threads or ((f"candidate/{cand.id}", None),):
                unknown = Unknown(cand.id, root, shape, thread, lines, link, cand.component or "other",
                                  tuple(sorted(cand.versions.items())))
                cluster = clusters.add(unknown)
                drafted = draft_of(cluster, min_pastes=min_pastes, healthy=self.healthy, examples=examples)
                if drafted is not None:
                    if include_posted or drafted.signature not in posted:
                        drafts.append(drafted)
                    clusters.remove(cluster)
        return drafts

    def posted_signatures(self) -> dict[str, str]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT signature, submission_id FROM cluster_drafts").fetchall()
        return {r["signature"]: r["submission_id"] for r in rows}

    def draft_case(self, drafted: ClusterDraft) -> Case:
        """The drafted case as reviewers see it: title, signature, the pastes as examples, the component's triage
        steps as the fix (the reviewer edits cause and fix before or after accepting)."""
        from bot.diagnosis.root import triage

        first = self.candidates_text(drafted)
        steps = triage(drafted.component).steps  # type: ignore[arg-type]
        fix = [{"text": st.text, "text_zh": st.text_zh, "command": st.command} for st in steps]
        examples = []
        for u, text in zip(drafted.members, first, strict=True):
            link = u.permalink if u.permalink and u.permalink.startswith("https://") else "https://slack.com/"
            examples.append({"source": link, "log": example_text(text) or text[:2800]})
        title = drafted.title if len(drafted.title) >= 5 else f"Unknown failure: {drafted.title}"
        return Case.model_validate({
            "id": suggest_id(title), "title": title[:140], "title_zh": f"待审草稿：{title}"[:80],
            "area": suggest_area(distill(first[0])), "severity": "high", "signatures": [drafted.signature],
            "cause": (f"Drafted by the team-learning loop from {drafted.pastes} unknown pastes in {drafted.threads} "
                      f"threads sharing the root line; component {drafted.component}. Reviewer: state the cause."),
            "fix": fix, "examples": examples,
            "references": list(dict.fromkeys(ex["source"] for ex in examples)),
        })

    def candidates_text(self, drafted: ClusterDraft) -> list[str]:
        by_id = {c.id: c.text for c in self.candidates.unknowns()}
        return [by_id.get(int(u.key), u.root) for u in drafted.members]

    def propose_drafts(self) -> list[Submission]:
        """Each new drafted case becomes a pending submission (the review flow: accept, edit, dismiss); posted
        once per signature."""
        out = []
        for drafted in self.cluster_drafts():
            try:
                case = self.draft_case(drafted)
            except Exception as exc:  # noqa: BLE001 - one bad draft must not stop the others
                log.warning("drafted case %r could not be built: %s", drafted.title, exc)
                continue
            claim = f"claim-{uuid.uuid4().hex}"  # two workers (or replicas) drafting at once: one posts it
            with self.db.write() as conn:
                conn.execute("INSERT INTO cluster_drafts (signature, submission_id, created_at) VALUES (?, ?, ?) "
                             "ON CONFLICT (signature) DO NOTHING", (drafted.signature, claim, time.time()))
                row = conn.execute("SELECT submission_id FROM cluster_drafts WHERE signature = ?",
                                   (drafted.signature,)).fetchone()
            if row is None or row["submission_id"] != claim:
                continue
            link = drafted.links[0] if drafted.links and drafted.links[0].startswith("https://") else None
            sub = self.submissions.create_draft(
                author_id=LOOP_AUTHOR, author_name="vllm-doctor (team-learning loop)", channel=None,
                message_ts=None, permalink=link, source_text="\n".join(u.root for u in drafted.members),
                prefill={"cluster": drafted.as_dict()})
            report = {"nearest": [], "duplicates": [],
                      "warnings": [f"drafted from {drafted.pastes} pastes in {drafted.threads} threads: "
                                   + ", ".join(drafted.links[:5])]}
            self.submissions.stage(sub.id, kind="new", case=case.model_dump(mode="json"), target_case=None,
                                   report=report)
            sub = self.submissions.submit(sub.id, kind="new")
            with self.db.write() as conn:
                conn.execute("UPDATE cluster_drafts SET submission_id = ? WHERE signature = ?", (sub.id, drafted.signature))
            out.append(sub)
        return out

    def edit_draft(self, sub_id: str, reviewer_id: str, reviewer_name: str = "") -> tuple[Submission, CaseForm]:
        """A reviewer edits a drafted case: it is dismissed (rejected, note names the new one) and a new form
        draft, authored by the reviewer and pre-filled with it, goes through the usual form and review."""
        if not self.reviewers.is_reviewer(reviewer_id):
            raise PermissionDenied("Only KB reviewers can edit drafted cases.")
        old = self.submissions.get_or_raise(sub_id)
        if old.author_id != LOOP_AUTHOR or old.case is None:
            raise ReviewConflict("only cases drafted by the team-learning loop are edited here")
        form = case_to_form(Case.model_validate(old.case))
        new = self.submissions.create_draft(
            author_id=reviewer_id, author_name=reviewer_name, permalink=old.permalink, source_text=old.source_text,
            prefill={"form": form.as_dict(), "edited_from": old.id})
        self.submissions.reject(sub_id, reviewer_id, note=f"edited as {new.id}")
        return new, form

    def refuse_healthy_hits(self, sub: Submission) -> None:
        """InvalidCase naming the healthy start-up log and line a proposed signature fires on."""
        if not sub.case:
            return
        for pattern in sub.case.get("signatures") or []:
            probe = Case.model_construct(id="proposed", signatures=[pattern])  # type: ignore[call-arg]  # unvalidated probe: signature_fires reads id and signatures only
            for name, lines in self.healthy:
                hits = signature_fires(probe, lines)
                if hits:
                    line = hits[0][1]
                    raise InvalidCase({"signatures": f"{pattern!r} fires on the healthy start-up log {name}, "
                                                     f"line {line.line_no}: {line.text.strip()[:300]}"},
                                      where=f"case {sub.case.get('id', sub.id)}")

    def outcome_text(self, case_id: str | None) -> str | None:
        return self.feedback.outcome_text(case_id)

    def stats(self, top: int = 10) -> dict[str, Any]:
        kb = self.pipeline.kb
        by_area = {area: 0 for area in AREAS}
        for case in kb.cases:
            by_area[case.area] = by_area.get(case.area, 0) + 1
        outcomes = sorted(self.feedback.outcomes().values(), key=lambda o: (-o.total, o.case_id))
        return {
            "cases": {"total": len(kb.cases), "by_area": by_area, "invalid_files": len(kb.errors)},
            "feedback": {
                **self.feedback.totals(),
                "cases": [
                    {"case_id": o.case_id, "solved": o.solved, "total": o.total, "prior": round(o.prior, 4)}
                    for o in outcomes[:top]
                ],
            },
            "candidates": {
                **self.candidates.counts(),
                "top": [
                    {
                        "summary": c.summary,
                        "reason": c.reason,
                        "seen": c.seen,
                        "case_id": c.case_id,
                        "channel": c.channel,
                        "last_seen": c.last_seen,
                    }
                    for c in self.candidates.open(top)
                ],
            },
            "submissions": self.submissions.counts(),
        }
