"""What never keys a cluster or makes a draft (bot/kb_growth/clusters.py): traceback frame and source lines,
also under a worker prefix, and signatures whose only literal text is a library's message template, exception
class names or a path's directories (leave-cases-out on dev.jsonl showed each joining two failures)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.diagnosis.distill import distill
from bot.diagnosis.match import SignatureScanner
from bot.kb_growth.clusters import (
    DEFAULT_SIMILARITY,
    MIN_DRAFT_LITERAL,
    Clusters,
    Unknown,
    cluster_root,
    code_line,
    contains_message,
    draft_of,
    literal_chars,
    shape_of,
)
from bot.kb_growth.lint import cleaned_lines, healthy_logs

WORKER = "(VllmWorker rank={r} pid={p}) ERROR 06-22 11:05:45 [multiproc_executor.py:527] "


@pytest.mark.parametrize("line", [
    WORKER.format(r=0, p=21649) + "    return self._call_impl(*args, **kwargs)",
    "^[[1;36m" + WORKER.format(r=1, p=776294) + "    return forward_call(*args, **kwargs)",
    WORKER.format(r=0, p=442) + "    output = self.model_runner.execute_model(scheduler_output,",
    '  File "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1762, in _call_impl',
    'ERROR 08-03 11:35:28 [core.py:519]     engine_core = EngineCoreProc(*args, **kwargs)',
    "    raise self._format_exception(outputs) from None",
    "from vllm import LLM",
    "            ^^^^^^^^^^^^^^^^^^^^^",
    '>           raise RuntimeError("NIXL is not available")',  # pytest's failing source line
])
def test_frame_and_source_lines_are_code(line: str) -> None:
    assert code_line(line)


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    'ValueError("type fp8e4nv not supported in this architecture. The supported fp8 dtypes are (\'fp8e4b15\',)")',
    "ERROR 06-22 11:05:45 [core.py:527] EngineCore failed to start.",
    "import error: libfoo missing",
    "if you see this, the tokenizer is broken",
    "Input prompt (36893 tokens) is too long and exceeds limit of 1000",
])
def test_messages_are_not_code(line: str) -> None:
    assert not code_line(line)


def test_a_source_line_under_a_worker_prefix_is_never_the_cluster_root(doctor: Any) -> None:
    """root.py may read the worker's source line as the root; the cluster key is then the exception below."""
    frame = WORKER.format(r=0, p=1) + "    return forward_call(*args, **kwargs)"
    log = "\n".join([
        WORKER.format(r=0, p=1) + "Traceback (most recent call last):",
        WORKER.format(r=0, p=1) + '  File "/x/torch/nn/modules/module.py", line 1762, in _call_impl',
        frame,
        WORKER.format(r=0, p=1) + "RuntimeError: staging ring of plugin fastpath could not pin 512 pages on numa node 3",
    ])
    distilled = distill(log)
    scanner = SignatureScanner(doctor.kb.cases)
    root = cluster_root(distilled, scanner, frame)
    assert root is not None and "staging ring of plugin fastpath" in root and "forward_call" not in root


@pytest.mark.parametrize("pattern", [
    r"ImportError:.*?\.so\..*?: cannot open shared object file: No such file or directory",
    r"RuntimeError.*?: CUDA error:.*?encountered",
    r"torch\.distributed\.DistBackendError: NCCL error in:.*?/torch/csrc/distributed/c\d+d/NCCLUtils\.hpp:.*?"
    r"\(run with NCCL_DEBUG=.*?for details\),",
    r"json\.decoder\.JSONDecodeError:.*?: line.*?column \d+ \(char",
    r"error: subprocess-exited-with-error",
    r"ImportError: cannot import name '.*?' from.*?'vllm.*?' \(",
    r"torch.*?\.OutOfMemoryError: CUDA out of memory\. Tried to allocate.*?\. GPU \d+ has a total.*?GiB of which.*?"
    r"is free\..*?has.*?GiB memory in use\. Of the allocated memory.*?GiB is allocated by PyTorch, and.*?MiB is "
    r"reserved by PyTorch but unallocated\. If reserved but unallocated memory is large try setting.*?to avoid "
    r"fragmentation\. +See documentation for Memory Management",
])
def test_a_library_message_template_is_not_literal_text(pattern: str) -> None:
    assert literal_chars(pattern) < MIN_DRAFT_LITERAL


