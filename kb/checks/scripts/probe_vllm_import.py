# `import vllm, vllm._C` in this (separate, time-limited) process: an ABI mismatch shows up here as
# "undefined symbol" instead of at server start. Prints one JSON line after whatever vLLM logs.
import json
import sys
import time
import traceback

start = time.time()
out = {"ok": False}
try:
    import vllm

    out["version"] = getattr(vllm, "__version__", None)
    import vllm._C  # noqa: F401

    out["ok"] = True
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        out["where"] = "%s:%s" % (frames[-1].filename, frames[-1].lineno)
out["seconds"] = round(time.time() - start, 2)
sys.stdout.write("\n" + json.dumps(out) + "\n")
