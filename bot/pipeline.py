"""The engine, read this first. Both flows start here and data flows one way:

    paste  → decode_input (decode, check, redact: bot.paste) → distill → Matcher.match (signatures + BM25 + dense) → Diagnosis
           → Explainer (optional LLM, falls back to the KB case) → reply (CLI / Slack)

`Doctor` owns the loaded KB, the index and the explainer; build it once per process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.distill import distill, extra_keywords
from bot.errors import IndexUnavailable
from bot.facts import read_facts
from bot.match import Matcher, Mode, Thresholds, signature_literals
from bot.models import Diagnosis, Distilled, LogFacts
from bot.ops import metrics
from bot.paste import Paste, decode_input
from bot.question import QuestionMatcher, looks_like_question
from bot.settings import Settings, get_settings
from kb.loader import DEFAULT_CASES_DIR, KnowledgeBase, case_files, load_kb
from kb.schema import Case

if TYPE_CHECKING:
    from bot.explain.explainer import Explainer, Explanation

log = logging.getLogger(__name__)


class Doctor:
    def __init__(self, settings: Settings, kb: KnowledgeBase | None = None):
        self.settings = settings
        self.cases_dir = Path(settings.kb_dir) if settings.kb_dir else DEFAULT_CASES_DIR
        self._lock = threading.RLock()
        self._kb_from_dir = kb is None  # then the index is written for the newest files (see _open_index)
        self.build_progress = False  # a progress bar while (re-)embedding: `vllm-doctor index` on a terminal
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
    def from_settings(cls, settings: Settings | None = None) -> Doctor:
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
                self._matcher = Matcher(self._kb, self._index, self.thresholds, priors=self._priors)
            self._question_matcher = None
            return True

    def _encoder(self) -> Any:
        """The embedding model, loaded once per process and only when a dense query needs it."""
        with self._lock:
            if self._encoder_instance is None:
                from indexer.encoder import SentenceTransformerEncoder

                self._encoder_instance = SentenceTransformerEncoder(self.settings.embed_model_path)
                self._encoder_instance.progress = self.build_progress
            return self._encoder_instance

    def _open_index(self, kb: KnowledgeBase, force_rebuild: bool = False) -> Any:
        """Open the index. The KB is read again under the index's directory lock, so a case another
        process wrote meanwhile is indexed too (never lost from the saved index); this engine then
        serves that newest KB."""
        from indexer.encoder import EncoderUnavailable
        from indexer.index import KBIndex

        newest = [kb]

        def reread() -> list[Case]:
            newest[0] = load_kb(self.cases_dir, strict=False)
            return list(newest[0].cases)

        started = time.monotonic()
        try:
            index = KBIndex.open(kb, Path(self.settings.index_dir), self._encoder, force_rebuild=force_rebuild,
                                 reread=reread if self._kb_from_dir else None)
        except EncoderUnavailable as exc:
            raise IndexUnavailable(str(exc)) from exc
        metrics.INDEX_BUILD_SECONDS.set(time.monotonic() - started)
        if newest[0] is not kb and newest[0].content_hash != self._kb.content_hash:
            self._kb = newest[0]  # the stamp stays: the next request re-reads the files once more
            self._keywords = extra_keywords(signature_literals(newest[0].cases))
            self._matcher = None
        return index

    def rebuild_index(self) -> Any:
        """Re-embed every case (`vllm-doctor index --rebuild`)."""
        with self._lock:
            self._index = self._open_index(self._kb, force_rebuild=True)
            self._matcher = None
            self._question_matcher = None
            return self._index

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
                index = self.index  # first: opening it may move this engine to a newer KB
                self._matcher = Matcher(self._kb, index, self.thresholds, priors=self._priors)
            return self._matcher

    @property
    def question_matcher(self) -> QuestionMatcher:
        with self._lock:
            if self._question_matcher is None:
                from kb.glossary import default_glossary

                self._question_matcher = QuestionMatcher(self._kb, self.index, default_glossary())
            return self._question_matcher

    def set_priors(self, priors: Mapping[str, float] | None) -> None:
        """Ranking prior per case from user feedback (bot.kb_growth.feedback; clamped in bot.match)."""
        with self._lock:
            self._priors = priors
            self._matcher = None

    # -- flow 1: paste → diagnosis -----------------------------------------------------------------
    def distil(self, data: str | bytes | Paste) -> tuple[Distilled, LogFacts]:
        """decode (and redact) + distill + facts: what `diagnose` ranks a log on (the eval caches it per paste)."""
        self.reload_if_changed()
        paste = decode_input(data, self.settings.max_input_bytes)
        return distill(paste, keywords=self._keywords), read_facts(paste.text)

    def diagnose(self, data: str | bytes | Paste, mode: Mode = "hybrid") -> Diagnosis:
        """Raises bot.errors.UserInputError (EmptyInput, BinaryInput, InputTooLarge) for bad input.
        Raw input is decoded and redacted here (bot.paste) before anything else looks at it."""
        started = time.perf_counter()
        self.reload_if_changed()
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
            return Diagnosis(asked.verdict, asked.matches, distilled, elapsed_ms=elapsed, kind="question")
        facts = read_facts(paste.text)
        ranking = self.matcher.rank(distilled, mode=mode, facts=facts)
        return Diagnosis(
            ranking.verdict,
            ranking.matches,
            distilled,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            also_noticed=ranking.also_noticed,
            facts=facts,
            notes=ranking.notes,
        )

    # -- explanation (LLM when configured, KB-only otherwise) ----------------------------------------
    @property
    def explainer(self) -> Explainer | None:
        if self._explainer is False:
            from bot.explain.explainer import Explainer

            self._explainer = Explainer.from_settings(self.settings)
        return self._explainer  # type: ignore[return-value]

    def _top_cases(self, diagnosis: Diagnosis) -> list[Case]:
        by_id = self._kb.by_id()
        return [by_id[m.case_id] for m in diagnosis.matches[:3] if m.case_id in by_id]

    def explain(
        self, diagnosis: Diagnosis, host_facts: dict | None = None, language: str | None = None, use_llm: bool = True
    ) -> Explanation:
        from bot.explain.explainer import kb_only_explanation

        cases = self._top_cases(diagnosis)
        explainer = self.explainer if use_llm else None
        if explainer is None:
            return kb_only_explanation(diagnosis, cases, language=language, note=None, setting=self.settings.llm_language)
        return explainer.explain(diagnosis, cases, host_facts=host_facts, language=language)

    def explain_stream(
        self, diagnosis: Diagnosis, host_facts: dict | None = None, language: str | None = None
    ) -> Iterator[str | Explanation]:
        from bot.explain.explainer import kb_only_explanation

        cases = self._top_cases(diagnosis)
        if self.explainer is None:
            yield kb_only_explanation(
                diagnosis, cases, language=language, note=None, setting=self.settings.llm_language
            )
            return
        yield from self.explainer.stream(diagnosis, cases, host_facts=host_facts, language=language)
