# The Python that runs vLLM: version, C library, architecture, virtualenv. Prints one JSON line.
import json
import platform
import sys

print(json.dumps({
    "version": platform.python_version(),
    "implementation": platform.python_implementation(),
    "libc": list(platform.libc_ver()),
    "machine": platform.machine(),
    "executable": sys.executable,
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
}))
