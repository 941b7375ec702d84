"""Every ``extractor`` command fails in one line: a server that is down, a file that is not
there, a URL that is not one, a request the server refuses, Ctrl-C. Each is run as a user runs
it (``.venv/bin/extractor`` in a subprocess, against a real gunicorn server where one is
needed) and must end with one ``extractor <command>: ...`` line on standard error, the exit
status ``extractor.cli_errors`` documents and no traceback."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import free_port, start_server, stop_server

from extractor.async_jobs.client import JobProgress

ROOT = Path(__file__).resolve().parent.parent
EXTRACTOR = str(Path(sys.executable).with_name("extractor"))
SCAN, SPEECH = str(ROOT / "examples/scan.png"), ROOT / "examples/speech.wav"
SECRET = "cli-errors-secret"
DOWN = f"http://127.0.0.1:{free_port()}"  # nothing listens there
MISSING = "/nonexistent/missing.png"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXTRACTOR, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "EXTRACTOR_URL": "", "EXTRACTOR_SECRET": "", **(env or {})},
    )  # fmt: skip


def assert_one_line(done: subprocess.CompletedProcess[str], command: str, status: int, why: str):
    """The command failed with ``status`` and said ``why`` in one line, nothing else."""
    lines = done.stderr.splitlines()
    assert done.returncode == status, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"extractor {command}: "), done.stderr
    assert why in lines[0], lines[0]


FAILURES = [
    # a server that is down: 1
    (("submit", SCAN, "--url", DOWN), "submit", 1, "cannot connect to"),
    (("submit", SCAN, "--url", DOWN, "--wait"), "submit", 1, "Connection refused"),
    (("jobs", "--url", DOWN), "jobs", 1, "cannot connect to"),
    (("listen", str(SPEECH), "--url", DOWN), "listen", 1, "cannot connect to"),
    (("check", f"{DOWN}/extract", "--kind", "ocr"), "check", 1, "cannot connect to"),
    # a file that is not there: 2
    (("submit", MISSING, "--url", DOWN), "submit", 2, f"cannot open {MISSING}"),
    (("submit", str(ROOT / "examples"), "--url", DOWN), "submit", 2, "Is a directory"),
    (("extract", MISSING), "extract", 2, f"no such file: {MISSING}"),
    (("listen", MISSING, "--url", DOWN), "listen", 2, f"cannot read {MISSING}"),
    (("settings", "--write", MISSING), "settings", 2, f"cannot open {MISSING}"),
    # a URL that is not one: 2
    (("submit", SCAN, "--url", "http://"), "submit", 2, "not a server's URL: 'http://'"),
    (("jobs", "--url", "http://"), "jobs", 2, "not a server's URL"),
    (("jobs", "--url", "localhost:8000"), "jobs", 2, "not a server's URL"),
    (("jobs", "--url", "http://127.0.0.1:port"), "jobs", 2, "not a server's URL"),
    (("listen", str(SPEECH), "--url", "http://"), "listen", 2, "not a server's URL"),
    (("check", "http://"), "check", 2, "expected an http:// or https:// URL"),
    # a setting out of its bounds: 2, before anything starts
    (("serve", "--threads", "0"), "serve", 2, "EXTRACTOR_THREADS"),
]


@pytest.mark.parametrize(("args", "command", "status", "why"), FAILURES)
def test_a_command_fails_in_one_line(args: tuple[str, ...], command: str, status: int, why: str):
    assert_one_line(run(*args), command, status, why)


def test_a_labeling_command_with_its_database_down_fails_in_one_line() -> None:
    database = f"postgresql+psycopg://user:pass@127.0.0.1:{free_port()}/labeling"
    done = run("labeling", "add-user", "a@example.com",
               env={"EXTRACTOR_LABELING_DATABASE_URL": database})  # fmt: skip
    assert_one_line(done, "labeling add-user", 1, "cannot use the database: ")


def test_debug_shows_the_traceback_instead() -> None:
    done = run("--debug", "jobs", "--url", DOWN)
    assert done.returncode == 1 and "Traceback" in done.stderr and "ConnectError" in done.stderr


def test_a_reader_that_leaves_ends_the_command_quietly() -> None:
    """``extractor settings | head -0``: exit 141 (128 + SIGPIPE), as the shell's commands."""
    command = subprocess.Popen([EXTRACTOR, "settings"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    assert command.stdout is not None and command.stderr is not None
    command.stdout.close()  # before the command writes: its first write fails
    assert command.wait(timeout=120) == 141
    assert command.stderr.read() == b""


# -- against a real server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A server that requires the secret and only queues jobs (no job worker): a job submitted
    stays queued for as long as a test needs."""
    url, process = start_server("--workers", "1", "--secret", SECRET, "--job-workers", "0")
    try:
        yield url
    finally:
        stop_server(process)


def test_a_refused_request_fails_in_one_line_with_the_servers_reason(server: str) -> None:
    wrong = ("--url", server, "--secret", "wrong")
    assert_one_line(run("submit", SCAN, *wrong), "submit", 1, "401 unauthorized: ")
    assert_one_line(run("jobs", *wrong), "jobs", 1, "401 unauthorized: ")
    assert_one_line(
        run("listen", str(SPEECH), *wrong), "listen", 1, "refused with 401 invalid_api_key: "
    )
    # a bad option: the server's message and the parameter at fault
    bad = run("submit", SCAN, "--url", server, "--secret", SECRET, "--ocr-languages", "klingon")
    assert_one_line(bad, "submit", 1, "400 invalid_parameter: ")
    assert bad.stderr.rstrip().endswith("(parameter ocr_languages)")


def interruptible(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [EXTRACTOR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "EXTRACTOR_URL": "", "EXTRACTOR_SECRET": ""},
        # A test run started in the background ignores SIGINT, and a process started with it
        # ignored keeps ignoring it: Ctrl-C is what is under test here.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def first_output(process: subprocess.Popen[bytes], stream: int) -> bytes:
    """The first bytes the process writes to ``stream`` (a pipe's file descriptor)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if select.select([stream], [], [], 1)[0]:
            return os.read(stream, 65536)
    raise AssertionError(f"no output before the process ended ({process.returncode})")


def test_ctrl_c_while_submit_waits_exits_130_and_names_the_job(server: str) -> None:
    """The job is queued (the server runs none): the wait shows it, Ctrl-C ends the command
    with 130 and says the job goes on, which it does."""
    waiting = interruptible("submit", SCAN, "--url", server, "--secret", SECRET, "--wait")
    try:
        assert waiting.stderr is not None
        shown = first_output(waiting, waiting.stderr.fileno())
        assert b"queued, waiting for a worker" in shown
        waiting.send_signal(signal.SIGINT)
        _, rest = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 130, rest
    last = rest.decode().splitlines()[-1]
    assert last.startswith("extractor submit: interrupted; job ExtractionQueue:"), rest
    assert b"Traceback" not in rest
    job = last.split("job ", 1)[1].split(" ", 1)[0]
    headers = {"Authorization": f"Bearer {SECRET}"}
    assert httpx.get(f"{server}/v1/jobs/{job}", headers=headers).json()["status"] == "queued"
    httpx.delete(f"{server}/v1/jobs/{job}", headers=headers)


def test_ctrl_c_while_listen_streams_a_file_exits_130(server: str, tmp_path: Path) -> None:
    """Ctrl-C once words are printed: the audio sent is still transcribed, its line ended,
    then exit status 130 with no traceback."""
    with wave.open(str(SPEECH)) as source:
        params, frames = source.getparams(), source.readframes(source.getnframes())
    long = tmp_path / "long.wav"
    with wave.open(str(long), "wb") as out:  # 72 s at its own pace: still streaming at Ctrl-C
        out.setparams(params)
        out.writeframes(frames * 20)
    listening = interruptible("listen", str(long), "--url", server, "--secret", SECRET)
    try:
        assert listening.stdout is not None
        printed = first_output(listening, listening.stdout.fileno())
        listening.send_signal(signal.SIGINT)
        out, err = listening.communicate(timeout=120)
    finally:
        listening.kill()
    assert listening.returncode == 130, err
    assert b"stopped; finishing the last turn" in err and b"Traceback" not in err
    assert (printed + out).endswith(b"\n")


# -- the estimate while a job runs ---------------------------------------------------------


def test_a_running_job_shows_the_time_left_at_its_pace_so_far() -> None:
    """A quarter done 10 s after it started: 30 s left when that progress was seen, counted
    down on the client's clock; before any progress, how long it has run."""
    progress = JobProgress(now=100.0)
    job = {"status": "queued", "progress": 0.0, "started_at": None,
           "updated_at": "2026-01-01T00:00:00.000Z"}  # fmt: skip
    progress.saw(job, 100.0)
    assert progress.line(job, 104.0).endswith("0% queued, waiting for a worker (4 s)")
    job = {**job, "status": "running", "started_at": "2026-01-01T00:00:05.000Z",
           "updated_at": "2026-01-01T00:00:05.000Z"}  # fmt: skip
    progress.saw(job, 105.0)
    assert progress.line(job, 108.0).endswith("0% running for 3 s")
    job = {**job, "progress": 0.25, "updated_at": "2026-01-01T00:00:15.000Z"}
    progress.saw(job, 110.0)
    assert progress.line(job, 110.0).endswith("25% running, about 30 s left")
    assert progress.line(job, 122.0).endswith("25% running, about 18 s left")
    ended = {**job, "status": "succeeded", "progress": 1.0}
    progress.saw(ended, 130.0)
    assert progress.line(ended, 130.0) == f"[{'#' * 30}] 100% succeeded"
