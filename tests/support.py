"""Helpers for tests in any folder: post like the platform, start a real gunicorn server.

``tests/`` is on sys.path once its conftest is loaded, so any test can ``import support``.
"""

from __future__ import annotations

import difflib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

PLATFORM_ACCEPT = "application/json, text/plain"
# What the fixtures draw and say, so tests can compare what comes back with what went in.
PAGE_ONE = ["Invoice number 4417 for garden tools", "Delivered to Harbor Street warehouse"]
PAGE_TWO = ["Second page mentions purple elephants", "and seven quiet libraries"]
SPOKEN = "The weather is sunny today and we will walk to the park"

requires_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"
)


def post_file(
    client: FlaskClient, data: bytes, filename: str = "upload.bin", *,
    accept: str | None = PLATFORM_ACCEPT, query: str = "", headers: dict[str, str] | None = None,
) -> Any:  # fmt: skip
    """POST ``data`` as the platform does: multipart field ``upload``."""
    all_headers = dict(headers or {})
    if accept is not None:
        all_headers["Accept"] = accept
    return client.post(
        "/extract" + query,
        data={"upload": (io.BytesIO(data), filename)},
        headers=all_headers,
        content_type="multipart/form-data",
    )


def transcript_words(text: str) -> list[str]:
    """The words of ``text`` in order, lowercased, without the marks after them."""
    return [w.strip(".,!?;:").lower() for w in text.split()]


# The share of a live turn's words its audio decoded alone also has (``likeness``). The words
# tiny.en hears depend on the CPU and, live, on which windows the load let it decode: a live
# transcript is held to the same engine's decode of the same audio, never to the words spoken.
# One word in three may differ; another sentence, or a turn heard twice, is far below.
ALIKE = 0.6


def likeness(heard: str, reference: list[str]) -> float:
    """The words ``heard`` has in common with ``reference``, in order, over the longer's count:
    1 for the same words, less for each one missed, changed or added."""
    words = transcript_words(heard)
    blocks = difflib.SequenceMatcher(None, words, reference, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / max(len(words), len(reference), 1)


def words_of(text: str) -> set[str]:
    """The words of ``text``, casefolded, without surrounding punctuation."""
    return {w.strip(".,!?;:'\"").casefold() for w in text.split()}


# -- a real gunicorn server ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not become ready in {timeout} s")


# Each running server's job folder (a fresh temporary one), by its pid, for ``stop_server``.
_DATA_DIRS: dict[int, str] = {}


def start_server(
    *args: str, env: dict[str, str] | None = None, log: Any = None
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``extractor serve`` on a free loopback port and wait until it is ready.

    Its job database (asynchronous jobs) is in a fresh temporary folder unless ``env`` names
    one, never in the directory the tests run from."""
    port = free_port()
    command = [sys.executable, "-m", "extractor.cli", "serve", "--bind", f"127.0.0.1:{port}", *args]
    data_dir = tempfile.mkdtemp(prefix="extractor-jobs-")
    process = subprocess.Popen(
        command, env={**os.environ, "EXTRACTOR_DATA_DIR": data_dir, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=log if log is not None else subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    _DATA_DIRS[process.pid] = data_dir
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
    except Exception:
        stop_server(process)
        raise
    return url, process


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop a server from ``start_server`` and remove the job folder it was given."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    data_dir = _DATA_DIRS.pop(process.pid, None)
    if data_dir is not None:
        shutil.rmtree(data_dir, ignore_errors=True)


@contextmanager
def serving(scratch: Path, *args: str, log: Path | None = None) -> Iterator[str]:
    """A real ``extractor serve`` (``args``: its options) with ``--tmp-dir scratch``, its stderr
    into the file ``log`` when given: its URL while the block runs, then stopped, after which
    ``scratch`` must be empty (every request cleans up after itself, even one cut short)."""
    with log.open("wb") if log is not None else nullcontext() as sink:
        url, process = start_server(*args, "--tmp-dir", str(scratch), log=sink)
        try:
            yield url
        finally:
            stop_server(process)
    assert list(scratch.iterdir()) == [], "the server left temporary files behind"


def worker_pids(master: int) -> list[int]:
    """gunicorn's workers: the master's child processes, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == master:
                    found.append(int(entry.name))
    return found


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
