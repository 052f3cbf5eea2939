"""Every Python probe of a host in ONE process of the target Python (issue 29: `diagnose --local` as fast
as it can be).

Separately, each probe pays the interpreter's start-up and python.torch and python.vllm_import each import
torch. The bundle is one `python -` whose program runs each probe in a forked child of its own (so a probe
that crashes, hangs or calls sys.exit touches no other; each keeps its own time limit, output and exit
status): the light probes (platform, package metadata, model files, HTTP) are forked at once, then torch
is imported ONCE and the probes that need it are forked from the process that holds it. The engine starts
the bundle first, beside the shell checks, and splits its answer back into one result per command; a
bundle that died before a probe answered gets that probe re-run on its own, so nothing is lost.

Stdlib only, Python 3.8 syntax: it runs in whatever Python the host's vLLM uses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bot.runner.transport import CommandResult

MARK = "@@vllm-doctor-section "
PRELOAD_ALLOW_S = 60.0  # the one `import torch` before the probes that need it are forked
_NEEDS_TORCH = re.compile(r"^\s*(?:import|from)\s+(?:torch|vllm)\b|\bimport vllm\b", re.M)

DRIVER = r'''
import json, os, signal, sys, tempfile, time

MARK = "@@vllm-doctor-section "


RUNNING = []


def _die_with_parent():
    """Linux: SIGKILL this section when the bundle's process dies (killed past its limit)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass


def _on_term(signum, frame):
    """`timeout` gave up on the bundle: take every running section's process group with it."""
    for run in RUNNING:
        try:
            os.killpg(run["pid"], signal.SIGKILL)
        except OSError:
            pass
    os._exit(128 + signum)


def _child(sec, out, err, ended):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _die_with_parent()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.argv = ["-"] + list(sec["args"])
    code = 0
    try:
        exec(compile(sec["source"], sec["file"], "exec"), {"__name__": "__main__", "__file__": sec["file"]})
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write("%s\n" % (exc.code,))
            code = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        ended.write(repr(time.time()).encode())
        ended.flush()
    except Exception:
        pass
    os._exit(code)


def _start(sec):
    out, err, ended = tempfile.TemporaryFile(), tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.time()
    pid = os.fork()
    if pid == 0:
        _child(sec, out, err, ended)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    run = {"sec": sec, "pid": pid, "out": out, "err": err, "ended": ended, "start": start}
    RUNNING.append(run)
    return run


def _read(f):
    f.seek(0)
    return f.read().decode("utf-8", "replace")


def _finish(run, status, timed_out):
    if status is None:
        rc = 124
    elif os.WIFSIGNALED(status):
        rc = -os.WTERMSIG(status)
    else:
        rc = os.WEXITSTATUS(status)
    try:
        end = float(_read(run["ended"]) or time.time())  # when the section itself ended, not when reaped
    except ValueError:
        end = time.time()
    RUNNING.remove(run)
    record = {"key": run["sec"]["key"], "rc": rc, "timed_out": timed_out, "stdout": _read(run["out"]),
              "stderr": _read(run["err"]), "seconds": round(end - run["start"], 3)}
    sys.stdout.write(MARK + json.dumps(record) + "\n")
    sys.stdout.flush()


def _collect(running, block):
    while running:
        for run in list(running):
            pid, status = os.waitpid(run["pid"], os.WNOHANG)
            if pid:
                running.remove(run)
                _finish(run, status, False)
            elif time.time() - run["start"] > run["sec"]["timeout"]:
                try:
                    os.killpg(run["pid"], signal.SIGKILL)
                except OSError:
                    pass
                os.waitpid(run["pid"], 0)
                running.remove(run)
                _finish(run, None, True)
        if not block:
            return
        time.sleep(0.01)


def main(sections):
    signal.signal(signal.SIGTERM, _on_term)
    light = [s for s in sections if not s["preload"]]
    heavy = [s for s in sections if s["preload"]]
    running = [_start(s) for s in light]
    if heavy:
        before = set(sys.modules)
        try:
            import torch  # noqa: F401  (once, for every probe that needs it)
        except BaseException:
            for name in set(sys.modules) - before:  # a half-imported torch must not leak into the probes
                del sys.modules[name]
        _collect(running, False)
        running += [_start(s) for s in heavy]
    _collect(running, True)
'''


@dataclass(frozen=True)
class Section:
    key: str
    file: str
    source: str
    args: tuple[str, ...]
    timeout_s: float

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "file": self.file, "source": self.source, "args": list(self.args),
                "timeout": self.timeout_s, "preload": bool(_NEEDS_TORCH.search(self.source))}


def program(sections: list[Section]) -> str:
    """The bundle's program, fed to `python -` on stdin."""
    return DRIVER + "\nmain(json.loads(" + repr(json.dumps([s.to_dict() for s in sections])) + "))\n"


def timeout_for(sections: list[Section]) -> float:
    """The probes run side by side: the slowest one's limit, plus the one torch import before it."""
    return max(s.timeout_s for s in sections) + PRELOAD_ALLOW_S


def split(res: CommandResult) -> dict[str, CommandResult]:
    """The bundle's answer as one CommandResult per section key; keys missing from it did not answer."""
    out: dict[str, CommandResult] = {}
    for line in res.stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            record = json.loads(line[len(MARK):])
        except ValueError:
            continue
        if not isinstance(record, dict) or "key" not in record:
            continue
        out[str(record["key"])] = CommandResult(
            int(record.get("rc", 1)), str(record.get("stdout", "")), str(record.get("stderr", "")),
            float(record.get("seconds", 0.0)),
        )
    return out
