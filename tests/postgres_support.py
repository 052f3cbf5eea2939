"""A real, throw-away PostgreSQL server for tests and benchmarks (Debian `postgresql`, any version).

    server = start_postgres(tmp_dir)      # initdb + pg_ctl on a free high port, 127.0.0.1 only
    url = server.create_database("t1")    # postgresql://doctor@127.0.0.1:PORT/t1
    server.stop()                         # pg_ctl stop, by data directory (never by process name)

The server refuses to run as root: as root the data directory is handed to the `postgres` user and
every server binary runs through `runuser -u postgres`. Missing binaries skip the tests, except on CI
(CI=true), where they fail loudly: CI must install postgresql (scripts/system-deps.sh).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "doctor"


def postgres_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def require_postgres() -> Path:
    bin_dir = postgres_bin_dir()
    if bin_dir is not None:
        return bin_dir
    message = "PostgreSQL server binaries not installed (apt-get install -y postgresql)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + "; CI must install them", pytrace=False)
    pytest.skip(message)


def _free_port() -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port >= 20000:
            return port
    raise RuntimeError("no free high port")


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PostgresServer:
    directory: Path
    bin_dir: Path
    port: int
    options: str = ""

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        out = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
             "-p", str(self.port), "-U", USER, "-d", database, "-c", sql],
            check=True, capture_output=True, text=True, timeout=60,
        )
        return out.stdout.strip()

    def create_database(self, name: str) -> str:
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def pause(self) -> None:
        """Stop the server, keeping its data (an outage); `resume()` starts it again on the same port."""
        subprocess.run(_as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"),
                                        "stop", "-m", "fast", "-w"]), check=True, capture_output=True, timeout=60)

    def resume(self) -> None:
        subprocess.run(_as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"), "-l",
                                        str(self.directory / "server.log"), "-o", self.options, "-w", "start"]),
                       check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        subprocess.run(_as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"),
                                        "stop", "-m", "fast", "-w"]), check=False, capture_output=True, timeout=60)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_postgres(directory: Path | None = None) -> PostgresServer:
    """`directory` must be reachable by the postgres user when run as root; by default a new one in /tmp
    (pytest's own temp root is private to root)."""
    bin_dir = require_postgres()
    directory = Path(tempfile.mkdtemp(prefix="vllm-doctor-pg-")) if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
        os.chmod(directory, 0o700)
    data = directory / "data"
    subprocess.run(_as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER,
                                    "-E", "UTF8", "--no-sync"]), check=True, capture_output=True, timeout=120)
    port = _free_port()
    options = (f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off "
               "-c max_connections=200 -c shared_buffers=32MB")
    started = subprocess.run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-l",
                                              str(directory / "server.log"), "-o", options, "-w", "start"]),
                             capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        log = (directory / "server.log").read_text(errors="replace") if (directory / "server.log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {started.stdout}{started.stderr}{log[-2000:]}")
    server = PostgresServer(directory, bin_dir, port, options)
    deadline = time.monotonic() + 30
    while True:
        try:
            server.psql("SELECT 1")
            return server
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                server.stop()
                raise


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    require_postgres()
    server = start_postgres()
    yield server
    server.stop()


_counter = [0]


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's server; dropped (pools closed) afterwards."""
    from bot.storage.backends import forget

    _counter[0] += 1
    name = f"t{os.getpid()}_{_counter[0]}"
    url = postgres_server.create_database(name)
    yield url
    forget(url)
    postgres_server.drop_database(name)
