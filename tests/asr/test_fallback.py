"""Whisper's fallback kept for loops, not set off by speech that repeats (extractor.asr.fallback),
on the real model and tokenizer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from faster_whisper.tokenizer import Tokenizer
from support import requires_espeak

from extractor import samples
from extractor.asr import TranscribeOptions, fallback
from extractor.asr.faster import FasterWhisperEngine
from extractor.samples.conversations import conversation


@pytest.fixture(scope="module")
def engine() -> FasterWhisperEngine:
    engine = FasterWhisperEngine(None)
    engine.load()
    return engine


@pytest.fixture(scope="module")
def talk() -> tuple[np.ndarray, float]:
    """40 s in which "They say it will rain in the afternoon but stay dry until noon" is said
    three times between other sentences: the first 30 s window's text compresses at 2.5."""
    made = conversation(turns=6, seed=3)
    positions = np.arange(0, made.samples.shape[1], made.rate / 16_000)
    audio = np.interp(positions, np.arange(made.samples.shape[1]), made.samples[0])
    return audio.astype(np.float32), made.duration


def tokens(engine: FasterWhisperEngine, text: str) -> list[int]:
    tokenizer = Tokenizer(engine.whisper_model().hf_tokenizer, False, "transcribe", "en")
    return list(tokenizer.encode(text))


def test_a_stretch_said_again_right_after_itself_is_a_loop(engine: FasterWhisperEngine) -> None:
    eot = engine.whisper_model().hf_tokenizer.token_to_id("<|endoftext|>")
    refrain = "They say it will rain in the afternoon."
    apart = f"{refrain} Let us take the bus. {refrain} Water the plants. {refrain}"
    assert not fallback.loops(tokens(engine, apart), eot)
    looped = "Let us take the bus. I think so. Let us take the bus. I think so. Let us"
    assert fallback.loops(tokens(engine, looped), eot)
    # timestamps between the copies do not hide them
    stamped = [token for token in tokens(engine, "Thank you.") for token in (token, eot + 1600)]
    assert fallback.loops(stamped * 2, eot)


@requires_espeak
def test_speech_that_repeats_is_read_whole_and_the_same_every_time(
    engine: FasterWhisperEngine, talk: tuple[np.ndarray, float]
) -> None:
    audio, seconds = talk
    first, second = (engine.transcribe(audio, TranscribeOptions(language="en")) for _ in range(2))
    # The case the rule is for: beam search's text fails only the compression ratio.
    assert first.segments[0].detail["compression_ratio"] > 2.4
    assert first.segments[0].detail["avg_logprob"] > -1
    assert [s.text for s in first.segments] == [s.text for s in second.segments]
    assert all(s.detail["temperature"] == 0 for s in first.segments)  # nothing sampled
    # Not a window lost: before, one run in four kept 8 of the 40 s (the rest taken for silence).
    assert first.segments[-1].end > seconds - 5
    text = " ".join(s.text for s in first.segments).lower()
    assert text.count("until noon") == 3 and "garden" in text and "expected" in text
    # The next window does not read on from the repetitive one: conditioned on it, it looped.
    eot = engine.whisper_model().hf_tokenizer.token_to_id("<|endoftext|>")
    assert not fallback.loops([t for s in first.segments for t in s.detail["tokens"]], eot)


class Decodes:
    """The engine's CTranslate2 model, the temperature of each ``generate`` call noted."""

    def __init__(self, model: Any) -> None:
        self.model, self.temperatures, self.texts = model, [], []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.temperatures.append(kwargs.get("sampling_temperature", 0.0))
        results = self.model.generate(*args, **kwargs)
        self.texts.extend(result.sequences_ids[0] for result in results)
        return results


@requires_espeak
def test_a_text_said_again_right_after_itself_still_falls_back_to_sampling(
    engine: FasterWhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beam-search text in which a stretch follows a copy of itself is sampled again, as
    faster-whisper always did. The decoder's own loops depend on the CPU's arithmetic (the talk
    above, read on without the fresh start, looped in its second window on an Intel host and
    not on an AMD one), so the stretch is said back to back here: its beam text repeats on any
    CPU, and the rule cannot tell it from a loop. What the samples say is chance (one run in
    twenty garbles the sentence, "Netastake mamaz."), so the text is checked to be one the decoder
    gave, not for its words."""
    decodes = Decodes(engine.whisper_model().model._model)
    monkeypatch.setattr(engine.whisper_model().model, "_model", decodes)
    audio, rate = samples.decode_wav(samples.speech("Let us take the bus. " * 4, "wav"))
    positions = np.arange(0, audio.shape[1], rate / 16_000)
    mono = np.interp(positions, np.arange(audio.shape[1]), audio[0]).astype(np.float32)
    read = engine.transcribe(mono, TranscribeOptions(language="en"))
    # its beam search: kept if not a loop; here it is one, so samples follow
    assert decodes.temperatures[0] == 0
    assert len(decodes.temperatures) > 1 and decodes.temperatures[1] > 0
    assert read.segments[0].detail["temperature"] > 0
    eot = engine.whisper_model().hf_tokenizer.token_to_id("<|endoftext|>")
    kept = [token for s in read.segments for token in s.detail["tokens"] if token < eot]
    assert kept in [[token for token in text if token < eot] for text in decodes.texts]


def test_when_every_temperature_fails_the_choice_is_faster_whispers() -> None:
    """faster-whisper keeps the most probable decode under the ratio (of all, if none is),
    reported at the last temperature; the beam decode, now decoded apart, is among them."""
    beam_over = ("beam", -0.2, 0.0, 3.1)
    beam_under = ("beam", -1.2, 0.0, 1.5)
    sampled_over = ("sampled", -0.5, 1.0, 2.9)
    sampled_under = ("sampled", -1.4, 1.0, 1.4)
    assert fallback._least_bad(beam_over, sampled_under, 2.4) == ("sampled", -1.4, 1.0, 1.4)
    assert fallback._least_bad(beam_under, sampled_over, 2.4) == ("beam", -1.2, 1.0, 1.5)
    assert fallback._least_bad(beam_under, sampled_under, 2.4) == ("beam", -1.2, 1.0, 1.5)
    assert fallback._least_bad(beam_over, sampled_over, 2.4) == ("beam", -0.2, 1.0, 3.1)
