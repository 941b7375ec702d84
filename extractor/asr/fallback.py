"""Whisper's temperature fallback, kept for loops and no longer set off by speech that repeats.

faster-whisper decodes each 30 s window with beam search, then judges the text: if it compresses
too well (zlib ratio over 2.4: "too repetitive") or its tokens are improbable (average log
probability under -1), it decodes again by sampling at rising temperatures. The ratio is meant to
catch the decoder looping ("Thank you. Thank you. Thank you."), but speech that itself repeats
trips it too: a talk saying one sentence three times among others compresses at 2.50 in its first
window. The samples then either copy that text (still over 2.4) or garble it, and which one wins
is chance. Over 20 runs of that 40 s talk (bench/realtime.py's espeak-ng talk), the server and
bare faster-whisper alike read it at 10-37% WER most times and at 82% one time in four: every
sample failed a check, the least improbable (-1.05) was kept, and with its probability under -1
faster-whisper took the window for silence and dropped 27 s of speech.

A loop says a stretch again right after itself; speech that repeats a sentence a while later
does not. So a beam-search text that fails only the ratio, with a probable average, is kept as it
is unless some stretch of it follows a copy of itself (:func:`loops`) or it ran to the decoder's
length limit. The next window then starts afresh, without that text in its prompt, as
faster-whisper does after a window it had to sample: read on from the talk's first window, the
second looped (68% WER). Every other window falls back exactly as before. bench/repeats.md
measures it on recordings the rule was not written on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

# A stretch said this many times back to back is a loop (bench/repeats.py: a talk's beam text
# said two sentences twice over that were said once; with 3 that went through as speech).
LOOP_REPEATS = 2

# One decode as faster-whisper passes it on: (result, avg_logprob, temperature, compression ratio)
Decode = tuple[Any, float, float, float]


def install(model: Any) -> None:
    """Put the fallback below in front of ``model``'s (a ``WhisperModel``) own."""
    original: Callable[..., Decode] = model.generate_with_fallback

    def generate_with_fallback(
        encoder_output: Any, prompt: list[int], tokenizer: Any, options: Any
    ) -> Decode:
        ratio_limit = options.compression_ratio_threshold
        _read_on(options)
        temperatures = list(options.temperatures)
        if ratio_limit is None or len(temperatures) < 2 or temperatures[0] > 0:
            return original(encoder_output, prompt, tokenizer, options)
        beam = original(
            encoder_output, prompt, tokenizer, dataclasses.replace(options, temperatures=[0.0])
        )
        if not _fails(beam, options):
            return beam
        tokens = beam[0].sequences_ids[0]
        if (
            _probable(beam, options)  # then it failed the ratio only
            and not loops(tokens, tokenizer.eot)
            and len(prompt) + len(tokens) < model.max_length
        ):
            _start_afresh(options)
            return beam
        sampled = original(
            encoder_output,
            prompt,
            tokenizer,
            dataclasses.replace(options, temperatures=temperatures[1:]),
        )
        return sampled if not _fails(sampled, options) else _least_bad(beam, sampled, ratio_limit)

    model.generate_with_fallback = generate_with_fallback


def loops(tokens: Sequence[int], end_of_text: int) -> bool:
    """Whether some stretch of the text's tokens (timestamps left out) is said ``LOOP_REPEATS``
    times back to back: for a stretch of ``size`` tokens, that many copies in a row are a run of
    ``(LOOP_REPEATS - 1) * size`` tokens each equal to the one ``size`` after it."""
    text = [token for token in tokens if token < end_of_text]
    for size in range(1, len(text) // LOOP_REPEATS + 1):
        needed, run = (LOOP_REPEATS - 1) * size, 0
        for token, later in zip(text, text[size:], strict=False):
            run = run + 1 if token == later else 0
            if run >= needed:
                return True
    return False


def _start_afresh(options: Any) -> None:
    """Have faster-whisper drop the text so far from the next window's prompt, as it does after a
    window it sampled at over ``prompt_reset_on_temperature`` (its check follows this window)."""
    options.extractor_reset_after = options.prompt_reset_on_temperature
    options.prompt_reset_on_temperature = -1.0  # below any temperature: the check passes


def _read_on(options: Any) -> None:
    """Undo :func:`_start_afresh` once that window is over (the next one is being decoded)."""
    if "extractor_reset_after" in vars(options):
        options.prompt_reset_on_temperature = vars(options).pop("extractor_reset_after")


def _probable(decode: Decode, options: Any) -> bool:
    return options.log_prob_threshold is None or decode[1] >= options.log_prob_threshold


def _fails(decode: Decode, options: Any) -> bool:
    """faster-whisper's own judgement of one decode (``generate_with_fallback``)."""
    result, _logprob, _temperature, ratio = decode
    limit = options.compression_ratio_threshold
    fails = (limit is not None and ratio > limit) or not _probable(decode, options)
    silent = (
        options.no_speech_threshold is not None
        and result.no_speech_prob > options.no_speech_threshold
        and not _probable(decode, options)
    )
    return fails and not silent


def _least_bad(beam: Decode, sampled: Decode, ratio_limit: float) -> Decode:
    """What faster-whisper keeps when every temperature failed, the beam decode among them: the
    most probable of those under the ratio (of all, if none is), at the last temperature."""
    under = [decode for decode in (beam, sampled) if decode[3] <= ratio_limit] or [beam, sampled]
    best = max(under, key=lambda decode: decode[1])
    return (best[0], best[1], sampled[2], best[3])
