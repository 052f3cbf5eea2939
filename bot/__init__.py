"""vllm-doctor: diagnose vLLM deployment failures from pasted logs and host checks."""

__version__ = "0.1.0"
