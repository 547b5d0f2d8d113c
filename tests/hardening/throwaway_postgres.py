"""A PostgreSQL server of a test's own (``initdb`` + ``pg_ctl`` in a temporary directory, on a free port).

For tests that stop and start the database: never the shared server other tests and CI use. ``initdb`` refuses
to run as root, so as root every command runs as the ``postgres`` user (``runuser``) on a directory it owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

PASSWORD = "throwaway-Pa55word-7f3e"  # trust authentication ignores it; it is there to be kept out of logs


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class ThrowawayPostgres:
    def __init__(self, root: Path) -> None:
        initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if initdb is None or pg_ctl is None:
            message = "initdb/pg_ctl not found (PostgreSQL server binaries)"
            if os.environ.get("KVCAP_REQUIRE_POSTGRES"):
                pytest.fail(message)
            pytest.skip(message)
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = root
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            for path in (root,):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def url(self, *, password: str | None = PASSWORD) -> str:
        secret = f":{password}" if password else ""
        return f"postgresql+psycopg://postgres{secret}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr}\n{log[-2000:]}")

    def init(self) -> None:
        self._run(
            self.initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "30", "start"
        )

    def stop(self) -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def _pids(self) -> list[int]:
        """The postmaster and every backend and auxiliary process it started."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        )
        return [postmaster, *(int(pid) for pid in children.stdout.split())]

    def freeze(self) -> None:
        """SIGSTOP the whole server: connections are accepted by the kernel but nothing ever answers."""
        for pid in self._pids():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self._pids():
            os.kill(pid, signal.SIGCONT)
