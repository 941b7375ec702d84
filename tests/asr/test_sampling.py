"""Whisper's fallback samples drawn one at a time (extractor.asr.sampling), on the real model."""

from __future__ import annotations

import threading
from typing import Any

import ctranslate2
import numpy as np
import pytest
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer
from support import requires_espeak

from extractor.asr import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine, bundled_model_dir
from extractor.asr.sampling import OneSampleAtATime
from extractor.errors import EngineTimeout
from extractor.samples import decode_wav, speech_wav


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

    def __getattr__(self, name: str) -> Any:  # encode, is_multilingual, ...
        return getattr(self.model, name)

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


def test_a_cancel_stops_the_samples_between_decodes(whisper: tuple) -> None:
    model, encoded, prompt = whisper
    recorded = Recorded(model.model)

    def interrupt() -> None:
        if len(recorded.calls) == 2:
            raise EngineTimeout("cancelled")

    sampling = dict(beam_size=1, sampling_topk=0, sampling_temperature=1.0, max_length=40)
    with pytest.raises(EngineTimeout):
        OneSampleAtATime(recorded, interrupt).generate(
            encoded, [prompt], num_hypotheses=5, **sampling
        )
    assert len(recorded.calls) == 2  # the third sample was never decoded


class CancelsAfterFirst(Recorded):
    """The engine's model, which cancels the transcription once it has decoded once."""

    def __init__(self, model: Any, cancel: threading.Event) -> None:
        super().__init__(model)
        self.cancel = cancel

    def generate(self, *args: Any, **kwargs: Any) -> list[Any]:
        results = super().generate(*args, **kwargs)
        self.cancel.set()
        return results


@requires_espeak
def test_a_cancelled_transcription_stops_before_its_next_decode() -> None:
    engine = FasterWhisperEngine(None)
    engine.load()
    wrapper = engine._model.model
    cancel = threading.Event()
    recorded = CancelsAfterFirst(wrapper._model, cancel)
    wrapper._model = recorded
    wav, rate = decode_wav(speech_wav("One two three four five six seven eight nine ten."))
    audio = np.interp(np.arange(0, wav.shape[1], rate / 16_000), np.arange(wav.shape[1]), wav[0])
    # A positive temperature samples 5 hypotheses (best_of) for the window: before this
    # check, all 5 were decoded before the cancel was looked at; now the second is not.
    options = TranscribeOptions(vad=False, temperature=0.5, cancel=cancel)
    with pytest.raises(EngineTimeout):
        engine.transcribe(audio.astype(np.float32), options)
    assert len(recorded.calls) == 1
    cancel.clear()
    assert engine.transcribe(audio[: 16_000 * 3].astype(np.float32), TranscribeOptions()).segments


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
