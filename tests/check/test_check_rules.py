"""The kit's rules on hand-made replies, its report shapes, and its exit statuses (no engines)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import support

from extractor.check import Status, run_check
from extractor.check.findings import Finding
from extractor.check.probes import JSON_TYPE, AudioSample, OcrSample, Probe, Reply, ocr_samples
from extractor.check.report import CheckResult, Report, combine, render_table
from extractor.check.rules.boxes import json_corners, overlap
from extractor.check.rules.timestamps import json_timestamps_ms


def json_probe(sample: OcrSample | AudioSample, doc: dict[str, Any]) -> Probe:
    reply = Reply(sample.name, JSON_TYPE, 200, JSON_TYPE, None, json.dumps(doc).encode())
    return Probe(sample, reply, ())


def box_doc(points: list[tuple[int, int]]) -> dict[str, Any]:
    label = {"type": "BOUNDING_BOX", "pageIndex": 0}
    for n, (x, y) in enumerate(points):
        label[f"x{n}"], label[f"y{n}"] = x, y
    return {"type": "BOUNDING_BOX", "labels": [label]}


@pytest.mark.parametrize(
    ("points", "status", "words"),
    [
        ([(10, 10), (50, 10), (50, 30), (10, 30)], Status.PASS, ""),
        ([(12, 10), (50, 14), (48, 34), (10, 30)], Status.PASS, ""),  # slightly rotated
        ([(10, 10), (10, 30), (50, 30), (50, 10)], Status.FAIL, "counter-clockwise"),
        ([(50, 10), (50, 30), (10, 30), (10, 10)], Status.FAIL, "not the top-left"),
    ],
)
def test_corners_must_run_clockwise_from_the_top_left(
    points: list[tuple[int, int]], status: Status, words: str
) -> None:
    finding = json_corners(json_probe(ocr_samples()[0], box_doc(points)))
    assert finding.status is status and words in finding.detail


def speech(duration_ms: int) -> AudioSample:
    return AudioSample("speech.wav", "audio/wav", b"", "hello there", duration_ms)


def timestamp_doc(*spans: tuple[int, int]) -> dict[str, Any]:
    return {"type": "TIMESTAMP", "labels": [
        {"type": "TIMESTAMP", "startTimestampMillis": a, "endTimestampMillis": b} for a, b in spans
    ]}  # fmt: skip


@pytest.mark.parametrize(
    ("duration", "spans", "status", "words"),
    [
        (6000, [(0, 2900), (2900, 5700)], Status.PASS, ""),
        (6000, [(0, 3), (3, 6)], Status.FAIL, "look like seconds"),
        (60_000, [(0, 30), (30, 58)], Status.FAIL, "look like seconds"),
        (60_000, [(0, 900), (900, 2000)], Status.FAIL, "not milliseconds?"),
        (1500, [(0, 1)], Status.SKIP, "too short"),
        (6000, [], Status.SKIP, "no TIMESTAMP"),
    ],
)
def test_seconds_are_told_from_milliseconds(
    duration: int, spans: list[tuple[int, int]], status: Status, words: str
) -> None:
    finding = json_timestamps_ms(json_probe(speech(duration), timestamp_doc(*spans)))
    assert finding.status is status and words in finding.detail


def test_overlap_is_iou_and_containment() -> None:
    assert overlap((0, 0, 10, 10), (0, 0, 10, 10)) == (1.0, 1.0)
    iou, contained = overlap((0, 0, 10, 10), (2, 2, 6, 6))
    assert iou == pytest.approx(0.16) and contained == 1.0
    assert overlap((0, 0, 10, 10), (20, 20, 30, 30)) == (0.0, 0.0)


def test_first_failure_is_shown_and_should_rules_only_warn() -> None:
    findings = [("a.png", Finding(Status.PASS)), ("b.png", Finding(Status.FAIL, "x=1")),
                ("c.png", Finding(Status.FAIL, "x=2"))]  # fmt: skip
    result = combine("json.x", "x", findings)
    assert result.status is Status.FAIL and result.detail == "b.png: x=1 (and 1 more samples)"
    assert combine("errors.x", "x", findings, should=True).status is Status.WARN


def test_warn_and_skip_keep_the_verdict_passing() -> None:
    report = Report("http://h/extract", "ocr", (
        CheckResult("a", "a", Status.PASS, ""), CheckResult("b", "b", Status.WARN, "500"),
        CheckResult("c", "c", Status.SKIP, "no --secret given"),
    ))  # fmt: skip
    assert report.passed
    table = render_table(report, width=100)
    assert "meets the contract: 1 PASS, 0 FAIL, 1 SKIP, 1 WARN" in table


def test_unreachable_url_fails_every_check_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{support.free_port()}/extract"
    assert run_check(url, kind="ocr", as_json=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["checks"]
    for c in report["checks"]:
        assert c["status"] == "FAIL" and "cannot connect" in c["detail"], c


@pytest.mark.parametrize(
    ("url", "kind"),
    [("127.0.0.1:8000/extract", "all"), ("ftp://host/extract", "all"),
     ("http://127.0.0.1:8000/extract", "pdf")],
)  # fmt: skip
def test_usage_errors_exit_2(url: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(url, kind=kind) == 2
    assert "extractor check:" in capsys.readouterr().err
