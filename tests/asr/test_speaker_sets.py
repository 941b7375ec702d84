"""The generated talks that tune and test speaker labels share no voice: a figure on the
held-out set or in the accuracy harness is on voices no threshold was chosen on."""

from __future__ import annotations

import pytest
from support import requires_espeak

from bench import talks
from bench.accuracy import TALKS


def _variant(voice: str) -> str:
    return voice.split("+", 1)[1]


def test_the_three_voice_pools_are_disjoint() -> None:
    pools = [set(talks.TUNING_VARIANTS), set(talks.TEST_VARIANTS), set(talks.ACCURACY_VARIANTS)]
    assert sum(len(pool) for pool in pools) == len(set().union(*pools))


def test_the_accuracy_talks_use_only_their_own_pool() -> None:
    voices = {_variant(voice) for spec in TALKS for voice in spec.voices}
    assert voices <= set(talks.ACCURACY_VARIANTS)


def test_the_voices_tests_and_earlier_tuning_used_are_in_the_tuning_pool() -> None:
    # extractor.samples.conversations' default talk (m3/f3/m7) was tuned on before the split.
    assert {"m3", "f3", "m7"} <= set(talks.TUNING_VARIANTS)


def test_no_accent_silently_drops_the_voice_variant() -> None:
    # espeak-ng 1.51 resolves "en-gb" to an mbrola voice that is not installed, and its
    # fallback ignores "+variant": every en-gb speaker sounded alike.
    accents = set(talks.ACCENTS) | {voice.split("+")[0] for spec in TALKS for voice in spec.voices}
    assert "en-gb" not in accents


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
@requires_espeak
def test_a_talk_is_the_same_every_time_and_sets_differ() -> None:
    first, again = talks.talk("tuning", 3), talks.talk("tuning", 3)
    assert first.voices == again.voices
    assert first.conversation.turns == again.conversation.turns
    tuned = {v.variant for n in range(4) for v in talks.talk("tuning", n).voices}
    tested = {v.variant for n in range(4) for v in talks.talk("test", n).voices}
    assert tuned <= set(talks.TUNING_VARIANTS) and tested <= set(talks.TEST_VARIANTS)
