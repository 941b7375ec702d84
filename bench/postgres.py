"""A throwaway PostgreSQL cluster from the machine's own binaries, for benches and tests.

Started in a temporary folder (as the ``postgres`` OS user when we are root: initdb refuses
root) on a free loopback port, trusting local users, with durability off (fsync, synchronous
commit, full-page writes): it lives for one run and is thrown away.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from glob import glob
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on right now, on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin(name: str) -> str | None:
    """A PostgreSQL server binary from PATH or Debian's versioned folders, newest first."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def postgres_installed() -> bool:
    """Whether the server binaries a :class:`PostgresCluster` needs are there."""
    return bool(postgres_bin("initdb") and postgres_bin("pg_ctl"))


class PostgresCluster:
    """A PostgreSQL cluster in a temporary folder, on a free loopback port; ``url`` reaches its
    ``postgres`` database as the ``postgres`` superuser; ``stop()`` removes it all."""

    def __init__(self) -> None:
        initdb, pg_ctl = postgres_bin("initdb"), postgres_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.pg_ctl = pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="labeling-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run([initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run([pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                   "-w", "start"])  # fmt: skip
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            [*self.as_user, *command], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} failed: {done.stdout}\n{done.stderr}")

    def stop(self) -> None:
        try:
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
