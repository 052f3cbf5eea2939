"""The composition root, read this first. Both flows start here; data flows one way through the stages:

    explain (a paste):  decode_input (decode, check, redact: bot.diagnosis.paste) → distill → Matcher.rank
                        (signatures + BM25 + dense) → Diagnosis → Explainer (optional LLM, falls back to
                        the KB case) → reply (CLI / Slack)
    diagnose (hosts):   HostRequest → access (validate, authorize) → inventory → catalogue → runner engine
                        over SSH or locally → FleetReport → reply (CLI / Slack)

`Pipeline` is the dependency container (KB, index, matcher, explainer; the host flow: bot/host_flow.py),
built once per process. Its entry points: `match` / `explain` / `explain_stream` /
`explain_paste` for pastes, `diagnose` (and `check_hosts` for one slice of a queued group run) for hosts.
The CLI (bot/cli/) and every Slack listener (bot/slack/) call only these. Values are in bot/models.py.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from bot.diagnosis.distill import distill, extra_keywords
from bot.diagnosis.facts import read_facts
from bot.diagnosis.fix_values import fit_values, fitted_case
from bot.diagnosis.match import Matcher, Mode, Thresholds, signature_literals
from bot.diagnosis.paste import Paste, decode_input
from bot.diagnosis.ranker import DEFAULT_ARTIFACT, BoundRanker, load_for_kb
from bot.diagnosis.root import find_root, pasted_line_root
from bot.diagnosis.versions import known_versions
from bot.host_flow import HostFlow, Progress, Requester
from bot.index_lifecycle import IndexLifecycle
from bot.models import (
    Diagnosis,
    Distilled,
    Explanation,
    FleetReport,
    HostFacts,
    HostReport,
    HostRequest,
    LogFacts,
)
from bot.settings import Settings, get_settings, require_cases_dir
from kb.loader import DEFAULT_CASES_DIR, KnowledgeBase, case_files, load_kb
from kb.schema import Case

if TYPE_CHECKING:
    from bot.diagnosis.question import QuestionMatcher
    from bot.explain.explainer import Explainer
    from bot.runner.inventory import Host, Inventory
    from bot.runner.transport import Connector
    from kb.checks_schema import CheckCatalogue

log = logging.getLogger(__name__)


class Explained(NamedTuple):
    """A paste's answer: the deterministic diagnosis and, when asked for, its explanation."""

    diagnosis: Diagnosis
    explanation: Explanation | None


