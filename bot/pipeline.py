"""The composition root, read this first. Both flows start here; data flows one way through the stages:

    explain (a paste):  decode_input (decode, check, redact: bot.paste) → distill → Matcher.rank
                        (signatures + BM25 + dense) → Diagnosis → Explainer (optional LLM, falls back to
                        the KB case) → reply (CLI / Slack)
    diagnose (hosts):   HostRequest → access (validate, authorize) → inventory → catalogue → runner engine
                        over SSH or locally → FleetReport → reply (CLI / Slack)

`Pipeline` is the dependency container (KB, index, matcher, explainer, inventory, catalogue, connector,
audit log), built once per process. Its entry points: `match` / `explain` / `explain_stream` /
`explain_paste` for pastes, `diagnose` (and `check_hosts` for one slice of a queued group run) for hosts.
The CLI (bot/cli/) and every Slack listener (bot/slack/) call only these. Values are in bot/models.py.
"""

from __future__ import annotations

import asyncio
import copy
import getpass
import logging
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from bot.distill import distill, extra_keywords
from bot.errors import IndexUnavailable, UserInputError
from bot.facts import read_facts
from bot.fix_values import fit_values, fitted_case
from bot.match import Matcher, Mode, Thresholds, signature_literals
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
from bot.ops import metrics
from bot.paste import Paste, decode_input
from bot.ranker import DEFAULT_ARTIFACT, BoundRanker, load_for_kb
from bot.root import find_root, pasted_line_root
from bot.settings import Settings, get_settings, require_cases_dir
from bot.versions import known_versions
from kb.loader import DEFAULT_CASES_DIR, KnowledgeBase, case_files, load_kb
from kb.schema import Case

if TYPE_CHECKING:
    from bot.explain.explainer import Explainer
    from bot.question import QuestionMatcher
    from bot.runner.inventory import Host, Inventory
    from bot.runner.transport import Connector
    from kb.checks_schema import Check, CheckCatalogue

log = logging.getLogger(__name__)

Progress = Callable[[str], None]  # one short line per step ("gpu01: 12/34 checks"), best effort
_T = TypeVar("_T")


class Explained(NamedTuple):
    """A paste's answer: the deterministic diagnosis and, when asked for, its explanation."""

    diagnosis: Diagnosis
    explanation: Explanation | None


@dataclass(frozen=True)
class Requester:
    """Who asked for a host diagnosis, for the audit log (CLI: the login name)."""

    source: Literal["cli", "slack"] = "cli"
    user_id: str | None = None
    channel_id: str | None = None


