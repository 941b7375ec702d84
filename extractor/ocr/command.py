"""The ``tesseract`` command, its output read from a pipe.

pytesseract has Tesseract write each run's output to ``tess_*`` files in the system's temporary
folder and deletes them afterwards, so a worker killed mid-page (a hard timeout, the OOM killer)
leaves them there for good. Run here with ``stdout`` as its output base, Tesseract writes
nothing to disk; the page image is already in the request's own folder.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ERROR_CHARS = 300  # of Tesseract's stderr kept in an error message


class TesseractMissing(Exception):
    """No ``tesseract`` on PATH."""


class TesseractFailed(Exception):
    """Tesseract exited with an error (the reason is its stderr, shortened)."""


class TesseractTimedOut(Exception):
    """Tesseract was killed for running past its time."""


def run_tesseract(image: Path, options: list[str], timeout: float) -> str:
    """What ``tesseract image stdout *options`` prints, run single-threaded (OpenMP's default
    threading makes it ~7x slower on a small machine; only this child gets the limit, since
    CTranslate2 in the worker's own process decodes garbage under it)."""
    try:
        done = subprocess.run(
            ["tesseract", str(image), "stdout", *options],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        )  # fmt: skip
    except FileNotFoundError as exc:
        raise TesseractMissing("tesseract is not installed") from exc
    except subprocess.TimeoutExpired as exc:  # run() has killed it and waited
        raise TesseractTimedOut(f"tesseract ran past {timeout:.1f} s") from exc
    if done.returncode != 0:
        # Its last words say why; the image's path (a server folder) is not the client's business.
        said = done.stderr.decode("utf-8", "replace").replace(str(image), "the image")
        reason = " ".join(line.strip() for line in said.splitlines() if line.strip())
        raise TesseractFailed(reason[-ERROR_CHARS:] or f"tesseract exited with {done.returncode}")
    return done.stdout.decode("utf-8", "replace")