class Pipeline:
    """Everything both flows need, built once per process (`Pipeline.from_settings()`)."""

    def __init__(self, settings: Settings, kb: KnowledgeBase | None = None):
        self.settings = settings
        self.cases_dir = Path(settings.kb_dir) if settings.kb_dir else DEFAULT_CASES_DIR
        self._lock = threading.RLock()
        # the encoder and the index (bot/index_lifecycle.py); from_dir: written for the newest case files
        self._indexes = IndexLifecycle(settings, self.cases_dir, from_dir=kb is None, lock=self._lock)
        if kb is None:
            require_cases_dir(self.cases_dir, "VLLM_DOCTOR_KB_DIR")
        self._kb = kb or load_kb(self.cases_dir, strict=False)
        for err in self._kb.errors:
            log.error("KB lint error, case skipped: %s", err)
        self._kb_stamp = self._stamp()
        self._keywords = extra_keywords(signature_literals(self._kb.cases))
        self._index: Any = None
        self._matcher: Matcher | None = None
        self._question_matcher: QuestionMatcher | None = None
        self._explainer: Explainer | None | bool = False  # False = not resolved yet
        self._priors: Mapping[str, float] | None = None
        self._hosts: HostFlow | None = None  # the diagnose flow (bot/host_flow.py), made for self.settings
        self.thresholds = Thresholds(
            match=settings.match_threshold if settings.match_threshold is not None else Thresholds.match,
            uncertain=(
                settings.uncertain_threshold if settings.uncertain_threshold is not None else Thresholds.uncertain
            ),
        )

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Pipeline:
        return cls(settings or get_settings())

    # -- KB and index ------------------------------------------------------------------------------
    @property
    def kb(self) -> KnowledgeBase:
        return self._kb

    def case(self, case_id: str) -> Case:
        return self._kb.by_id()[case_id]

    def _stamp(self) -> tuple[tuple[str, int, int], ...]:
        """Cheap change detector for hand-edited YAML: names, sizes and mtimes of the case files."""
        out = []
        for p in case_files(self.cases_dir):
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((str(p), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def reload_if_changed(self) -> bool:
        """Pick up edited, added or removed case files. A broken file is logged and skipped; the others
        (and their index entries) keep serving. Returns True when the KB changed."""
        stamp = self._stamp()
        if stamp == self._kb_stamp:
            return False
        with self._lock:
            kb = load_kb(self.cases_dir, strict=False)
            for err in kb.errors:
                log.error("KB lint error, keeping the last good version of the others: %s", err)
            self._kb_stamp = stamp
            if kb.content_hash == self._kb.content_hash:
                return False
            self._kb = kb
            self._keywords = extra_keywords(signature_literals(kb.cases))
            if self._index is not None:
                self._index = self._open_index(kb)  # incremental: only changed cases are re-embedded
                self._matcher = Matcher(self._kb, self._index, self.thresholds, priors=self._priors,
                                        ranker=self._ranker(self._kb))
            self._question_matcher = None
            return True

    @property
    def build_progress(self) -> bool:
        """A progress bar while (re-)embedding: `vllm-doctor index` on a terminal."""
        return self._indexes.build_progress

    @build_progress.setter
    def build_progress(self, on: bool) -> None:
        self._indexes.build_progress = on

    @property
    def _encoder_instance(self) -> Any:
        return self._indexes.encoder_instance

    @_encoder_instance.setter
    def _encoder_instance(self, encoder: Any) -> None:  # tests hand in a deterministic or shared encoder
        self._indexes.encoder_instance = encoder

    def _encoder(self) -> Any:
        """The embedding model, loaded once per process and only when a dense query needs it."""
        return self._indexes.encoder()

    def _make_encoder(self) -> Any:
        return self._indexes.make_encoder()

    def _open_index(self, kb: KnowledgeBase, force_rebuild: bool = False) -> Any:
        """Open the index (bot/index_lifecycle.py); when it was written for newer case files than `kb`,
        this pipeline then serves that newest KB."""
        index, newest = self._indexes.open(
            kb, current=lambda k: k is self._kb and self._stamp() == self._kb_stamp, force_rebuild=force_rebuild
        )
        self._attach_query_adapter(index)
        if newest is not kb and newest.content_hash != self._kb.content_hash:
            self._kb = newest  # the stamp stays: the next request re-reads the files once more
            self._keywords = extra_keywords(signature_literals(newest.cases))
            self._matcher = None
        return index

    def _attach_query_adapter(self, index: Any) -> None:
        """VLLM_DOCTOR_QUERY_ADAPTER=on: map dense queries by the trained adapter (indexer/query_adapter.py);
        a missing, damaged or foreign artifact is one warning line and the plain dense scores."""
        if self.settings.query_adapter != "on":
            return
        from indexer.query_adapter import DEFAULT_ARTIFACT as ADAPTER_ARTIFACT
        from indexer.query_adapter import load_checked

        adapter, warning = load_checked(self.settings.query_adapter_path or ADAPTER_ARTIFACT)
        if warning:
            log.warning("%s", warning)
        index.set_query_adapter(adapter)

    def rebuild_index(self) -> Any:
        """Re-embed every case (`vllm-doctor index --rebuild`)."""
        with self._lock:
            self._index = self._open_index(self._kb, force_rebuild=True)
            self._matcher = None
            self._question_matcher = None
            return self._index

    def _ranker(self, kb: KnowledgeBase) -> BoundRanker | None:
        """The learned ranker for this KB (VLLM_DOCTOR_RANKER=learned), or None: the fixed fusion. A missing or
        stale artifact is one warning line, never a crash."""
        if self.settings.ranker != "learned":
            return None
        ranker, warning = load_for_kb(self.settings.ranker_path or DEFAULT_ARTIFACT, kb.cases)
        if warning:
            log.warning("%s", warning)
        return ranker

    @property
    def index(self) -> Any:
        with self._lock:
            if self._index is None:
                self._index = self._open_index(self._kb)
            return self._index

    @property
    def matcher(self) -> Matcher:
        with self._lock:
            if self._matcher is None:
                index = self.index  # first: opening it may move this pipeline to a newer KB
                self._matcher = Matcher(self._kb, index, self.thresholds, priors=self._priors,
                                        ranker=self._ranker(self._kb))
            return self._matcher

    @property
    def question_matcher(self) -> QuestionMatcher:
        with self._lock:
            if self._question_matcher is None:
                from bot.diagnosis.question import QuestionMatcher  # BM25/rjieba: not for `diagnose` (issue 29)
                from kb.glossary import default_glossary

                self._question_matcher = QuestionMatcher(self._kb, self.index, default_glossary())
            return self._question_matcher

    def warm_up(self) -> None:
        """Open (or build) the search index and load the embedding model now, not at the first paste: a
        server is ready only after this (`/readyz`)."""
        self.matcher  # noqa: B018 - the property opens the index
        self._encoder().encode(["warm up"])

    def set_priors(self, priors: Mapping[str, float] | None) -> None:
        """Ranking prior per case from user feedback (bot.kb_growth.feedback; clamped in bot.diagnosis.match)."""
        with self._lock:
            self._priors = priors
            self._matcher = None

    # -- explain: a paste → diagnosis ---------------------------------------------------------------
    def distil(self, data: str | bytes | Paste) -> tuple[Distilled, LogFacts]:
        """decode (and redact) + distill + facts: what `match` ranks a log on (the eval caches it per paste)."""
        self.reload_if_changed()
        paste = decode_input(data, self.settings.max_input_bytes)
        return distill(paste, keywords=self._keywords), read_facts(paste.text)

    def facts_of(self, data: str | bytes | Paste) -> LogFacts:
        """What a log states about its setup (decoded and redacted at the entry): a working run's log for
        `explain --since` (bot/diagnosis/since.py)."""
        return read_facts(decode_input(data, self.settings.max_input_bytes).text)

    def healthy_startup(self, data: str | bytes | Paste) -> tuple[str, LogFacts] | None:
        """A healthy start-up log's redacted text and facts (bot/diagnosis/since.py), else None: Slack keeps them per
        channel and model to say what changed when a failing log of that model is pasted later."""
        from bot.diagnosis.since import healthy_startup

        paste = decode_input(data, self.settings.max_input_bytes)
        distilled = distill(paste, keywords=self._keywords)
        facts = read_facts(paste.text)
        return (paste.text, facts) if healthy_startup(paste.text, distilled, facts) else None

    def match(
        self, data: str | bytes | Paste, mode: Mode = "hybrid", *,
        host_versions: Mapping[str, str] | None = None, host_label: str = "", host_gpus: int | None = None,
    ) -> Diagnosis:
        """The deterministic part of the explain flow: decode, distill, match (or answer a question).

        Raises bot.errors.UserInputError (EmptyInput, BinaryInput, InputTooLarge) for bad input.
        Raw input is decoded and redacted here (bot.diagnosis.paste) before anything else looks at it.

        host_versions: package → version from a /vllm-diagnose run of `host_label` (the same Slack thread);
        read with the log's own versions against the cases' fixed_in / affects (bot/diagnosis/versions.py)."""
        started = time.perf_counter()
        self.reload_if_changed()
        from bot.diagnosis.question import looks_like_question

        paste = decode_input(data, self.settings.max_input_bytes)
        distilled = distill(paste, keywords=self._keywords)
        if (
            mode == "hybrid"
            and looks_like_question(paste.text)
            and not self.matcher.scanner.scan(distilled.cleaned or distilled.evidence)
        ):
            # No log, no exact error string: answer the question (both languages, glossary-expanded).
            asked = self.question_matcher.match(paste.text)
            distilled = replace(distilled, language=asked.language)
            elapsed = (time.perf_counter() - started) * 1000
            return Diagnosis(asked.verdict, asked.matches, distilled, elapsed_ms=elapsed, kind="question",
                             root=pasted_line_root(paste.text, distilled, None))
        facts = read_facts(paste.text)
        versions = known_versions(facts, host_versions, host_label)
        ranking = self.matcher.rank(distilled, mode=mode, facts=facts, versions=versions)
        return Diagnosis(
            ranking.verdict,
            ranking.matches,
            distilled,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            also_noticed=ranking.also_noticed,
            facts=facts,
            notes=ranking.notes,
            root=find_root(distilled, facts, ranking.verdict, ranking.matches),  # bot/diagnosis/root.py
            fix_values=fit_values(facts, host_gpus),
        )

    # -- explain: diagnosis → explanation (LLM when configured, KB-only otherwise) --------------------
    @property
    def explainer(self) -> Explainer | None:
        """The LLM explainer, or None when no LLM is configured (KB-only answers)."""
        if self._explainer is False:
            from bot.explain.explainer import Explainer

            self._explainer = Explainer.from_settings(self.settings)
        return None if isinstance(self._explainer, bool) else self._explainer

    def _top_cases(self, diagnosis: Diagnosis) -> list[Case]:
        by_id = self._kb.by_id()
        # fix commands filled from the log: the LLM's KB context and the KB-only answer quote them
        values = diagnosis.fix_values
        return [fitted_case(by_id[m.case_id], values) for m in diagnosis.matches[:3] if m.case_id in by_id]

    def explain(
        self,
        diagnosis: Diagnosis,
        host_facts: HostFacts | None = None,
        language: str | None = None,
        use_llm: bool = True,
    ) -> Explanation:
        """The explanation of a diagnosis: the LLM's when configured, else the KB case's own text."""
        from bot.explain.explainer import kb_only_explanation

        cases = self._top_cases(diagnosis)
        explainer = self.explainer if use_llm else None
        if explainer is None:
            setting = self.settings.llm_language
            return kb_only_explanation(diagnosis, cases, language=language, note=None, setting=setting)
        return explainer.explain(diagnosis, cases, host_facts=host_facts, language=language)

    def explain_stream(
        self, diagnosis: Diagnosis, host_facts: HostFacts | None = None, language: str | None = None
    ) -> Iterator[str | Explanation]:
        """As explain, streamed: preview text pieces, then exactly one Explanation (Slack)."""
        from bot.explain.explainer import kb_only_explanation

        cases = self._top_cases(diagnosis)
        explainer = self.explainer
        if explainer is None:
            yield kb_only_explanation(
                diagnosis, cases, language=language, note=None, setting=self.settings.llm_language
            )
            return
        yield from explainer.stream(diagnosis, cases, host_facts=host_facts, language=language)

    def explain_paste(
        self,
        data: str | bytes | Paste,
        *,
        host_facts: HostFacts | None = None,
        language: str | None = None,
        use_llm: bool = True,
        host_versions: Mapping[str, str] | None = None,
        host_label: str = "",
    ) -> Explained:
        """A paste → its diagnosis and, when an LLM is configured and wanted, the LLM's explanation
        (KB-only when the LLM fails). Without an LLM the explanation is None: the diagnosis is the answer.
        host_versions: package → version of the host the log came from (a `diagnose --json` report)."""
        diagnosis = self.match(data, host_versions=host_versions, host_label=host_label)
        explanation = None
        if use_llm and self.settings.vllm_base_url:
            explanation = self.explain(diagnosis, host_facts, language)
        return Explained(diagnosis, explanation)

    def case_titles(self, case_ids: Sequence[str], title: Callable[[Case], str] | None = None) -> dict[str, str]:
        """Titles for the KB cases a host report points to (a removed case shows its id); `title` picks
        the wording (e.g. the asker's language)."""
        by_id = self._kb.by_id()
        pick = title or (lambda case: case.title)
        return {case_id: pick(by_id[case_id]) if case_id in by_id else case_id for case_id in case_ids}

    # -- diagnose: hosts (bot/host_flow.py) ------------------------------------------------------------
    def with_settings(self, settings: Settings) -> Pipeline:
        """This pipeline's loaded KB, index and models under other settings (the Slack bot's own inventory
        and access rules, a CLI --inventory): nothing is loaded twice."""
        if settings is self.settings:
            return self
        other = copy.copy(self)
        other.settings = settings
        other._indexes = copy.copy(self._indexes)  # the encoder made so far is shared, as before
        other._indexes.settings = settings
        return other

    @property
    def hosts(self) -> HostFlow:
        """The diagnose flow under this pipeline's settings."""
        if self._hosts is None or self._hosts.settings is not self.settings:
            self._hosts = HostFlow(self.settings)
        return self._hosts

    @property
    def runner_configured(self) -> bool:
        """Remote host checks need an inventory (VLLM_DOCTOR_INVENTORY); --local does not."""
        return self.hosts.runner_configured

    def inventory(self) -> Inventory:
        """The configured inventory, re-read when its file changes (ConfigError when none is set)."""
        return self.hosts.inventory()

    def catalogue(self) -> CheckCatalogue:
        return self.hosts.catalogue()

    def planned_checks(self, request: HostRequest) -> list[str]:
        """The check ids a run of `request` will execute (for the audit row of a queued group run)."""
        return self.hosts.planned_checks(request)

    def resolve_hosts(self, target: str) -> list[Host]:
        """An inventory host or group name → its hosts (InvalidTarget, UnknownHost otherwise)."""
        return self.hosts.resolve_hosts(target)

    def authorize(
        self, user_id: str, channel_id: str | None, usergroup_ids: set[str], request: HostRequest
    ) -> list[Host]:
        """The hosts `user_id` may check from `channel_id` (default deny; PermissionDenied otherwise)."""
        return self.hosts.authorize(user_id, channel_id, usergroup_ids, request)

    def local_host(self, **fields: Any) -> Host:
        """This machine as a Host (`--local`); fields: python, endpoint, serve_port, expected_gpus, …"""
        return self.hosts.local_host(**fields)

    def connector(self, *, local: bool, inventory: Inventory | None) -> Connector:
        """How checks reach a host: this machine's shell, or SSH with verified host keys."""
        return self.hosts.connector(local=local, inventory=inventory)

    def diagnose(
        self,
        request: HostRequest,
        *,
        local: bool = False,
        hosts: list[Host] | None = None,
        progress: Progress | None = None,
        requester: Requester | None = None,
    ) -> FleetReport:
        """Run the catalogue on `request.target` (an inventory host or group) or, with local=True, here;
        every run is audited (HostFlow.diagnose has the whole contract)."""
        return self.hosts.diagnose(request, local=local, hosts=hosts, progress=progress, requester=requester)

    def check_hosts(
        self, hosts: list[Host], request: HostRequest, progress: Progress | None = None
    ) -> list[HostReport]:
        """Run the catalogue on already authorized hosts, without an audit row (one slice of a group run)."""
        return self.hosts.check_hosts(hosts, request, progress)


__all__ = ["Explained", "Pipeline", "Progress", "Requester"]
