"""Whisper's fallback kept for loops, not set off by speech that repeats (extractor.asr.fallback),
on the real model and tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
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


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
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
    """The engine's CTranslate2 model, each ``generate`` call's prompt and temperature noted."""

    def __init__(self, model: Any) -> None:
        self.model, self.temperatures, self.prompts, self.texts = model, [], [], []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def generate(self, features: Any, prompts: Any, *args: Any, **kwargs: Any) -> Any:
        self.temperatures.append(kwargs.get("sampling_temperature", 0.0))
        self.prompts.append(list(prompts[0]))
        results = self.model.generate(features, prompts, *args, **kwargs)
        self.texts.extend(result.sequences_ids[0] for result in results)
        return results


def within(part: list[int], whole: list[int]) -> bool:
    """Whether ``part`` is a contiguous stretch of ``whole``."""
    return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
@requires_espeak
def test_a_text_said_again_right_after_itself_is_never_sampled(
    engine: FasterWhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stretch is said back to back, so its beam text repeats on any CPU and the rule cannot
    tell it from a loop: the window is decoded again by beam search, never sampled, and the same
    upload reads the same every time. Which decode wins depends on the CPU, so the text is
    checked to be one the decoder gave and its mark, if any, to be a known one."""
    decodes = Decodes(engine.whisper_model().model._model)
    monkeypatch.setattr(engine.whisper_model().model, "_model", decodes)
    audio, rate = samples.decode_wav(samples.speech("Let us take the bus. " * 4, "wav"))
    positions = np.arange(0, audio.shape[1], rate / 16_000)
    mono = np.interp(positions, np.arange(audio.shape[1]), audio[0]).astype(np.float32)
    options = TranscribeOptions(language="en", prompt="Let us take the bus.")
    read = engine.transcribe(mono, options)
    assert decodes.temperatures == [0.0] * len(decodes.temperatures)  # nothing sampled
    eot = engine.whisper_model().hf_tokenizer.token_to_id("<|endoftext|>")
    texts = [[token for token in text if token < eot] for text in decodes.texts]
    for segment in read.segments:  # each line is a stretch of one decode: nothing spliced
        kept = [token for token in segment.detail["tokens"] if token < eot]
        assert any(within(kept, text) for text in texts), segment.text
    assert all(s.detail.get("suspect") in (None, *fallback.MARKS) for s in read.segments)
    again = engine.transcribe(mono, options)
    assert [(s.text, s.start, s.end, s.detail) for s in again.segments] == [
        (s.text, s.start, s.end, s.detail) for s in read.segments
    ]


@dataclass
class Options:
    """The fields of faster-whisper's ``TranscriptionOptions`` the fallback reads."""

    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.2, 0.4])
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = None
    prompt_reset_on_temperature: float = 0.5
    repetition_penalty: float = 1.0


class Scripted:
    """A ``WhisperModel`` whose decodes of one window are given in advance: which decode the
    real model's text fails on is the CPU's to say, the order of the ladder is not."""

    max_length = 448

    def __init__(self, *decodes: tuple[float, float], tokens: int = 3) -> None:
        text = list(range(1, tokens + 1))  # no stretch said twice in a row: never loops
        self.decodes = [  # (avg_logprob, ratio) each
            (SimpleNamespace(sequences_ids=[text], no_speech_prob=0.1), logprob, 0.0, ratio)
            for logprob, ratio in decodes
        ]
        self.prompts: list[list[int]] = []
        self.temperatures: list[list[float]] = []
        self.penalties: list[float] = []

    def generate_with_fallback(self, _encoder: Any, prompt: list[int], _tok: Any, options: Any):
        self.prompts.append(prompt)
        self.temperatures.append(list(options.temperatures))
        self.penalties.append(options.repetition_penalty)
        return self.decodes[len(self.prompts) - 1]


TOKENIZER = SimpleNamespace(eot=50256, sot_prev=50360, sot=50257)
PROMPT = [50360, 10, 11, 12, 50257, 50362]  # the text before the window, then the window's own


@pytest.mark.parametrize(
    ("decodes", "tokens", "kept", "mark"),
    [
        (((-0.3, 1.6),), 3, 0, None),  # passes: nothing more
        (((-1.5, 1.6), (-0.4, 1.5)), 3, 1, None),  # improbable; without the prompt it passes
        (((-1.5, 1.6), (-1.2, 1.5)), 3, 1, "improbable"),  # both improbable: the more probable
        (((-1.5, 3.0), (-1.6, 2.9)), 3, 0, "loop"),  # both over the ratio: the more probable
        # both over the ratio and half the length limit long: once more with the repetition
        # penalty, which passes
        (((-1.5, 3.0), (-1.6, 2.9), (-0.6, 1.9)), 224, 2, None),
        # all three fail: the most probable, marked
        (((-1.5, 3.0), (-1.6, 2.9), (-1.7, 2.8)), 224, 0, "loop"),
    ],
)
def test_the_ladder_is_beam_then_beam_without_the_prompt_then_the_least_bad_marked(
    decodes: tuple[tuple[float, float], ...], tokens: int, kept: int, mark: str | None
) -> None:
    model = Scripted(*decodes, tokens=tokens)
    fallback.install(model)
    options = Options()
    chosen = model.generate_with_fallback(None, PROMPT, TOKENIZER, options)
    assert chosen is model.decodes[kept]
    assert fallback.mark() == mark
    assert model.temperatures == [[0.0]] * len(decodes)  # beam search only, never sampled
    assert model.prompts == [PROMPT, PROMPT[4:], PROMPT[4:]][: len(decodes)]
    penalty = fallback.REPETITION_PENALTY
    assert model.penalties == [1.0, 1.0, penalty][: len(decodes)]  # only once it runs away
    # a window decoded again (or doubted) leaves the next window's prompt without its text
    reset = options.prompt_reset_on_temperature < 0
    assert reset == (len(decodes) > 1)


@requires_espeak
def test_a_window_whose_text_loops_is_kept(engine: FasterWhisperEngine) -> None:
    """A sentence said back to back: its beam text loops on any CPU. Whichever decode of the
    ladder is kept (the words are the CPU's to say), the speech is not dropped: the lines reach
    into the last of the four sentences, and any mark is a known one."""
    audio, rate = samples.decode_wav(samples.speech("Let us take the bus. " * 4, "wav"))
    positions = np.arange(0, audio.shape[1], rate / 16_000)
    mono = np.interp(positions, np.arange(audio.shape[1]), audio[0]).astype(np.float32)
    read = engine.transcribe(mono, TranscribeOptions(language="en"))
    assert read.segments, "the window was dropped"
    assert read.segments[-1].end >= 0.75 * len(mono) / 16_000
    assert all(s.detail.get("suspect") in (None, *fallback.MARKS) for s in read.segments)


def test_when_every_decode_fails_the_choice_is_faster_whispers() -> None:
    """faster-whisper keeps the most probable decode under the ratio (of all, if none is)."""
    beam_over = ("beam", -0.2, 0.0, 3.1)
    beam_under = ("beam", -1.2, 0.0, 1.5)
    afresh_over = ("afresh", -0.5, 0.0, 2.9)
    afresh_under = ("afresh", -1.4, 0.0, 1.4)
    assert fallback._least_bad([beam_over, afresh_under], 2.4) == afresh_under
    assert fallback._least_bad([beam_under, afresh_over], 2.4) == beam_under
    assert fallback._least_bad([beam_under, afresh_under], 2.4) == beam_under
    assert fallback._least_bad([beam_over, afresh_over], 2.4) == beam_over
    assert fallback._least_bad([beam_over], 2.4) == beam_over
