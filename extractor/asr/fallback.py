"""Whisper's temperature fallback replaced by a deterministic one that never drops speech.

faster-whisper decodes each 30 s window with beam search, then judges the text: if it compresses
too well (zlib ratio over 2.4: "too repetitive") or its tokens are improbable (average log
probability under -1), it decodes again by sampling at rising temperatures and keeps the first
text that passes, or else the most probable one. For a service that two things rule out:

- **Sampling is chance.** CTranslate2's sampler cannot be seeded per request (its generator is
  a ``thread_local`` of its worker threads, seeded once when the thread first samples), so the
  same upload came back with other words on the next request, on a job, after a restart.
- **Chance lost speech.** When every sample failed, the text kept was often improbable, and
  with Whisper's no-speech probability over 0.6 faster-whisper then took the whole window for
  silence: a talk that says each sentence twice lost 28 s that bare faster-whisper, by luck of
  its own samples, kept that time (bench/repeats.md).

A window whose beam-search text fails goes down a fixed ladder instead, every step a beam search:

1. The text is kept as it is when it fails the ratio only, is probable, does not loop (no
   stretch said right after a copy of itself, :func:`loops`) and did not run to the decoder's
   length limit: speech that repeats a sentence a while later compresses well too.
2. Otherwise the window is decoded again without the text before it in the prompt. A loop is
   most often the previous window's text read on (Whisper's own sampling fallback drops it as
   well); a decode that passes is kept.
3. Otherwise, when a decode runs away repeating itself (over the ratio or looping, over half
   the decoder's length limit), the window is decoded once more without the text before it
   and with a repetition penalty
   (:data:`REPETITION_PENALTY`): the deterministic stand-in for the temperature that breaks a
   loop in faster-whisper's sampling. A decode that passes is kept.
4. Otherwise the best of the decodes by faster-whisper's own rule (those under the ratio
   first, then the most probable) is kept and **marked**, not deleted.

The next window then starts afresh, without a repetitive or re-decoded text in its prompt, as
faster-whisper does after a window it had to sample.

When the audio given is known to be speech (the VAD found it), the engine has faster-whisper skip
no window as silence (``no_speech_threshold=None``), and bare faster-whisper's verdict is kept as
a mark instead. The mark of each window is the segment's
``suspect`` (:data:`MARKS`), which the JSON reply and ``verbose_json`` show, so a client can
review or drop what the decoder doubted; the text is never silently thinner than bare's.

A temperature asked for explicitly (``temperature`` > 0) is sampled, as OpenAI's API does: that
request asked for chance.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

# A stretch said this many times back to back is a loop (bench/repeats.py: a talk's beam text
# said two sentences twice over that were said once; with 3 that went through as speech).
LOOP_REPEATS = 2
# The third decode of a window whose text runs away repeating itself: beam search with each
# token already in the text made this much less likely (CTranslate2's repetition_penalty).
# Chosen on a long run of short phrases said over and over (the aligner's phrases: tuning, see
# docs/accuracy.md): WER 84.3% through `extractor extract` without it, 56.0% with it (76.9% at
# 1.3 and 57.1% at 2.0, tried on every repeating window); bare faster-whisper's sampling
# 51-55%. Tried on every window that repeats (not only those that run away), it cost the quick
# talkers of bench/repeats.py 4.7 points.
REPETITION_PENALTY = 1.5
# faster-whisper's own default: over this no-speech probability (with an improbable text) it
# takes a window for silence. Used to mark a window it would have skipped.
NO_SPEECH_THRESHOLD = 0.6

# What the decoder doubted about a window it kept, in the order one mark wins over another:
MARKS = {
    "no_speech": "bare faster-whisper would have taken the window for silence and dropped it",
    "loop": "every decode repeats a stretch right after itself or compresses over the ratio",
    "improbable": "every decode's average log probability is under the threshold",
}

# One decode as faster-whisper passes it on: (result, avg_logprob, temperature, compression ratio)
Decode = tuple[Any, float, float, float]

# The mark of the window this thread decoded last, read by the engine as that window's segments
# come out of faster-whisper (they do before the next window is decoded).
_window = threading.local()


def install(model: Any) -> None:
    """Put the fallback below in front of ``model``'s (a ``WhisperModel``) own."""
    original: Callable[..., Decode] = model.generate_with_fallback

    def generate_with_fallback(
        encoder_output: Any, prompt: list[int], tokenizer: Any, options: Any
    ) -> Decode:
        _read_on(options)
        _window.mark = None
        temperatures = list(options.temperatures)
        if options.compression_ratio_threshold is None or temperatures[0] > 0:
            return original(encoder_output, prompt, tokenizer, options)
        beam_only = dataclasses.replace(options, temperatures=[0.0])
        beam = original(encoder_output, prompt, tokenizer, beam_only)
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
        tried = [beam]
        # The window's own prompt, without the text before it (which follows sot_prev).
        own = prompt[prompt.index(tokenizer.sot) :] if tokenizer.sot in prompt else prompt
        if prompt and prompt[0] == tokenizer.sot_prev:  # the text before the window is in it
            afresh = original(encoder_output, own, tokenizer, beam_only)
            tried.append(afresh)
            if not _fails(afresh, options):
                _start_afresh(options)
                return afresh
        if any(_runs_away(decode, options, tokenizer.eot, model.max_length) for decode in tried):
            damped_options = dataclasses.replace(beam_only, repetition_penalty=REPETITION_PENALTY)
            damped = original(encoder_output, own, tokenizer, damped_options)
            tried.append(damped)
            if not _fails(damped, options):
                _start_afresh(options)
                return damped
        _start_afresh(options)
        least_bad = _least_bad(tried, options.compression_ratio_threshold)
        return _doubted(least_bad, options, tokenizer.eot)

    model.generate_with_fallback = generate_with_fallback


def mark() -> str | None:
    """The mark (a key of :data:`MARKS`) of the window decoded last in this thread, if any."""
    return getattr(_window, "mark", None)


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


def _repeats(decode: Decode, options: Any, end_of_text: int) -> bool:
    """Whether ``decode`` compresses over the ratio or loops."""
    ratio_limit = options.compression_ratio_threshold
    return decode[3] > ratio_limit or loops(decode[0].sequences_ids[0], end_of_text)


def _runs_away(decode: Decode, options: Any, end_of_text: int, max_length: int) -> bool:
    """Whether ``decode`` repeats itself over at least half the decoder's length limit (224
    tokens): more than anyone says in a 30 s window, so the decoder read on where the speech
    did not (a talk that says each sentence twice stays well under it)."""
    long = len(decode[0].sequences_ids[0]) >= max_length // 2
    return long and _repeats(decode, options, end_of_text)


def _doubted(decode: Decode, options: Any, end_of_text: int) -> Decode:
    """``decode``, kept though it failed every check, its window's mark noted."""
    result = decode[0]
    if not _probable(decode, options) and result.no_speech_prob > NO_SPEECH_THRESHOLD:
        _window.mark = "no_speech"  # skipped by faster-whisper unless the audio is speech
    elif _repeats(decode, options, end_of_text):
        _window.mark = "loop"
    else:
        _window.mark = "improbable"
    return decode


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


def _least_bad(tried: list[Decode], ratio_limit: float) -> Decode:
    """What faster-whisper keeps when every decode failed: the most probable of those under the
    ratio (of all, if none is); the first of equals."""
    under = [decode for decode in tried if decode[3] <= ratio_limit] or tried
    return max(under, key=lambda decode: decode[1])
