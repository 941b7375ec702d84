"""Per-request working directories that a killed process cannot leave behind for good.

Every process (a gunicorn worker, an ``extractor extract`` run) keeps its request directories
inside one directory of its own, ``extractor-<pid>-<start time>`` under ``tmp_dir``. A request's
directory goes away with the request; a process that dies mid-request (SIGKILL, the OOM killer,
gunicorn's own timeout) cannot clean up, so whoever comes next does: ``sweep`` removes the
directories of every process that no longer runs, and the gunicorn hooks call it when the
master reaps a worker, when a new worker starts and when the server stops.

The start time (from ``/proc``) is part of the name because pids are reused: a directory whose
pid now belongs to another process is still recognised as abandoned.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "extractor-"
_OWNED = re.compile(rf"^{PREFIX}(\d+)-(\d+)$")  # pid, start time in clock ticks after boot
ATTEMPTS = 10  # to make a request directory while something else removes the empty parent

# This process's requests holding each of its process directories: the last one out removes
# it, and never while another request is between making it and making its own directory
# inside (under heavy load ten retries in a row could lose that race; the request's files
# then went outside, where a crash leaves them for good).
_lock = threading.Lock()
_holders: dict[Path, int] = {}


def _forked() -> None:  # a child has its own pid, so its own directories
    global _lock
    _lock = threading.Lock()
    _holders.clear()


os.register_at_fork(after_in_child=_forked)


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None if it does not run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 of proc(5), the 20th after the name


def _running(pid: int, started: int) -> bool:
    """Whether the process that made a directory named ``pid``-``started`` still runs."""
    current = _start_time(pid)
    if current is not None:
        return started in (0, current)  # 0: made where /proc was unreadable; trust the pid
    if Path("/proc/self/stat").exists():
        return False  # /proc works and has no such pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def process_dir(tmp_dir: str | None) -> Path:
    """This process's directory for request directories, created on first use (mode 0700)."""
    pid = os.getpid()
    root = Path(tmp_dir or tempfile.gettempdir())
    path = root / f"{PREFIX}{pid}-{_start_time(pid) or 0}"
    # Made already by another request of this process, which may remove it again (empty) at
    # any moment: not ``mkdir(exist_ok=True)``, whose check after EEXIST then raised
    # FileExistsError (an asynchronous job that started as its submit request ended failed
    # with it). Gone by now, the lstat below raises FileNotFoundError and the caller retries.
    with suppress(FileExistsError):
        path.mkdir(mode=0o700)
    # The name is predictable, so in a shared /tmp someone else may have made it first (or
    # planted a symlink): only a private directory of our own may hold uploads.
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")
    return path


@contextmanager
def request_workdir(tmp_dir: str | None) -> Iterator[Path]:
    """A fresh directory for one request's files, removed when the request ends.

    The process's own directory goes too once no other request uses it, so an idle worker or a
    finished ``extractor extract`` leaves nothing behind.
    """
    path = _fresh_dir(tmp_dir)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if path.parent in _holders:
            _release(path.parent)


def _fresh_dir(tmp_dir: str | None) -> Path:
    for _attempt in range(ATTEMPTS):
        try:
            with _lock:
                parent = process_dir(tmp_dir)
                _holders[parent] = _holders.get(parent, 0) + 1
        except FileNotFoundError:  # removed between our mkdir and lstat: make it again
            continue
        except PermissionError:
            log.warning("process directory taken by another user; request files not swept")
            break
        try:
            return Path(tempfile.mkdtemp(prefix="request-", dir=parent))
        except FileNotFoundError:  # removed by something else than this process: again
            _release(parent)
        except BaseException:
            _release(parent)
            raise
    return Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp_dir))  # private, but not crash-safe


def _release(parent: Path) -> None:
    """One request less in ``parent``; the last one removes it (if empty)."""
    with _lock:
        left = _holders.get(parent, 1) - 1
        if left > 0:
            _holders[parent] = left
            return
        _holders.pop(parent, None)
        with suppress(OSError):  # not empty: files someone else put there stay
            parent.rmdir()


def sweep(tmp_dir: str | None) -> int:
    """Remove the directories of processes that no longer run; return how many went.

    Safe to call from any process at any time: a directory is only removed when the process
    named in it is gone (or its pid now belongs to a process started at another time), and
    names that do not follow the pattern (other programs' files) are never touched.
    """
    root = Path(tmp_dir or tempfile.gettempdir())
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        owner = _OWNED.match(entry.name)
        if owner is None or not entry.is_dir() or entry.is_symlink():
            continue
        if _running(int(owner[1]), int(owner[2])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += not entry.exists()
    if removed:
        log.info("removed temporary files of stopped processes", extra={"directories": removed})
    return removed
