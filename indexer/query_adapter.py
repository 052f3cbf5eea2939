"""QueryAdapter: a d×d linear map of the query embedding, learned on (log, case) pairs (issue 26).

The dense retriever compares a paste's MiniLM embedding with each case's documents. Logs and the KB's
documents are written differently (a log's masked lines vs a case's description and example logs), so a
linear map W, applied to the query only, q' = normalize(q W), is trained to move a log's embedding toward its
case's documents. The document vectors stay as they are: a case added after training is still scored, with
the same map.

Training (`train`): softmax cross-entropy over cases, where a case's score is its best document's cosine
with the mapped query, divided by a temperature; plus λ‖W − I‖² (W starts at, and is pulled toward, the
identity, so an untrained direction keeps today's geometry). Full batch, Adam, gradient written by hand
(numpy only: no torch here). Deterministic: the same inputs give the same W.

Artifact (`save` / `load`): an .npz with W (float32), the embedding model id, the dimension, and a hash of
the KB's case set it was trained against (`case_set_hash`), so serving can say when it is stale.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = 1
DEFAULT_ARTIFACT = Path(__file__).resolve().parent.parent / "kb" / "ranker" / "query_adapter.npz"
TEMPERATURE = 0.05
DEFAULT_LAMBDA = 0.1  # tuned on the k-fold (0.001, 0.01, 0.1, 0.3, 1.0; docs/matching.md)
DEFAULT_STEPS = 300
DEFAULT_LR = 1e-3
DEFAULT_SEED = 26


class AdapterError(ValueError):
    """The artifact cannot be used (missing, damaged, another model or dimension); the message says why."""


def case_set_hash(case_ids: Iterable[str]) -> str:
    """A short hash of the set of case ids (order does not matter)."""
    text = "\n".join(sorted(set(case_ids)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    out: np.ndarray = x / np.clip(norms, 1e-12, None)
    return out


@dataclass(frozen=True)
class QueryAdapter:
    """q' = normalize(q W). `losses` is the training loss per step (empty for a loaded artifact)."""

    weight: np.ndarray  # d × d, float32
    model_id: str
    case_set: str  # case_set_hash of the KB it was trained against
    seed: int = DEFAULT_SEED
    trained_on: int = 0  # number of (log, case) pairs
    # ids of the labelled logs it was trained on: `vllm-doctor eval` turns it off for a file holding them
    log_ids: tuple[str, ...] = field(default=(), compare=False)
    losses: tuple[float, ...] = field(default=(), compare=False)

    @property
    def dim(self) -> int:
        return int(self.weight.shape[0])

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """Map query vectors (n × d or d) and normalise them again; float32, same shape."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.shape[-1] != self.dim:
            raise AdapterError(f"query adapter is {self.dim}-dimensional, the vectors are {v.shape[-1]}")
        return _normalise(v @ self.weight).astype(np.float32)

    def problem(self, model_id: str, dim: int) -> str:
        """Why this adapter cannot serve an index of this model and dimension ('' when it can)."""
        if self.dim != dim:
            return f"trained for dimension {self.dim}, the index has {dim}"
        if self.model_id != model_id:
            return f"trained for model {self.model_id}, the index uses {model_id}"
        return ""

    def stale(self, case_ids: Iterable[str]) -> bool:
        """True when the KB's case set is not the one it was trained against (retrain: `vllm-doctor train`)."""
        return self.case_set != case_set_hash(case_ids)

    # ------------------------------------------------------------------------------------------ disk

    def save(self, path: Path) -> None:
        meta = {"format": FORMAT, "model_id": self.model_id, "dim": self.dim, "case_set": self.case_set,
                "seed": self.seed, "trained_on": self.trained_on, "log_ids": list(self.log_ids)}
        buf = io.BytesIO()
        np.savez_compressed(buf, weight=self.weight.astype(np.float32), meta=np.array(json.dumps(meta)))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> QueryAdapter:
        """Read an artifact; AdapterError (one sentence) when it is missing or damaged."""
        path = Path(path)
        try:
            raw = path.read_bytes()  # read first: np.load leaves the file open when the zip is damaged
            with np.load(io.BytesIO(raw), allow_pickle=False) as data:
                weight = np.asarray(data["weight"], dtype=np.float32)
                meta = json.loads(str(data["meta"]))
        except FileNotFoundError:
            raise AdapterError(f"no query adapter at {path}") from None
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, json.JSONDecodeError) as exc:
            raise AdapterError(f"query adapter {path} is unreadable ({type(exc).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise AdapterError(f"query adapter {path} has an unknown format")
        dim = meta.get("dim")
        if weight.ndim != 2 or weight.shape[0] != weight.shape[1] or weight.shape[0] != dim:
            raise AdapterError(f"query adapter {path} has a weight of shape {weight.shape}, not {dim}×{dim}")
        if not np.all(np.isfinite(weight)):
            raise AdapterError(f"query adapter {path} holds non-finite weights")
        ids = meta.get("log_ids", [])
        return cls(weight, str(meta.get("model_id", "")), str(meta.get("case_set", "")),
                   int(meta.get("seed", DEFAULT_SEED)), int(meta.get("trained_on", 0)),
                   tuple(str(i) for i in ids) if isinstance(ids, list) else ())


def load_checked(path: Path) -> tuple[QueryAdapter | None, str]:
    """The artifact at `path`, or None and one line saying why it is off (missing or damaged)."""
    try:
        return QueryAdapter.load(path), ""
    except AdapterError as exc:
        return None, f"query adapter off, plain dense scores used: {exc}"


# ---------------------------------------------------------------------------------------------- training


def _case_table(doc_case: np.ndarray, n_cases: int) -> np.ndarray:
    """Row numbers of each case's documents, padded with -1: cases × (most documents of one case)."""
    members: list[list[int]] = [[] for _ in range(n_cases)]
    for row, c in enumerate(doc_case.tolist()):
        members[c].append(row)
    width = max((len(m) for m in members), default=0) or 1
    table = np.full((n_cases, width), -1, dtype=np.int64)
    for c, m in enumerate(members):
        table[c, : len(m)] = m
    return table


def loss_and_grad(
    weight: np.ndarray,
    queries: np.ndarray,
    targets: np.ndarray,
    doc_vectors: np.ndarray,
    doc_case: np.ndarray,
    n_cases: int,
    lam: float,
    temperature: float = TEMPERATURE,
) -> tuple[float, np.ndarray]:
    """The training loss and its gradient with respect to W.

    Forward: z = q W, u = z / |z|, S = u Dᵀ, C[i, c] = max over c's documents of S, L = C / τ,
    loss = mean_i CE(L_i, y_i) + λ ‖W − I‖². Backward: dL = (softmax(L) − onehot) / n, dC = dL / τ, dS puts
    dC[i, c] on the argmax document of case c (first one on a tie), du = dS D, dz = (du − u (u·du)) / |z|,
    dW = qᵀ dz + 2λ (W − I)."""
    n, d = queries.shape
    z = queries @ weight
    r = np.clip(np.linalg.norm(z, axis=1, keepdims=True), 1e-12, None)
    u = z / r
    s = u @ doc_vectors.T  # n × docs
    table = _case_table(doc_case, n_cases)  # cases × most documents of a case, -1 = none
    padded = np.where(table >= 0, s[:, np.maximum(table, 0)], s.dtype.type(-np.inf))  # n × cases × docs
    best = np.argmax(padded, axis=2)  # the first of equal maxima: one document per (query, case)
    best_row = table[np.arange(n_cases)[None, :], best]  # n × cases; -1 for a case without documents
    cases = np.take_along_axis(padded, best[:, :, None], axis=2)[:, :, 0]
    cases = np.where(best_row >= 0, cases, s.dtype.type(-1e9))  # a case without documents never wins
    logits = cases / temperature
    logits -= logits.max(axis=1, keepdims=True)
    expl = np.exp(logits)
    prob = expl / expl.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    ce = float(-np.mean(np.log(np.clip(prob[rows, targets], 1e-300, None))))
    eye = np.eye(d, dtype=weight.dtype)
    loss = ce + lam * float(np.sum((weight - eye) ** 2))

    d_logits = prob.copy()
    d_logits[rows, targets] -= 1.0
    d_cases = (d_logits / (n * temperature)).astype(s.dtype)
    d_s = np.zeros_like(s)
    has = best_row >= 0  # each document belongs to one case: no (query, document) pair repeats
    d_s[np.broadcast_to(rows[:, None], best_row.shape)[has], best_row[has]] = d_cases[has]
    d_u = d_s @ doc_vectors
    d_z = (d_u - u * np.sum(u * d_u, axis=1, keepdims=True)) / r
    grad = queries.T @ d_z + 2.0 * lam * (weight - eye)
    return loss, grad


def train(
    queries: np.ndarray,
    case_positions: np.ndarray | list[int],
    doc_vectors: np.ndarray,
    doc_case: np.ndarray | list[int],
    *,
    lam: float = DEFAULT_LAMBDA,
    steps: int = DEFAULT_STEPS,
    seed: int = DEFAULT_SEED,
    lr: float = DEFAULT_LR,
    temperature: float = TEMPERATURE,
    model_id: str = "",
    case_set: str = "",
) -> QueryAdapter:
    """Fit W on (query embedding, case position) pairs against the index's document vectors (row j belongs
    to case doc_case[j]). Full batch Adam from the identity; `seed` is recorded (the fit itself has no
    randomness: the same inputs give the same W). Computed in float32 (twice as fast as float64 on the
    KB's size; the finite-difference test checks the gradient in float64)."""
    q = _normalise(np.asarray(queries, dtype=np.float32))
    y = np.asarray(case_positions, dtype=np.int64)
    docs = _normalise(np.asarray(doc_vectors, dtype=np.float32))
    owner = np.asarray(doc_case, dtype=np.int64)
    if q.ndim != 2 or docs.ndim != 2 or q.shape[1] != docs.shape[1]:
        raise ValueError(f"queries {q.shape} and documents {docs.shape} disagree on the dimension")
    if len(y) != len(q) or len(owner) != len(docs):
        raise ValueError("one case position per query and one case per document are needed")
    n_cases = int(owner.max()) + 1 if len(owner) else 0
    if len(q) == 0 or n_cases == 0 or y.min() < 0 or y.max() >= n_cases:
        raise ValueError("training needs queries whose case positions are cases of the documents")
    d = q.shape[1]
    w: np.ndarray = np.eye(d, dtype=np.float32)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    losses = []
    for t in range(1, steps + 1):
        loss, g = loss_and_grad(w, q, y, docs, owner, n_cases, lam, temperature)
        losses.append(loss)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w = (w - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps)).astype(np.float32)
    final, _ = loss_and_grad(w, q, y, docs, owner, n_cases, lam, temperature)
    losses.append(final)
    return QueryAdapter(w.astype(np.float32), model_id, case_set, seed, len(q), losses=tuple(losses))


__all__ = [
    "DEFAULT_ARTIFACT", "AdapterError", "QueryAdapter", "case_set_hash", "load_checked", "loss_and_grad", "train",
]
