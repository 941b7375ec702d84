"""The directory gunicorn workers share their metrics through.

Kept apart from ``metrics.py`` on purpose: prometheus-client picks its storage when it is first
imported, so the master must set ``PROMETHEUS_MULTIPROC_DIR`` before anything imports it, and
this module must not import it either.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DIR_PREFIX = "extractor-metrics-"
# The classic text format every Prometheus since 2.0 reads (prometheus-client's newest default,
# version 1.0.0, is not understood by the Prometheus 2.x that Debian and many sites still run).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def prepare_multiprocess_dir(base: str | None) -> Path:
    """Create the workers' shared metrics directory and point this process's env at it.

    Called by ``extractor serve`` in the master before the first worker forks. Each server gets
    a fresh directory named after its pid, so a restart never adds up an old run's counters, and
    the directories of servers that died without cleaning up (SIGKILL) are removed here.
    """
    if (
        "prometheus_client" in sys.modules
    ):  # its storage is already chosen: workers would not add up
        raise RuntimeError("prepare_multiprocess_dir must run before prometheus_client is imported")
    parent = Path(base or tempfile.gettempdir())
    for stale in parent.glob(f"{DIR_PREFIX}*"):
        pid = stale.name.removeprefix(DIR_PREFIX)
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    path = parent / f"{DIR_PREFIX}{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=0o700, parents=True)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, and not ours to judge
        return True
    return True


def remove_multiprocess_dir(path: Path) -> None:
    """Remove the directory, in the process that made it only: a gunicorn worker is forked
    inside ``serve`` and unwinds through the same ``finally`` when it exits, and must not take
    the directory away from its siblings and the master."""
    if path.name != f"{DIR_PREFIX}{os.getpid()}":
        return
    shutil.rmtree(path, ignore_errors=True)
    if os.environ.get(MULTIPROC_ENV) == str(path):
        del os.environ[MULTIPROC_ENV]
