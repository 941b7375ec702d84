"""The conformance kit's verdicts: one result per rule, as a table for people or JSON for tools."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .findings import Finding, Status


@dataclass(frozen=True)
class CheckResult:
    """One row of the report: a rule and its verdict over every sample it judged."""

    id: str
    title: str
    status: Status
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "status": self.status.value,
                "detail": self.detail}  # fmt: skip


@dataclass(frozen=True)
class Report:
    url: str
    kind: str
    checks: tuple[CheckResult, ...]
    found: tuple[tuple[str, str], ...] = ()  # (sample, what text came back), for people
    unreachable: str | None = None  # why nothing could be posted: no reply was judged

    @property
    def passed(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.checks)

    def failures(self) -> list[str]:
        return [c.id for c in self.checks if c.status is Status.FAIL]

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "kind": self.kind,
            "passed": self.passed,
            "checks": [c.to_json() for c in self.checks],
            "found": [{"sample": name, "text": text} for name, text in self.found],
        }


def combine(
    rule_id: str, title: str, findings: Sequence[tuple[str, Finding]], *, should: bool = False
) -> CheckResult:
    """One verdict from a rule's findings per sample: the first failure wins and is shown."""
    failures = [(name, f) for name, f in findings if f.status is Status.FAIL]
    if failures:
        name, first = failures[0]
        more = f" (and {len(failures) - 1} more samples)" if len(failures) > 1 else ""
        status = Status.WARN if should else Status.FAIL
        return CheckResult(rule_id, title, status, _named(name, first.detail) + more)
    passes = [(name, f) for name, f in findings if f.status is Status.PASS]
    if passes:
        details = [_named(name, f.detail) for name, f in passes if f.detail]
        count = f"{len(passes)} sample" + ("s" if len(passes) > 1 else "")
        skips = len(findings) - len(passes)
        detail = "; ".join(details) or count
        if skips:
            detail += f" ({skips} skipped)"
        return CheckResult(rule_id, title, Status.PASS, detail)
    reasons = sorted({f.detail for _name, f in findings})
    if len(reasons) > 1:
        reasons = ["; ".join(_named(n, f.detail) for n, f in findings)]
    return CheckResult(rule_id, title, Status.SKIP, reasons[0] or "nothing to judge")


def _named(sample: str, detail: str) -> str:
    return f"{sample}: {detail}" if sample else detail


def render_table(report: Report, *, width: int | None = None) -> str:
    """A plain-text table: check, result, detail (wrapped to the terminal), then a summary."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    id_width = max([len("check"), *(len(c.id) for c in report.checks)])
    head = f"{'check':<{id_width}}  result  "
    detail_width = max(40, width - len(head))
    lines = [f"extractor check {report.url} (--kind {report.kind})", "",
             head + "detail", "-" * min(width, len(head) + detail_width)]  # fmt: skip
    for c in report.checks:
        chunks = _wrap(c.detail, detail_width) or [""]
        lines.append(f"{c.id:<{id_width}}  {c.status.value:<6}  {chunks[0]}")
        lines.extend(" " * len(head) + chunk for chunk in chunks[1:])
    if report.found:
        name_width = max(len(name) for name, _text in report.found)
        lines += ["", "what came back:"]
        for name, text in report.found:
            chunk = _wrap(text, max(40, width - name_width - 4))[0]
            lines.append(f"  {name:<{name_width}}  {chunk}" + (" ..." if chunk != text else ""))
    counts = {s: sum(c.status is s for c in report.checks) for s in Status}
    verdict = "meets the contract" if report.passed else "does NOT meet the contract"
    lines += ["", f"{report.url} {verdict}: " + ", ".join(
        f"{counts[s]} {s.value}" for s in Status if counts[s] or s in (Status.PASS, Status.FAIL)
    )]  # fmt: skip
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    """Split at spaces where possible; a long unbroken value is cut rather than overflowing."""
    chunks: list[str] = []
    while len(text) > width:
        cut = text.rfind(" ", 0, width + 1)
        cut = cut if cut > width // 2 else width
        chunks.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        chunks.append(text)
    return chunks


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2) + "\n"
