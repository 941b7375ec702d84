"""The conformance kit's verdicts: what a rule returns (PASS, FAIL, SKIP, WARN and why)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    WARN = "WARN"  # a "should" rule not met: reported, but the exit status stays 0


@dataclass(frozen=True)
class Finding:
    status: Status
    detail: str = ""


def passed(detail: str = "") -> Finding:
    return Finding(Status.PASS, detail)


def failed(detail: str) -> Finding:
    return Finding(Status.FAIL, detail)


def skipped(detail: str) -> Finding:
    return Finding(Status.SKIP, detail)


def first_failure(problems: Iterator[str], ok: str = "") -> Finding:
    """FAIL with the first problem ``problems`` yields, else PASS."""
    problem = next(problems, None)
    return passed(ok) if problem is None else failed(problem)
