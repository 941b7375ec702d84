"""``extractor serve`` run as a child process on a free loopback port, always stopped again."""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from extractor.library_pages import settle_library_pages

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environ() -> dict[str, str]:
    """The environment minus anything that would move the server off its defaults.

    ``EXTRACTOR_*`` variables would change the settings under test, and ``OMP_THREAD_LIMIT``
    makes faster-whisper refuse to load (Tesseract gets its own limit inside the server).
    """
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EXTRACTOR_") and k != "OMP_THREAD_LIMIT"
    }


class Server:
    """One ``extractor serve`` process group: the gunicorn master and its workers."""

    def __init__(
        self, *flags: str, log_dir: Path, name: str, ready_timeout: float = 240.0,
        pythonpath: str | None = None, log_level: str = "warning",
    ) -> None:  # fmt: skip
        self.log_level = log_level  # "debug": the per-window stage times bench/stages.py reads
        self.pythonpath = pythonpath  # serve the extractor package found here (a comparison)
        self.port = free_port()
        self.flags = flags
        self.name = name
        self.log_path = log_dir / f"server-{name}.log"
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def start(self) -> None:
        """Start the server without waiting; ``wait_ready`` blocks until every worker is ready."""
        command = [
            sys.executable,
            "-m",
            "extractor.cli",
            "serve",
            "--bind",
            f"{self.host}:{self.port}",
        ]
        command += [*self.flags, "--log-level", self.log_level]
        log.info("starting server %s: %s", self.name, " ".join(command[2:]))
        # Its RSS as on a machine where pip did not just write the libraries (bench/pagecache.py).
        settle_library_pages()
        with self.log_path.open("wb") as sink:
            # A session of its own, so stopping it reaches every worker and Tesseract child.
            self.process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, env=self.environ(),
                start_new_session=True, cwd=self.pythonpath,  # `-m` puts the cwd on sys.path
            )  # fmt: skip

    def environ(self) -> dict[str, str]:
        env = clean_environ()
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [self.pythonpath, env.get("PYTHONPATH")])
            )
        return env

    def wait_ready(self, workers: int) -> float:
        """Seconds until /readyz answers 200 and ``workers`` workers have started."""
        started = time.monotonic()
        while time.monotonic() - started < self.ready_timeout:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server {self.name} exited; see {self.log_path}")
            # A worker accepts only once its engines are loaded, so one 200 says little about
            # the others: also wait until no worker is still busy loading.
            if (
                len(self.worker_pids()) >= workers
                and self.get("/readyz")[0] == 200
                and self.quiet()
            ):
                return time.monotonic() - started
            time.sleep(0.25)
        raise RuntimeError(f"server {self.name} not ready after {self.ready_timeout:.0f} s")

    def quiet(self, window: float = 1.0) -> bool:
        """Whether the workers used under 5% of a core over ``window`` seconds."""
        before = sum(cpu_seconds(pid) for pid in self.worker_pids())
        time.sleep(window)
        return sum(cpu_seconds(pid) for pid in self.worker_pids()) - before < 0.05 * window

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, float]:
        """Status and seconds of one GET (status 0: no answer)."""
        started = time.perf_counter()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request("GET", path, headers={"Connection": "close"})
            response = connection.getresponse()
            response.read()
            return response.status, time.perf_counter() - started
        except OSError:
            return 0, time.perf_counter() - started
        finally:
            connection.close()

    def worker_pids(self) -> list[int]:
        """The gunicorn workers: the master's direct children (Tesseract runs one level below)."""
        if self.process is None:
            return []
        return children(self.process.pid)

    def stop(self) -> None:
        """SIGTERM the whole group, then SIGKILL what is left after a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        os.killpg(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # workers that outlived their master
            os.killpg(group, signal.SIGKILL)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def group_status_sums(group: int, *fields: str) -> dict[str, int]:
    """Sums of /proc/<pid>/status figures (e.g. VmRSS in kB, Threads) over process group ``group``.

    gunicorn's master and workers share one group, so this is a whole server's figure.
    """
    sums = dict.fromkeys(fields, 0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            # Fields after the command name (which may hold spaces): state ppid pgrp ...
            if int(stat.rsplit(")", 1)[1].split()[2]) != group:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name in sums:
                sums[name] += int(value.split()[0])
    return sums


def memory_mb(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of /proc/<pid>/status (VmRSS: now, VmHWM: peak) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise LookupError(f"{field} not in /proc/{pid}/status")


def private_mb(pid: int) -> float:
    """The memory ``pid`` holds alone (Private_Clean + Private_Dirty of smaps_rollup), in MB.

    What a child process adds to its parent's: a child between fork and exec still shares all
    of its parent's pages and would show the parent's whole RSS as its own.
    """
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1])
    return total / 1024  # kB


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far (0 once it has gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux: ``5`` into clear_refs), to take a section's peak."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def machine_busy_seconds() -> float:
    """CPU seconds all cores of the machine have spent busy since boot (steal included)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` plus its reaped children (the Tesseract runs of a worker)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
