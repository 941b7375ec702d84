"""``extractor check URL``: a conformance kit for any text extractor, not only this one.

It posts what the platform posts (multipart ``upload``, ``Accept: application/json,
text/plain``, the Bearer secret when given) with samples it makes itself, judges every reply
the way the platform would, and reports one PASS/FAIL/SKIP/WARN row per rule. ``WARN`` marks a
"should" (the error probes) that is not met; only ``FAIL`` makes the exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import httpx

from .findings import Finding, Status, failed
from .probes import (
    EndpointReplies,
    Probe,
    Transport,
    audio_missing,
    make_samples,
    probe,
    probe_endpoint,
    small_png,
)
from .report import CheckResult, Report, combine, render_json, render_table
from .rules import ENDPOINT_RULES, RULES, Rule
from .rules.reading import what_came_back

__all__ = ["RULES", "Report", "Status", "check", "run_check"]

KINDS = ("ocr", "audio", "all")
DEFAULT_TIMEOUT = 120.0  # seconds per request: a cold server may load Whisper first


class UsageError(ValueError):
    """The kit was asked something it cannot try: exit status 2."""


def check(
    url: str,
    *,
    secret: str | None = None,
    kind: str = "all",
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Probe the extractor at ``url`` and judge every reply; raises ``UsageError`` on bad input."""
    _validate(url, kind, timeout)
    say = progress or (lambda _message: None)
    transport = Transport(url, secret=secret, timeout=timeout)
    try:
        say("probing error handling")
        endpoint = probe_endpoint(transport, small_png)
        probes = []
        for sample in make_samples(kind):
            say(f"posting {sample.name}")
            probes.append(probe(transport, sample))
    finally:
        transport.close()
    results = [*_judge_samples(kind, probes), *_judge_endpoint(endpoint)]
    if transport.unreachable:
        # Nothing was judged: say so on every row rather than leave SKIPs that look benign.
        results = [CheckResult(r.id, r.title, Status.FAIL, transport.unreachable) for r in results]
    found = tuple((p.sample.name, what_came_back(p)) for p in probes if not transport.unreachable)
    return Report(url, kind, tuple(results), found, transport.unreachable)


def run_check(
    url: str,
    secret: str | None = None,
    kind: str = "all",
    as_json: bool = False,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> int:
    """Run the kit and print its table (or JSON); 0 all met, 1 any FAIL, 2 a usage error. A
    server that cannot be reached is one line on standard error, not a table of its FAILs (the
    JSON report still has every row, each naming why)."""
    progress = _stderr_progress if sys.stderr.isatty() and not as_json else None
    try:
        report = check(url, secret=secret, kind=kind, timeout=timeout, progress=progress)
    except UsageError as exc:
        print(f"extractor check: {exc}", file=sys.stderr)
        return 2
    if report.unreachable and not as_json:
        print(f"extractor check: {report.unreachable}", file=sys.stderr)
        return 1
    sys.stdout.write(render_json(report) if as_json else render_table(report))
    return 0 if report.passed else 1


def _validate(url: str, kind: str, timeout: float) -> None:
    if kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if timeout <= 0:
        raise UsageError("the timeout must be positive")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise UsageError(f"not a URL: {url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"expected an http:// or https:// URL, not {url!r}")


def _judge(rule: Rule, found: Probe) -> Finding:
    error = next((r for r in found.replies if r.error), None)
    if error is not None:
        return failed(f"{error.describe()}: {error.error}")
    return rule.judge(found)


def _judge_samples(kind: str, probes: list[Probe]) -> list[CheckResult]:
    wanted = {"ocr", "audio"} if kind == "all" else {kind}
    no_audio = audio_missing() if "audio" in wanted else None
    results = []
    for rule in RULES:
        if not rule.kinds & wanted:
            continue
        findings = [(p.sample.name, _judge(rule, p)) for p in probes if p.sample.kind in rule.kinds]
        if not findings:
            reason = no_audio if no_audio and "audio" in rule.kinds else "no sample to judge"
            results.append(CheckResult(rule.id, rule.title, Status.SKIP, reason))
            continue
        results.append(combine(rule.id, rule.title, findings, should=rule.should))
    return results


def _judge_endpoint(endpoint: EndpointReplies) -> list[CheckResult]:
    return [
        combine(rule.id, rule.title, [("", rule.judge(endpoint))], should=rule.should)
        for rule in ENDPOINT_RULES
    ]


def _stderr_progress(message: str) -> None:
    print(f"extractor check: {message} ...", file=sys.stderr, flush=True)
