# Load vLLM the way the server does, in a child process of this (separate, time-limited) probe:
# `import vllm`, then the current platform's own kernel loader. The CPU build picks _C_AVX512 or _C_AVX2
# for this CPU itself, the CUDA build imports _C; importing vllm._C directly would test a library the
# server never loads. An ABI mismatch shows up here as "undefined symbol", a build for another CPU as a
# crash by SIGILL; the child's crash is reported, not lost. Prints one JSON line after whatever vLLM logs.
# Python 3.8+ syntax, stdlib only.
import json
import os
import signal
import subprocess
import sys
import tempfile

CHILD = r'''
import json, logging, sys, time, traceback

class Failures(logging.Handler):
    """The platform loaders log a failed kernel import as a warning instead of raising."""
    def __init__(self):
        logging.Handler.__init__(self, logging.WARNING)
        self.messages = []
    def emit(self, record):
        message = record.getMessage()
        if "Failed to import" in message:
            self.messages.append(message)

start = time.time()
out = {"ok": False}
failures = Failures()
try:
    import vllm
    out["version"] = getattr(vllm, "__version__", None)
    logging.getLogger("vllm").addHandler(failures)
    try:
        from vllm.platforms import current_platform
    except ImportError:
        current_platform = None
    loader = getattr(current_platform, "import_kernels", None)
    if loader is None:  # vLLM before the platform loader: the CUDA build's extension is all there is
        import vllm._C  # noqa: F401
        out["loader"] = "import vllm._C"
    else:
        out["loader"] = "%s.import_kernels()" % type(current_platform).__name__
        loader()
    if failures.messages:
        out["error"] = failures.messages[0].splitlines()[0][:500]
    else:
        out["ok"] = True
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        out["where"] = "%s:%s" % (frames[-1].filename, frames[-1].lineno)
out["seconds"] = round(time.time() - start, 2)
sys.stdout.write("\n" + json.dumps(out) + "\n")
'''


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_child():
    """(exit status, stdout, stderr) of CHILD in a process of its own. When torch is already imported (the
    runner's probe bundle imports it once for every probe) the child is a fork of this process, which
    skips a second interpreter start and torch import; otherwise a fresh `python -c`."""
    if "torch" in sys.modules and hasattr(os, "fork"):
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                exec(compile(CHILD, "<import vllm>", "exec"), {"__name__": "__main__"})
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        status = os.waitpid(pid, 0)[1]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        out.seek(0)
        err.seek(0)
        return code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True)
    return child.returncode, child.stdout.decode("utf-8", "replace"), child.stderr.decode("utf-8", "replace")


returncode, stdout, stderr = run_child()
sys.stderr.write(stderr[-20000:])
if returncode < 0:
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "signal %d" % number
    tail = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    out = {"ok": False, "signal": name, "error": "import vllm died with %s" % name}
    if tail:
        out["where"] = tail[-1][:300]
else:
    logs = stdout.rstrip()
    logs = logs[: logs.rfind("\n{")] if "\n{" in logs else logs  # the child's own result line is re-printed below
    sys.stdout.write(logs[-20000:])
    out = last_json(stdout) or {"ok": False, "error": "the import printed no result (exit status %d)" % returncode}
sys.stdout.write("\n" + json.dumps(out) + "\n")
