"""Stand-in for vllm's compiled ops: a profile can make it fail like an ABI mismatch does
(vllm_c_error.txt: the ImportError message), or crash like a build for another CPU does
(vllm_c_signal.txt: a signal name such as SIGILL, raised for real so the process dies by it)."""

import os
import signal

for _d in os.environ.get("FAKEGPU_DIRS", "").split(":"):
    _path = os.path.join(_d, "vllm_c_error.txt")
    if _d and os.path.exists(_path):
        with open(_path) as _f:
            raise ImportError(_f.read().strip())
    _path = os.path.join(_d, "vllm_c_signal.txt")
    if _d and os.path.exists(_path):
        with open(_path) as _f:
            _sig = getattr(signal, _f.read().strip())
        signal.signal(_sig, signal.SIG_DFL)
        os.kill(os.getpid(), _sig)
