"""Whisper's fallback samples drawn one at a time (extractor.asr.sampling), on the real model."""

from __future__ import annotations

from typing import Any

import ctranslate2
import numpy as np
import pytest
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from extractor.asr.faster import bundled_model_dir
from extractor.asr.sampling import OneSampleAtATime


@pytest.fixture(scope="module")
def whisper() -> tuple[WhisperModel, ctranslate2.StorageView, list[int]]:
    model = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8", cpu_threads=1)
    noise = np.random.default_rng(5).normal(0, 0.05, 5 * 16_000).astype(np.float32)
    features = model.feature_extractor(noise)[:, :3000]
    encoded = model.model.encode(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])), to_cpu=False
    )
    tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
    return model, encoded, list(tokenizer.sot_sequence)


class Recorded:
    """The real model, its ``generate`` calls and results noted."""

    def __init__(self, model: Any) -> None:
        self.model, self.calls, self.results = model, [], []

    def generate(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.calls.append(kwargs)
        results = self.model.generate(*args, **kwargs)
        self.results += results
        return results


def test_the_best_of_samples_drawn_one_at_a_time_is_kept(whisper: tuple) -> None:
    model, encoded, prompt = whisper
    recorded = Recorded(model.model)
    sampling = dict(beam_size=1, sampling_topk=0, sampling_temperature=1.0, max_length=40,
                    return_scores=True, return_no_speech_prob=True)  # fmt: skip
    (kept,) = OneSampleAtATime(recorded).generate(encoded, [prompt], num_hypotheses=5, **sampling)
    assert [call["num_hypotheses"] for call in recorded.calls] == [1] * 5
    best = max(recorded.results, key=lambda result: result.scores[0])
    assert kept.scores == best.scores and kept.sequences_ids == best.sequences_ids
    assert len({tuple(result.sequences_ids[0]) for result in recorded.results}) > 1  # samples


def test_beam_search_goes_through_unchanged(whisper: tuple) -> None:
    model, encoded, prompt = whisper
    beam = dict(beam_size=5, max_length=40, return_scores=True)
    (direct,) = model.model.generate(encoded, [prompt], **beam)
    (through,) = OneSampleAtATime(model.model).generate(encoded, [prompt], **beam)
    assert through.sequences_ids == direct.sequences_ids and through.scores == direct.scores
    assert OneSampleAtATime(model.model).is_multilingual == model.model.is_multilingual


def test_encode_trims_the_heap_first_and_encodes_the_same(
    whisper: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's encoder starts on a trimmed heap (bench/memory.md: a window yielding no
    segment left the fallback's freed memory under the next encoder), with the same output."""
    from extractor.asr import sampling

    model = whisper[0]
    trims: list[int] = []
    monkeypatch.setattr(sampling, "trim_heap", lambda: trims.append(1))
    noise = np.random.default_rng(6).normal(0, 0.05, 3 * 16_000).astype(np.float32)
    features = ctranslate2.StorageView.from_array(
        np.ascontiguousarray(model.feature_extractor(noise)[:, :3000][None])
    )
    direct = np.array(model.model.encode(features, to_cpu=True))
    through = np.array(OneSampleAtATime(model.model).encode(features, to_cpu=True))
    assert trims == [1]
    np.testing.assert_array_equal(through, direct)
