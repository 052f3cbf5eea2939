"""Stand-in vllm package for fake GPU hosts: imports torch first, like the real one."""

import torch  # noqa: F401

__version__ = "0.11.0"