@pytest.mark.parametrize("pattern", [
    r"CUDA error: an illegal memory access was encountered",  # the failure CUDA names stays
    r"ImportError: /.*?/lib/python\d+\.\d+/.*?-packages/vllm/_C\.cpython-\d+-x\d+_\d+-linux-gnu\.so: undefined symbol:",
    r"ImportError: cannot import name 'get_vllm_engine' from 'swift\.llm'",  # the names around the template
    r"Failed to initialize NVML: Driver/library version mismatch",  # one slash is a word, not a path
    r"RuntimeError: CUDA out of memory occurred when warming up sampler with",
])
def test_the_failure_a_library_names_is_literal_text(pattern: str) -> None:
    assert literal_chars(pattern) >= MIN_DRAFT_LITERAL


@pytest.mark.parametrize("roots", [
    ["ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
     "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"],
    ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
     "RuntimeError: Error in model execution: CUDA error: an illegal memory access was encountered"],
])
def test_two_failures_of_one_library_family_draft_nothing(doctor: Any, roots: list[str]) -> None:
    """Before, each pair merged (close embeddings, shared words) and was drafted on the shared template alone."""
    clusters = Clusters(doctor.index.encoder().encode, DEFAULT_SIMILARITY)
    cluster = None
    for n, root in enumerate(roots):
        shape = shape_of(root) or root  # a shape too generic for a key still may not draft through a merge
        cluster = clusters.add(Unknown(n, root, shape, f"thread-{n}", tuple(cleaned_lines(root)), None))
    assert cluster is not None
    assert draft_of(cluster, min_pastes=2, healthy=healthy_logs(None), examples=[]) is None


def test_worker_frame_lines_of_two_crashes_draft_nothing(doctor: Any) -> None:
    """Two unrelated crashes whose stacks pass the same torch function: their frame lines key no cluster."""
    scanner = SignatureScanner(doctor.kb.cases)
    roots = []
    for n, (rank, pid, err) in enumerate([(0, 21649, "AttributeError: 'Foo' object has no attribute 'bar_baz_qux'"),
                                          (1, 776294, "RuntimeError: staging ring of plugin fastpath could not pin")]):
        frame = WORKER.format(r=rank, p=pid) + "    return forward_call(*args, **kwargs)"
        log = "\n".join([WORKER.format(r=rank, p=pid) + "Traceback (most recent call last):", frame,
                         WORKER.format(r=rank, p=pid) + err + f" {n}"])
        roots.append(cluster_root(distill(log), scanner, frame))
    assert all(r is not None and "forward_call" not in r for r in roots)


def test_a_root_line_holding_another_whole_message_under_a_wrapper_joins_its_cluster() -> None:
    """A client's wrapper around the server's error (embeddings far apart: the wrapper's words) joins the
    cluster of the bare error; the draft is the shared message and fires on both."""
    roots = ["ValueError: BitAndBytes with enforce_eager = False is not supported yet.",
             "openai.InternalServerError: modal-http: internal server error: status Failure: "
             "ValueError('BitAndBytes with enforce_eager = False is not supported yet.')"]
    clusters = Clusters(None)  # no embeddings: containment alone joins them
    cluster = None
    for n, root in enumerate(roots):
        shape = shape_of(root)
        assert shape is not None
        cluster = clusters.add(Unknown(n, root, shape, f"thread-{n}", tuple(cleaned_lines(root)), None))
    assert len(clusters.clusters) == 1 and cluster is not None
    draft = draft_of(cluster, min_pastes=2, healthy=healthy_logs(None), examples=[])
    assert draft is not None and "BitAndBytes with enforce_eager = False is not supported yet" in draft.signature


def test_a_short_message_inside_another_line_joins_nothing() -> None:
    """Containment counts only for a message with MIN_DRAFT_LITERAL literal characters of its own."""
    assert not contains_message("RuntimeError: NIXL is not available (see the log above)", r"NIXL is not available")
    assert not contains_message("ValueError: x failed: CUDA error: an unknown error encountered", r"CUDA error: .*")
    assert contains_message("status Failure: ValueError('BitAndBytes with enforce_eager = False is not supported yet')",
                            r"ValueError: BitAndBytes with enforce_eager = False is not supported yet")


@pytest.mark.parametrize("dead", [
    "CRITICAL 11-20 19:56:18 [launcher.py:99] MQLLMEngine is already dead",
    "ERROR 11-20 19:56:18 [client.py:282] RuntimeError('Engine loop has died')",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
])
def test_a_line_saying_the_engine_died_is_never_the_cluster_root(doctor: Any, dead: str) -> None:
    log = "\n".join([
        "ERROR 11-20 19:56:17 [engine.py:160] RuntimeError: staging ring of plugin fastpath could not pin 512 pages",
        dead,
    ])
    root = cluster_root(distill(log), SignatureScanner(doctor.kb.cases), dead)
    assert root is not None and "staging ring of plugin fastpath" in root
