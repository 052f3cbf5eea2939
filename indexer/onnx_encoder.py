"""The same MiniLM without torch: the transformer exported once to ONNX, run by onnxruntime, tokenised by
`tokenizers` from the model's tokenizer.json, then sentence-transformers' mean pooling and L2
normalisation in numpy. The only module that imports onnxruntime and tokenizers.

A cold query pays ~0.3 s (onnxruntime import + session) instead of ~6 s (torch + sentence-transformers).
The ONNX file is derived locally from the packaged model (`indexer.encoder.export_onnx`, torch, ~10 s, once
per machine and model) into `onnx_dir`, next to a sidecar JSON with its size, mtime and sha256 and the reference
embeddings of a few probe texts computed by torch. On every first use the size and mtime are compared (the
sha256 only when the mtime moved) and the probes are embedded again and must agree (cosine ≥
PROBE_MIN_COSINE): a missing, truncated or altered file is exported again (one warning); when that is not
possible (unwritable directory, exporter failing) the encoder answers through the torch path (one warning).
Vectors of the two paths agree to cosine ≥ 0.999 (tests/test_onnx_encoder.py), but an index built by one
path carries its model id (`…:onnx`) in the manifest, so switching paths rebuilds instead of mixing them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock
from filelock import Timeout as LockTimeout

from indexer.atomic import atomic_write_text
from indexer.encoder import (
    ONNX_INPUTS,
    ONNX_OPSET,
    EncoderUnavailable,
    SentenceTransformerEncoder,
    _dim_from_config,
    export_onnx,
    resolve_model_dir,
)

log = logging.getLogger(__name__)

BACKEND_SUFFIX = ":onnx"
PROBE_TEXTS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "两台机器跑分布式推理，启动以后就一直不动了",
)
PROBE_MIN_COSINE = 0.9999
EXPORT_LOCK_TIMEOUT_S = 600.0
DEFAULT_BATCH_SIZE = 32


class OnnxUnsupported(EncoderUnavailable):
    """This model cannot run on the ONNX path (its caller may use the torch path instead)."""


def onnx_unsupported(model_dir: Path) -> str:
    """Why this model directory cannot run on the ONNX path ("" when it can): it needs a tokenizer.json
    and sentence-transformers modules Transformer → mean Pooling (→ Normalize)."""
    if not (model_dir / "tokenizer.json").is_file():
        return "the model has no tokenizer.json"
    try:
        modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        pooling = next(m for m in modules if str(m.get("type", "")).endswith(".Pooling"))
        pool_cfg = json.loads((model_dir / pooling.get("path", "") / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, StopIteration, AttributeError, TypeError) as exc:
        return f"cannot read its sentence-transformers modules ({exc.__class__.__name__})"
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        return f"modules {kinds} (the ONNX path runs Transformer → Pooling → Normalize)"
    modes = {k for k, v in pool_cfg.items() if k.startswith("pooling_mode_") and v is True}
    if modes != {"pooling_mode_mean_tokens"}:
        return f"pooling {sorted(modes)} (the ONNX path does mean pooling)"
    return ""


def _max_seq_length(model_dir: Path) -> int:
    try:
        cfg = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
        return int(cfg["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 256


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class OnnxEncoder:
    """Encoder protocol (indexer.encoder.Encoder) on onnxruntime. Cheap to construct; the session opens on
    the first encode(), exporting the model first when `onnx_dir` has no valid copy."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        onnx_dir: str | os.PathLike[str] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ):
        self.model_path, base_id = resolve_model_dir(model_path)
        why = onnx_unsupported(self.model_path)
        if why:
            raise OnnxUnsupported(f"{self.model_path} cannot run on the ONNX path: {why}")
        self._model_id = base_id + BACKEND_SUFFIX
        fingerprint = base_id.rsplit(":", 1)[-1]
        directory = Path(onnx_dir).expanduser() if onnx_dir else self.model_path / ".onnx"
        self.onnx_path = directory / f"minilm-{fingerprint}-opset{ONNX_OPSET}.onnx"  # the graph (~100 KB)
        self.data_path = self.onnx_path.with_name(self.onnx_path.name + ".data")  # weights, memory-mapped
        self.sidecar_path = self.onnx_path.with_suffix(".json")
        self.batch_size = batch_size
        self.max_seq_length = _max_seq_length(self.model_path)
        self._config_dim = _dim_from_config(self.model_path)
        self._session: Any = None
        self._tokenizer: Any = None
        self._fallback: SentenceTransformerEncoder | None = None
        self._load_lock = threading.Lock()
        self.progress = False  # a progress bar while embedding many texts (`vllm-doctor index` on a terminal)
        self.exported = False  # True when this process exported the file (tests, `vllm-doctor index`)

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._config_dim if self._config_dim is not None else 384

    @property
    def loaded(self) -> bool:
        return self._session is not None or self._fallback is not None

    @property
    def backend(self) -> str:
        """"onnx", or "torch" once the ONNX file could not be made usable (then every encode goes there)."""
        return "torch" if self._fallback is not None else "onnx"

    # ------------------------------------------------------------------ loading

    def _tokenizer_or_load(self) -> Any:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(self.model_path / "tokenizer.json"))
            # sentence-transformers' call: truncation to max_seq_length, padding to the longest in the batch
            tok.enable_truncation(max_length=self.max_seq_length)
            pad_token = "[PAD]" if tok.token_to_id("[PAD]") is not None else None
            pad_id = tok.token_to_id(pad_token) if pad_token else 0
            tok.enable_padding(pad_id=pad_id or 0, pad_token=pad_token or "[PAD]")
            self._tokenizer = tok
        return self._tokenizer

    def _load(self) -> None:
        with self._load_lock:
            if self._session is not None or self._fallback is not None:
                return
            tokenizer = self._tokenizer_or_load()
            problem = self._open_checked(tokenizer)
            if not problem:
                return
            if problem != "missing":
                log.warning("search model: ONNX file %s %s; exporting it again from %s",
                            self.onnx_path, problem, self.model_path)
            else:
                log.info("search model: exporting %s to ONNX once (%s)", self._model_id.split(":")[0], self.onnx_path)
            why = self._export(tokenizer)
            if not why:
                why = self._open_checked(tokenizer)
            if why:
                log.warning("search model: the ONNX path is unavailable (%s); using the torch path", why)
                self._fallback = SentenceTransformerEncoder(self.model_path)

    def _probe_ids(self, tokenizer: Any) -> list[list[int]]:
        return [list(enc.ids) for enc in (tokenizer.encode(t) for t in PROBE_TEXTS)]

    def _open_checked(self, tokenizer: Any) -> str:
        """Open the session and check the probes; "" when usable, else why ("missing" for no file)."""
        import onnxruntime as ort

        if not all(p.is_file() for p in (self.onnx_path, self.data_path, self.sidecar_path)):
            return "missing"
        try:
            meta = json.loads(self.sidecar_path.read_text(encoding="utf-8"))
            files = meta["files"]
            moved = False
            for path in (self.onnx_path, self.data_path):
                expected, stat = files[path.name], path.stat()
                if stat.st_size != int(expected["bytes"]):
                    size = f"{stat.st_size} bytes in {path.name}, expected {expected['bytes']}"
                    return f"has {size} (truncated or replaced)"
                if stat.st_mtime_ns != int(expected["mtime_ns"]):
                    # written since the export (or copied): the checksum decides (~0.1 s, only then)
                    if _sha256(path) != expected["sha256"]:
                        return f"does not match its checksum ({path.name} altered in place)"
                    expected["mtime_ns"], moved = stat.st_mtime_ns, True
            if moved:
                try:
                    atomic_write_text(self.sidecar_path, json.dumps(meta) + "\n")
                except OSError:
                    pass  # read-only: the checksum is computed again next time
            reference = np.asarray(meta["probe_vectors"], dtype=np.float32)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"has an unreadable sidecar ({exc.__class__.__name__})"
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: no graph-optimisation chatter on stderr
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # shared CPUs: no busy-wait
        try:
            session = ort.InferenceSession(str(self.onnx_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf/RuntimeException types
            return f"cannot be loaded ({str(exc).splitlines()[0][:160] if str(exc) else exc.__class__.__name__})"
        try:
            probes = self._run(session, [self._single(ids) for ids in self._probe_ids(tokenizer)])
        except Exception as exc:  # a graph that loads but fails to run is as damaged as one that does not load
            return f"fails to run ({exc.__class__.__name__})"
        if reference.shape != probes.shape:
            return f"gives vectors of shape {probes.shape}, expected {reference.shape}"
        cosine = float(np.min(np.sum(reference * probes, axis=1)))
        if not cosine >= PROBE_MIN_COSINE:
            return f"disagrees with the model on its probe texts (cosine {cosine:.4f})"
        self._session = session
        return ""

    def _export(self, tokenizer: Any) -> str:
        """Export under a file lock (parallel first runs export once); "" on success, else why not."""
        directory = self.onnx_path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not os.access(directory, os.W_OK):
                raise PermissionError(13, "read-only directory")
            lock = FileLock(str(directory / ".export.lock"), timeout=EXPORT_LOCK_TIMEOUT_S)
            lock.acquire()
        except LockTimeout:
            return f"another process has been exporting into {directory} for {EXPORT_LOCK_TIMEOUT_S:.0f} s"
        except OSError as exc:
            return f"cannot write to {directory} ({exc.strerror or exc})"
        try:
            if self._open_checked(tokenizer) == "":
                return ""  # another process exported it while we waited
            self._session = None
            started = time.perf_counter()
            tmp = Path(tempfile.mkdtemp(prefix=".export-", suffix=".tmp", dir=directory))
            try:
                reference = export_onnx(self.model_path, tmp / self.onnx_path.name, self._probe_ids(tokenizer))
                # weights first, graph second, sidecar last: until the sidecar names them, they are not trusted
                os.replace(tmp / self.data_path.name, self.data_path)
                os.replace(tmp / self.onnx_path.name, self.onnx_path)
                files = {}
                for path in (self.onnx_path, self.data_path):
                    stat = path.stat()
                    files[path.name] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(path)}
                meta = {
                    "model_id": self._model_id,
                    "from": str(self.model_path),
                    "opset": ONNX_OPSET,
                    "inputs": list(ONNX_INPUTS),
                    "files": files,
                    "probe_texts": list(PROBE_TEXTS),
                    "probe_vectors": reference,
                    "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                atomic_write_text(self.sidecar_path, json.dumps(meta) + "\n")
            except EncoderUnavailable as exc:
                return str(exc)
            except Exception as exc:  # torch's exporter raises many types; the fallback is the torch path
                return f"export failed ({exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            self.exported = True
            log.info("search model: exported to %s in %.1f s", self.onnx_path, time.perf_counter() - started)
            return ""
        finally:
            lock.release()

    def ensure_ready(self) -> str:
        """Open (exporting when needed) now; returns the backend in use ("onnx" or "torch")."""
        self._load()
        return self.backend

    # ------------------------------------------------------------------ encoding

    @staticmethod
    def _single(ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        arr = np.asarray([ids], dtype=np.int64)
        return arr, np.ones_like(arr)

    @staticmethod
    def _run(session: Any, batches: list[tuple[np.ndarray, np.ndarray]],
             advance: Callable[[int], None] | None = None) -> np.ndarray:
        out = []
        for ids, mask in batches:
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(["last_hidden_state"], feeds)[0]
            weights = mask[..., None].astype(np.float32)
            summed = (hidden * weights).sum(axis=1)
            vectors = summed / np.clip(weights.sum(axis=1), 1e-9, None)  # sentence-transformers' mean pooling
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            out.append(vectors / np.clip(norms, 1e-12, None))  # torch.nn.functional.normalize's eps
            if advance is not None:
                advance(len(ids))
        return np.vstack(out).astype(np.float32, copy=False)

    def _run_with_bar(self, batches: list[tuple[np.ndarray, np.ndarray]], total: int) -> np.ndarray:
        """The same vectors under a rich progress bar on stderr (`vllm-doctor index` on a terminal only)."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        columns = (TextColumn("embedding KB documents"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
            task = bar.add_task("embed", total=total)
            return self._run(self._session, batches, lambda n: bar.advance(task, n))

    def encode(self, texts: list[str]) -> np.ndarray:
        self._load()
        if self._fallback is not None:
            return self._fallback.encode(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tokenizer = self._tokenizer_or_load()
        encodings = tokenizer.encode_batch([str(t) for t in texts])
        lengths = np.asarray([sum(e.attention_mask) for e in encodings])
        order = np.argsort(-lengths, kind="stable")  # like sentence-transformers: batches of similar length
        batches = []
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            width = int(lengths[rows].max())
            ids = np.asarray([encodings[r].ids[:width] for r in rows], dtype=np.int64)
            mask = np.asarray([encodings[r].attention_mask[:width] for r in rows], dtype=np.int64)
            batches.append((ids, mask))
        if self.progress and len(texts) > self.batch_size:
            vectors = self._run_with_bar(batches, len(texts))
        else:
            vectors = self._run(self._session, batches)
        result = np.empty_like(vectors)
        result[order] = vectors
        return np.ascontiguousarray(result)


__all__ = ["BACKEND_SUFFIX", "OnnxEncoder", "OnnxUnsupported", "onnx_unsupported"]
