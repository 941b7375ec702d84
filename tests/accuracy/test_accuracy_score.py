"""The accuracy harness's scorers on cases worked out by hand (no engine, no server)."""

from __future__ import annotations

import pytest

from bench.accuracy_score import (
    Span,
    normalize_page,
    normalize_speech,
    page_cer,
    speech_errors,
    speech_time,
    words_right,
)


def test_speech_is_normalised_as_the_whisper_paper_does() -> None:
    assert normalize_speech("And Mr. John Dashwood, ill-disposed?") == (
        "and mister john dashwood ill disposed"
    )
    rates = speech_errors(["he was not an ill disposed young man"], ["He was not ill-disposed."])
    assert rates.words == 8
    assert rates.wer == pytest.approx(3 / 8)  # "an", "young", "man" dropped


def test_page_text_keeps_case_and_punctuation_but_not_typography() -> None:
    assert normalize_page("\u201cLicensor\u201d  shall\nmean \ufb01le \u2014 x") == (
        '"Licensor" shall mean file - x'
    )
    assert page_cer(["Work"], ["work"]) == pytest.approx(1 / 4)


def test_words_right_maps_labels_onto_speakers_one_to_one() -> None:
    truth = [Span(0, 5, "a"), Span(5, 10, "b")]
    swapped = [Span(1, 2, "Speaker 2"), Span(6, 7, "Speaker 1"), Span(8, 9, "Speaker 1")]
    assert words_right(truth, swapped) == (1.0, 2)
    one_label = [Span(1, 2, "S"), Span(6, 7, "S"), Span(8, 9, "S")]
    assert words_right(truth, one_label) == (pytest.approx(2 / 3), 1)


def test_speech_time_and_der_against_a_reference() -> None:
    truth = [Span(0, 5, "a"), Span(5, 10, "b")]
    late_change = [Span(0, 6, "x"), Span(6, 10, "y")]  # 1 s of b given to a's label
    scored = speech_time(truth, late_change)
    assert scored.right == pytest.approx(0.9)
    assert scored.der == pytest.approx(0.1)
    assert scored.missed == 0
    nothing_after_8 = [Span(0, 5, "x"), Span(5, 8, "y")]
    scored = speech_time(truth, nothing_after_8)
    assert (scored.right, scored.der, scored.missed) == pytest.approx((0.8, 0.2, 0.2))


def test_a_collar_leaves_the_frames_around_each_reference_boundary_unscored() -> None:
    reference = [Span(0, 5, "a"), Span(5, 10, "b")]
    late = [Span(0, 5.2, "x"), Span(5.2, 10, "y")]  # the change heard 0.2 s late
    assert speech_time(reference, late).der == pytest.approx(0.02)
    assert speech_time(reference, late, collar=0.25).der == 0.0
    assert speech_time(reference, late, collar=0.1).der > 0
