"""Stand-in for vllm's compiled ops: a profile can make it fail like an ABI mismatch does."""

import os

for _d in os.environ.get("FAKEGPU_DIRS", "").split(":"):
    _path = os.path.join(_d, "vllm_c_error.txt")
    if _d and os.path.exists(_path):
        with open(_path) as _f:
            raise ImportError(_f.read().strip())