class Pipeline:
    """Everything both flows need, built once per process (`Pipeline.from_settings()`)."""

    def __init__(self, settings: Settings, kb: KnowledgeBase | None = None):
        self.settings = settings
        self.cases_dir = Path(settings.kb_dir) if settings.kb_dir else DEFAULT_CASES_DIR
        self._lock = threading.RLock()
        self._kb_from_dir = kb is None  # then the index is written for the newest files (see _open_index)
        self.build_progress = False  # a progress bar while (re-)embedding: `vllm-doctor index` on a terminal
        if kb is None:
            require_cases_dir(self.cases_dir, "VLLM_DOCTOR_KB_DIR")
        self._kb = kb or load_kb(self.cases_dir, strict=False)
        for err in self._kb.errors:
            log.error("KB lint error, case skipped: %s", err)
        self._kb_stamp = self._stamp()
        self._keywords = extra_keywords(signature_literals(self._kb.cases))
        self._index: Any = None
        self._encoder_instance: Any = None
        self._matcher: Matcher | None = None
        self._question_matcher: QuestionMatcher | None = None
        self._explainer: Explainer | None | bool = False  # False = not resolved yet
        self._priors: Mapping[str, float] | None = None
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

    def _encoder(self) -> Any:
        """The embedding model, loaded once per process and only when a dense query needs it."""
        with self._lock:
            if self._encoder_instance is None:
                self._encoder_instance = self._make_encoder()
                self._encoder_instance.progress = self.build_progress
            return self._encoder_instance

    def _make_encoder(self) -> Any:
        """The ONNX path (no torch import) unless VLLM_DOCTOR_ENCODER=torch or the model cannot run there."""
        from indexer.encoder import SentenceTransformerEncoder

        if self.settings.encoder == "onnx":
            from indexer.onnx_encoder import OnnxEncoder, OnnxUnsupported

            try:
                return OnnxEncoder(self.settings.embed_model_path, onnx_dir=self.settings.onnx_dir)
            except OnnxUnsupported as exc:
                log.warning("search model: %s; using the torch path", exc)
        return SentenceTransformerEncoder(self.settings.embed_model_path)

    def _open_index(self, kb: KnowledgeBase, force_rebuild: bool = False) -> Any:
        """Open the index. The KB is read again under the index's directory lock, so a case another
        process wrote meanwhile is indexed too (never lost from the saved index); this pipeline then
        serves that newest KB."""
        from indexer.encoder import EncoderUnavailable
        from indexer.index import KBIndex

        newest = [kb]

        def reread() -> list[Case]:
            if kb is self._kb and self._stamp() == self._kb_stamp:
                return list(kb.cases)  # no case file added, removed or touched since: skip parsing ~200 YAMLs
            newest[0] = load_kb(self.cases_dir, strict=False)
            return list(newest[0].cases)

        started = time.monotonic()
        try:
            index = KBIndex.open(kb, Path(self.settings.index_dir), self._encoder, force_rebuild=force_rebuild,
                                 reread=reread if self._kb_from_dir else None)
        except EncoderUnavailable as exc:
            raise IndexUnavailable(str(exc)) from exc
        metrics.INDEX_BUILD_SECONDS.set(time.monotonic() - started)
        self._attach_query_adapter(index)
        if newest[0] is not kb and newest[0].content_hash != self._kb.content_hash:
            self._kb = newest[0]  # the stamp stays: the next request re-reads the files once more
            self._keywords = extra_keywords(signature_literals(newest[0].cases))
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
                from bot.question import QuestionMatcher  # BM25/rjieba: not for `diagnose` (issue 29)
                from kb.glossary import default_glossary

                self._question_matcher = QuestionMatcher(self._kb, self.index, default_glossary())
            return self._question_matcher

    def warm_up(self) -> None:
        """Open (or build) the search index and load the embedding model now, not at the first paste: a
        server is ready only after this (`/readyz`)."""
        self.matcher  # noqa: B018 - the property opens the index
        self._encoder().encode(["warm up"])

    def set_priors(self, priors: Mapping[str, float] | None) -> None:
        """Ranking prior per case from user feedback (bot.kb_growth.feedback; clamped in bot.match)."""
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
        `explain --since` (bot/since.py)."""
        return read_facts(decode_input(data, self.settings.max_input_bytes).text)

    def healthy_startup(self, data: str | bytes | Paste) -> tuple[str, LogFacts] | None:
        """A healthy start-up log's redacted text and facts (bot/since.py), else None: Slack keeps them per
        channel and model to say what changed when a failing log of that model is pasted later."""
        from bot.since import healthy_startup

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
        Raw input is decoded and redacted here (bot.paste) before anything else looks at it.

        host_versions: package → version from a /vllm-diagnose run of `host_label` (the same Slack thread);
        read with the log's own versions against the cases' fixed_in / affects (bot/versions.py)."""
        started = time.perf_counter()
        self.reload_if_changed()
        from bot.question import looks_like_question

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
            root=find_root(distilled, facts, ranking.verdict, ranking.matches),  # bot/root.py
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

    # -- diagnose: hosts ------------------------------------------------------------------------------
    def with_settings(self, settings: Settings) -> Pipeline:
        """This pipeline's loaded KB, index and models under other settings (the Slack bot's own inventory
        and access rules, a CLI --inventory): nothing is loaded twice."""
        if settings is self.settings:
            return self
        other = copy.copy(self)
        other.settings = settings
        return other

    @property
    def runner_configured(self) -> bool:
        """Remote host checks need an inventory (VLLM_DOCTOR_INVENTORY); --local does not."""
        return self.settings.runner_inventory is not None

    def inventory(self) -> Inventory:
        """The configured inventory, re-read when its file changes (ConfigError when none is set)."""
        from bot.runner.access import inventory_from_settings

        return inventory_from_settings(self.settings)

    def catalogue(self) -> CheckCatalogue:
        from bot.runner.catalogue import load_catalogue

        return load_catalogue(self.settings.runner_checks_dir)  # cached per directory

    def _select(self, request: HostRequest) -> tuple[CheckCatalogue, list[Check]]:
        from bot.runner.catalogue import select_checks

        if request.max_tier not in (0, 1, 2):
            raise UserInputError("tier must be 0, 1 or 2")
        catalogue = self.catalogue()
        selected, problems = select_checks(catalogue, list(request.checks) or None, request.max_tier)
        if problems:
            raise UserInputError("; ".join(problems))
        return catalogue, selected

    def planned_checks(self, request: HostRequest) -> list[str]:
        """The check ids a run of `request` will execute (for the audit row of a queued group run)."""
        return [c.id for c in self._select(request)[1]]

    def resolve_hosts(self, target: str) -> list[Host]:
        """An inventory host or group name → its hosts (InvalidTarget, UnknownHost otherwise)."""
        from bot.runner.access import resolve_target

        return resolve_target(target, self.settings)

    def authorize(
        self, user_id: str, channel_id: str | None, usergroup_ids: set[str], request: HostRequest
    ) -> list[Host]:
        """The hosts `user_id` may check from `channel_id` (default deny; PermissionDenied otherwise)."""
        from bot.runner.access import authorize

        return authorize(user_id, channel_id, usergroup_ids, request.target, self.settings, max_tier=request.max_tier)

    def local_host(self, **fields: Any) -> Host:
        """This machine as a Host (`--local`); fields: python, endpoint, serve_port, expected_gpus, …"""
        from bot.runner.inventory import Host

        values = {"python": self.settings.runner_local_python, **{k: v for k, v in fields.items() if v is not None}}
        return Host(name=socket.gethostname() or "localhost", address="localhost", **values)

    def connector(self, *, local: bool, inventory: Inventory | None) -> Connector:
        """How checks reach a host: this machine's shell, or SSH with verified host keys."""
        if local:
            from bot.runner.local import LocalConnector

            return LocalConnector()
        from bot.runner.ssh import SSHConnector

        s = self.settings
        return SSHConnector(
            known_hosts=s.runner_known_hosts,
            ssh_config=s.runner_ssh_config,
            connect_timeout_s=s.runner_connect_timeout_s,
            max_connecting=s.runner_max_connecting,
            max_channels_per_host=s.runner_max_channels_per_host,
            jump_hosts=dict(inventory.hosts) if inventory else {},
        )

    def diagnose(
        self,
        request: HostRequest,
        *,
        local: bool = False,
        hosts: list[Host] | None = None,
        progress: Progress | None = None,
        requester: Requester | None = None,
    ) -> FleetReport:
        """Run the catalogue on `request.target` (an inventory host or group) or, with local=True, here.

        `request.checks` are check ids or areas (default: every check up to `request.max_tier`). Pass
        `hosts` when the caller already resolved and authorized them (Slack). Unreachable hosts, auth
        failures, host-key mismatches and hung checks are reported in the result; exceptions are raised
        only for bad arguments (UserInputError), configuration (ConfigError) and unknown targets
        (UnknownHost). Every run is written to the audit log with who asked. Synchronous: safe from
        worker threads and from inside a running event loop.
        """
        from bot.runner.access import inventory_from_settings, resolve_target, validate_target
        from bot.runner.audit import AuditLog

        if not isinstance(request, HostRequest):  # a paste goes to match(); say so instead of failing later
            raise TypeError(f"Pipeline.diagnose takes a HostRequest (hosts), not {type(request).__name__}; "
                            "a paste is matched with Pipeline.match")
        requester = requester or Requester()
        catalogue, selected = self._select(request)
        target = request.target
        inventory: Inventory | None = None
        if local:
            hosts = hosts or [self.local_host()]
            target = target or hosts[0].name
        else:
            if hosts is None:
                validate_target(target)  # refuse metacharacters before reading any file
            if hosts is None or self.settings.runner_inventory is not None:
                inventory = inventory_from_settings(self.settings)
            if hosts is None:
                hosts = resolve_target(target, self.settings, inventory)
        audit = AuditLog(self.settings.store_target(self.settings.runner_audit_db))
        user_id = requester.user_id or (f"cli:{_login()}" if requester.source == "cli" else None)
        run_id = audit.start(
            user_id=user_id, channel_id=requester.channel_id, source=requester.source, target=target,
            hosts=[h.name for h in hosts], checks=[c.id for c in selected], max_tier=request.max_tier,
        )  # fmt: skip
        started = time.time()
        try:
            reports = _run_sync(self._check_hosts(hosts, selected, catalogue, local, progress, inventory))
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM through the CLI's handler
            audit.finish(run_id, None, error=f"interrupted ({type(exc).__name__} {exc})".strip(), status="interrupted")
            raise
        except BaseException as exc:
            audit.finish(run_id, None, error=f"{type(exc).__name__}: {exc}")
            raise
        report = FleetReport(target=target, hosts=reports, max_tier=request.max_tier,
                             checks_requested=list(request.checks) or None, started_at=started,
                             duration_s=time.time() - started)
        audit.finish(run_id, report)
        return report

    def check_hosts(
        self, hosts: list[Host], request: HostRequest, progress: Progress | None = None
    ) -> list[HostReport]:
        """Run the catalogue on already authorized hosts, without an audit row: one slice of a group run
        whose audit row the fleet queue's owner keeps (bot/runner/fleet.py)."""
        catalogue, selected = self._select(request)
        inventory = self.inventory() if self.runner_configured else None
        return _run_sync(self._check_hosts(hosts, selected, catalogue, False, progress, inventory))

    async def _check_hosts(
        self,
        hosts: list[Host],
        selected: list[Check],
        catalogue: CheckCatalogue,
        local: bool,
        progress: Progress | None,
        inventory: Inventory | None,
    ) -> list[HostReport]:
        from bot.runner.engine import diagnose_hosts

        connector = self.connector(local=local, inventory=inventory)
        return await diagnose_hosts(hosts, connector, selected, catalogue, progress=progress,
                                    max_parallel_hosts=self.settings.runner_max_parallel_hosts)


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:  # called from inside an event loop: use a fresh one
        return pool.submit(asyncio.run, coro).result()


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
