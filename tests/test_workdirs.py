"""Request files live in a directory per process, and a killed process's directory is swept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import start_server, stop_server

from extractor import samples
from extractor.media import workdirs


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_request_directory_lives_inside_the_process_directory_and_goes_with_it(
    tmp_path: Path,
) -> None:
    with workdirs.request_workdir(str(tmp_path)) as first:
        with workdirs.request_workdir(str(tmp_path)) as second:
            (first / "upload").write_bytes(b"x")
            assert first.parent == second.parent == workdirs.process_dir(str(tmp_path))
            assert first.parent.name.startswith(f"extractor-{os.getpid()}-")
        assert not second.exists() and first.exists()  # one request ending leaves the other's
    assert list(tmp_path.iterdir()) == []


def test_a_request_made_while_another_removes_the_process_directory_gets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process directory exists when this request's mkdir runs and is gone right after:
    another request of the process ended and removed it, empty. An asynchronous job that
    started as its submit request ended failed this way ('internal error'): mkdir(exist_ok)
    raised FileExistsError once its own check found nothing. The OS cannot be made to
    interleave the two threads on demand, so the other request's removal is done here,
    between the mkdir that finds the directory and what comes after."""
    mine = workdirs.process_dir(str(tmp_path))
    real_mkdir = os.mkdir
    interfered: list[str] = []

    def mkdir_then_removed(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        if Path(path) == mine and not interfered:
            interfered.append(str(path))
            mine.rmdir()  # the other request's cleanup, just after our mkdir found it
            raise FileExistsError(17, "File exists", str(path))
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir_then_removed)
    with workdirs.request_workdir(str(tmp_path)) as workdir:
        assert interfered
        assert workdir.parent == mine  # made again: still swept if this process dies
        (workdir / "upload").write_bytes(b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_request_that_ends_while_another_starts_leaves_it_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another request of the process starts and ends every time this one is between making
    the process directory and making its own inside it: the process directory stays for this
    one (before, the other removed it, empty, each time, and after ten tries this request's
    files went outside it, where a crash would have left them). Threads cannot be made to
    interleave on demand, so the other request runs inside this one's ``mkdtemp``."""
    real_mkdtemp = tempfile.mkdtemp
    others: list[Path] = []
    inside_other = threading.Event()

    def another_request_first(*args: Any, **kwargs: Any) -> str:
        first_try = len(others) < workdirs.ATTEMPTS and not inside_other.is_set()
        if kwargs.get("prefix") == "request-" and first_try:
            inside_other.set()
            with workdirs.request_workdir(str(tmp_path)) as other:
                (other / "upload").write_bytes(b"x")
                others.append(other)
            inside_other.clear()
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(workdirs.tempfile, "mkdtemp", another_request_first)
    with workdirs.request_workdir(str(tmp_path)) as workdir:
        assert others and workdir.parent == workdirs.process_dir(str(tmp_path))
        (workdir / "upload").write_bytes(b"x")
    assert list(tmp_path.iterdir()) == []


def test_requests_of_one_process_come_and_go_at_once(tmp_path: Path) -> None:
    """Threads making and removing request directories together: each gets its own inside
    the process directory, none fails, nothing is left."""
    failures: list[BaseException] = []
    outside: list[Path] = []

    def requests() -> None:
        for _ in range(200):
            try:
                with workdirs.request_workdir(str(tmp_path)) as workdir:
                    (workdir / "upload").write_bytes(b"x")
                    if not workdir.parent.name.startswith(f"extractor-{os.getpid()}-"):
                        outside.append(workdir)
            except Exception as exc:  # what a request would have failed with
                failures.append(exc)

    threads = [threading.Thread(target=requests) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and outside == []
    assert list(tmp_path.iterdir()) == []


def test_sweep_removes_only_directories_of_processes_that_are_gone(tmp_path: Path) -> None:
    mine = workdirs.process_dir(str(tmp_path))
    started = mine.name.rsplit("-", 1)[1]
    dead = tmp_path / f"extractor-{_dead_pid()}-{started}"
    reused = tmp_path / f"extractor-{os.getpid()}-{int(started) + 1}"  # our pid, another start
    foreign = [tmp_path / "extractor-notapid", tmp_path / "something-else-1-2"]
    for directory in (dead, reused, *foreign):
        (directory / "request-x").mkdir(parents=True)
        (directory / "request-x" / "page-0.pnm").write_bytes(b"P5")
    (tmp_path / "extractor-1-1").write_bytes(b"a file, not a directory")

    assert workdirs.sweep(str(tmp_path)) == 2
    assert not dead.exists() and not reused.exists()
    assert mine.exists() and all(directory.exists() for directory in foreign)
    assert (tmp_path / "extractor-1-1").is_file()


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _busy_request_dir(scratch: Path, server_pid: int, timeout: float) -> Path:
    """A request directory holding files, made by one of this server's workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for request_dir in scratch.glob("extractor-*/request-*"):
            pid = int(request_dir.parent.name.split("-")[1])
            try:
                busy = any(request_dir.iterdir()) and _parent_of(pid) == server_pid
            except (OSError, ValueError):
                continue  # finished (or its worker died) while we looked
            if busy:
                return request_dir
        time.sleep(0.05)
    raise TimeoutError("no request was seen running")


@pytest.mark.slow
def test_a_worker_killed_mid_request_and_a_stopped_server_leave_no_files(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """16 clients of mixed files; one worker gets SIGKILL while it holds a request's files."""
    scratch = tmp_path_factory.mktemp("server-tmp")
    # Small inputs, so that the requests still queued when the server stops drain quickly.
    lines = samples.a4_page_lines(20, 8)
    pages = [samples.text_page(lines[i : i + 12], page=i) for i in range(2)]
    uploads = [
        ("two-pages.pdf", samples.pdf(pages)),
        ("page.png", samples.encode_image(pages[0].image, "PNG")),
        ("noise.wav", samples.silence_and_noise(10)),
    ]
    url, server = start_server("--workers", "2", "--tmp-dir", str(scratch))
    stop = threading.Event()
    statuses: list[int | str] = []

    def client(number: int) -> None:
        name, data = uploads[number % len(uploads)]
        while not stop.is_set():
            try:
                reply = httpx.post(url + "/extract", files={"upload": (name, data)}, timeout=60)
                statuses.append(reply.status_code)
            except httpx.TransportError as exc:  # the killed worker's connections
                statuses.append(type(exc).__name__)

    clients = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    try:
        for thread in clients:
            thread.start()
        victim_dir = _busy_request_dir(scratch, server.pid, timeout=60)
        victim = int(victim_dir.parent.name.split("-")[1])
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while victim_dir.parent.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not victim_dir.parent.exists(), "the killed worker's files were not swept"
        # The replacement serves, and the load goes on until the server is stopped.
        done = len(statuses)
        deadline = time.monotonic() + 60
        while statuses[done:].count(200) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert statuses[done:].count(200) >= 3
    finally:
        stop.set()  # no new uploads, but the server stops with the last ones still in flight
        os.kill(server.pid, signal.SIGTERM)  # the master alone, as an init system stops it
        try:
            server.wait(timeout=120)  # the queued requests drain first (graceful stop)
        finally:
            stop_server(server)
        for thread in clients:
            thread.join(timeout=90)
    assert statuses.count(200) >= 3
    assert not [s for s in statuses if isinstance(s, int) and s >= 500], statuses
    assert list(scratch.iterdir()) == [], "the stopped server left temporary files behind"


def test_a_process_directory_planted_by_someone_else_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / "elsewhere"
    planted.mkdir()
    mine = workdirs.process_dir(str(tmp_path))
    mine.rmdir()
    mine.symlink_to(planted)  # what another local user could prepare in a shared /tmp
    with workdirs.request_workdir(str(tmp_path)) as workdir:
        assert workdir.parent == tmp_path and not workdir.is_symlink()
    assert list(planted.iterdir()) == [] and not workdir.exists()


def _tesseract_children(server_pid: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every ``tesseract`` started by one of the server's workers."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if name == "tesseract" and int(fields[2]) == server_pid:  # its session: the server's
            found.append((int(entry.name), int(fields[1])))
    return found


@pytest.mark.slow
def test_a_worker_killed_while_the_tesseract_cli_reads_leaves_nothing_in_the_system_tmp(
    tmp_path: Path,
) -> None:
    """Tesseract's CLI writes to a pipe, not to files in the system's temporary folder that
    the worker would delete afterwards: a worker that never gets to (SIGKILL, the OOM killer)
    leaves nothing behind there either."""
    system_tmp, scratch = tmp_path / "system-tmp", tmp_path / "server-tmp"
    system_tmp.mkdir()
    scratch.mkdir()
    page = samples.text_page(samples.a4_page_lines(40, 10))
    env = {"TMPDIR": str(system_tmp), "EXTRACTOR_OCR_IN_PROCESS": "false"}
    url, server = start_server("--workers", "1", "--tmp-dir", str(scratch), env=env)
    try:
        request = threading.Thread(target=_post_ignoring_errors, args=(url, page), daemon=True)
        request.start()
        deadline = time.monotonic() + 60
        while not (running := _tesseract_children(server.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running, "tesseract was never seen reading the page"
        tesseract, worker = running[0]
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 60  # the orphaned tesseract finishes or dies on its pipe
        while Path(f"/proc/{tesseract}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        request.join(timeout=60)
    finally:
        stop_server(server)
    assert list(system_tmp.iterdir()) == [], "tesseract's output was left in the system's tmp"
    assert list(scratch.iterdir()) == [], "the killed worker's request files were not swept"


def _post_ignoring_errors(url: str, page: samples.TextPage) -> None:
    png = samples.encode_image(page.image, "PNG")
    with contextlib.suppress(httpx.TransportError):  # the worker holding it was killed
        httpx.post(url + "/extract", files={"upload": ("page.png", png)}, timeout=90)
