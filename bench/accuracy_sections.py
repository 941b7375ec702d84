"""The parts of ``make accuracy`` that each measure one more set, each in its own module.

A section module (``bench.accuracy_<name>``) has ``measure(log_dir: Path) -> str``: it runs its
own servers and bare engines and returns its Markdown, starting with a ``## `` heading.
``python -m bench.accuracy`` runs every section after the core sets and appends them to the
report; ``python -m bench.accuracy --only NAME`` runs one and replaces that section in an
existing report, between its ``<!-- section:NAME -->`` markers, leaving the rest as it was.
"""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path

log = logging.getLogger("bench.accuracy")

# Run in this order; a section whose module is missing is an error, not a skip.
SECTIONS: tuple[str, ...] = ("live", "languages", "meetings", "documents")


def measure(name: str, log_dir: Path) -> str:
    module = importlib.import_module(f"bench.accuracy_{name}")
    folder = log_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    text = module.measure(folder).rstrip("\n")
    log.info("section %s done", name)
    return f"<!-- section:{name} -->\n{text}\n<!-- /section:{name} -->\n"


def replace(report: str, name: str, section: str) -> str:
    """``report`` with section ``name`` replaced by ``section`` (appended if it had none)."""
    pattern = re.compile(
        rf"<!-- section:{re.escape(name)} -->\n.*?<!-- /section:{re.escape(name)} -->\n", re.S
    )
    if pattern.search(report):
        return pattern.sub(lambda _: section, report, count=1)
    return report.rstrip("\n") + "\n\n" + section
