"""Every shell and Python block of the README and of docs/ runs as written against a real server.

The blocks are run one by one, in page order, from a scratch folder holding the repository's
``examples/`` (as from the repository's root, without leaving files there), against one real
``extractor serve`` started here with its defaults but the port: the address the documentation
writes, ``127.0.0.1:8000`` (what ``make run`` serves), is moved to that server's, and so are the
labeling service's and the toy prediction API's ports. A block that must not run (``make run``
itself, an image build, a cluster) has ``<!-- not-run: why -->`` on the line above it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import free_port, start_server, stop_server

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"^(?:<!-- not-run: (?P<reason>[^>]*?) -->\n)?```(?P<language>\S*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
# Fenced languages that are commands to run, and what runs them; other fences (yaml, json,
# text, ...) show a file or an output and are never run.
RUNNERS = {"sh": "bash", "bash": "bash", "shell": "bash", "python": "python"}
DOCUMENTED = {"8000": "the extractor", "8100": "the labeling service", "8200": "the toy model"}
# An error object in a reply (curl -s exits 0 on a 4xx or 5xx, so its body is what tells).
ERROR_REPLY = re.compile(r'"error":\s*\{')
# What an example's output holds when it sends one of the example files and reads it back.
HEARD = {"examples/scan.": "4417", "examples/speech.wav": "park", "examples/two-voices": "Friday"}
# And what the labeling walk-through ends with: a label from the toy model, on the OCR'd text.
LABELED = '"type": "SPAN"'


@dataclass(frozen=True)
class Example:
    """One fenced block of a page."""

    page: Path
    line: int
    language: str
    body: str
    not_run: str | None  # the reason given in the marker above it, if any

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    """Every fenced block of the README and the docs pages with a language to run."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match["language"] in RUNNERS:
                line = text.count("\n", 0, match.start("language")) + 1
                found.append(Example(page, line, match["language"], match["body"], match["reason"]))
    return found


RUNNABLE = [example for example in examples() if example.not_run is None]


def test_blocks_that_do_not_run_say_why() -> None:
    skipped = [example for example in examples() if example.not_run is not None]
    assert skipped, "the not-run marker is not recognised any more"
    assert all(example.not_run.strip() for example in skipped)
    assert len(RUNNABLE) >= 15, [example.name for example in RUNNABLE]


def test_no_placeholder_is_left_for_the_reader_to_fill() -> None:
    """An id a previous command printed is read from it (jq), never written as <id>."""
    for example in RUNNABLE:
        assert not re.search(r"<(id|job|token|secret|EXTRACTOR_SECRET)>", example.body), (
            example.name
        )


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = start_server("--workers", "1", env={"EXTRACTOR_SECRET": ""})
    try:
        yield url
    finally:
        stop_server(process)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A folder that looks like the repository's root to the examples."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def as_run_here(example: Example, server: str) -> str:
    """The block with the documented ports moved to the ones of this run."""
    body = example.body.replace("127.0.0.1:8000", server.removeprefix("http://"))
    for port in DOCUMENTED.keys() - {"8000"}:
        body = re.sub(rf"127\.0\.0\.1:{port}\b", f"127.0.0.1:{free_port()}", body)
    return body


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("curl") is None,
                    reason="the examples use curl and jq")  # fmt: skip
@pytest.mark.parametrize("example", RUNNABLE, ids=lambda example: example.name)
def test_example_runs_as_written(example: Example, server: str, scratch: Path) -> None:
    body = as_run_here(example, server)
    venv_bin = Path(sys.executable).parent  # what `source .venv/bin/activate` puts on the PATH
    env = {key: value for key, value in os.environ.items() if not key.startswith("EXTRACTOR_")}
    env |= {"PATH": f"{venv_bin}:{env['PATH']}", "EXTRACTOR_URL": server, "NO_COLOR": "1"}
    if RUNNERS[example.language] == "bash":
        command = ["bash", "-c", "set -eo pipefail\n" + body]
    else:
        command = [sys.executable, "-c", body]
    out_path, err_path = scratch / "stdout", scratch / "stderr"
    # Files, not pipes: a server the block leaves running would hold a pipe open.
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            command, cwd=scratch, env=env, stdout=out_file, stderr=err_file,
            start_new_session=True,
        )  # fmt: skip
        try:
            process.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever it started and left
                os.killpg(process.pid, signal.SIGTERM)
    out, err = out_path.read_text(), err_path.read_text()
    assert process.returncode == 0, f"{example.name} failed:\n{out[-2000:]}\n{err[-3000:]}"
    assert not ERROR_REPLY.search(out), f"{example.name} got an error reply:\n{out[-2000:]}"
    expected = [heard for sent, heard in HEARD.items() if sent in example.body]
    if expected:  # at least one of the files it sends was read back
        said = (out + err).casefold()
        assert any(heard.casefold() in said for heard in expected), f"{example.name}: {out[-2000:]}"
    if "autoLabelTokenBasedProject" in example.body:
        assert LABELED in out, f"{example.name}: {out[-2000:]}\n{err[-2000:]}"
