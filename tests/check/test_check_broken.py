"""The kit catches each contract violation by the rule that names it, and only by that rule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broken_extractors import broken_app, serving

from extractor import samples
from extractor.check import Status, check, run_check
from extractor.check import probes as kit_probes
from extractor.web.app import create_app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broken_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One proxy over one real-engine app for the whole module; faults are chosen by path."""
    real = create_app({"tmp_dir": str(tmp_path_factory.mktemp("requests"))})
    try:
        with serving(broken_app(real)) as base:
            yield base
    finally:
        real.extensions["extractor"].close()


def kinds() -> str:
    return "all" if samples.have_espeak() else "ocr"


def test_a_faithful_proxy_passes_every_rule(broken_base: str) -> None:
    report = check(f"{broken_base}/ok/extract", kind=kinds())
    assert report.failures() == [], report.checks
    skipped = [c.id for c in report.checks if c.status is not Status.PASS]
    assert skipped == ["auth.secret"]  # no --secret given


AUDIO_ONLY = {"seconds"}


@pytest.mark.parametrize(
    ("fault", "rule", "words"),
    [
        ("wrong-content-type", "http.content-type", "text/html"),
        ("seconds", "json.timestamps-ms", "timestamps look like seconds, not milliseconds"),
        ("ccw", "json.corners", "counter-clockwise"),
        ("missing-page", "json.pages", "has no entry in pages"),
        ("blank-lines", "text.no-blank-lines", "line 2 is blank"),
        ("past-tokens", "json.label-tokens", "endTokenIndex"),
        ("exclusive-end", "json.label-chars", "inclusive"),
        ("shifted-boxes", "json.boxes", "overlap their drawn word"),
        ("no-label-sets", "json.schema", "'labelSets' is a required property"),
        ("500", "http.status", "HTTP 500"),
    ],
)
def test_each_broken_extractor_fails_by_its_rule_alone(
    broken_base: str, fault: str, rule: str, words: str
) -> None:
    if fault in AUDIO_ONLY and not samples.have_espeak():
        pytest.skip("espeak-ng is not installed")
    report = check(f"{broken_base}/{fault}/extract", kind=kinds())
    assert report.failures() == [rule], [c for c in report.checks if c.status is Status.FAIL]
    detail = next(c.detail for c in report.checks if c.id == rule)
    assert words in detail


def test_broken_extractor_exits_1_and_names_the_rule(
    broken_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_check(f"{broken_base}/ccw/extract", kind="ocr") == 1
    table = capsys.readouterr().out
    assert "json.corners" in table and "FAIL" in table and "does NOT meet the contract" in table


def test_text_only_extractor_has_json_rules_skipped_not_failed(broken_base: str) -> None:
    report = check(f"{broken_base}/text-only/extract", kind="ocr")
    assert report.passed, report.checks
    for c in report.checks:
        if c.id.startswith("json."):
            assert c.status is Status.SKIP, c
            assert "406 to Accept: application/json" in c.detail
        elif c.id.startswith(("text.", "http.")):
            assert c.status is Status.PASS, c


def test_audio_is_skipped_with_the_reason_without_espeak(
    broken_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kit_probes.samples, "have_espeak", lambda: False)
    report = check(f"{broken_base}/ok/extract", kind="audio")
    assert report.passed
    sample_rules = [c for c in report.checks if not c.id.startswith(("errors.", "auth."))]
    assert sample_rules and all(c.status is Status.SKIP for c in sample_rules)
    assert all("espeak-ng is not installed" in c.detail for c in sample_rules)
