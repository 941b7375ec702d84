"""One decode of a live turn's window: what Whisper hears after the words already sent.

The words sent in the window are the decoder's forced prefix, the turn's earlier text (before
the window) its prompt, and a hypothesis that repeats itself is cut (``repeats.unrepeated``).
A partial decode also gives each word's slack, the audio it heard after the word's end, when
the policy confirms words by a margin (``DecodePolicy.margin``; word timings cost an alignment
pass, so they are asked for only then).
"""

from __future__ import annotations

import numpy as np

from .audio import SAMPLE_RATE
from .decoder import WindowDecoder
from .items import DecodePolicy, Item
from .repeats import unrepeated


def prompt(item: Item, session_prompt: str, words: int) -> str:
    """The session's prompt and the turn's words before the window being decoded."""
    earlier = item.transcript[: len(item.transcript) - len(item.window_text)].split()
    # Only this turn's own earlier text: a prompt holding what was said in earlier turns
    # made tiny.en repeat it ("They say it will rain" heard three times in a row).
    return " ".join([session_prompt, *(earlier[-words:] if words > 0 else [])]).strip()


def hypothesis(
    decoder: WindowDecoder,
    policy: DecodePolicy,
    item: Item,
    audio: np.ndarray,
    beam: int,
    session_prompt: str,
    *,
    timed: bool = False,
) -> tuple[list[str], list[float] | None]:
    """The words after the window's sent ones in ``audio`` (the window's), and with ``timed``
    and a policy margin each word's slack in seconds (else None)."""
    options = {
        "prefix": item.window_text,
        "prompt": prompt(item, session_prompt, policy.prompt_words),
    }
    if not (timed and policy.margin > 0):
        words = decoder.decode(audio, beam_size=beam, **options)
        return unrepeated(item.words, words, policy.repeat_words), None
    words, ends = decoder.decode_timed(audio, beam_size=beam, **options)
    words = unrepeated(item.words, words, policy.repeat_words)
    heard = len(audio) / SAMPLE_RATE
    return words, [heard - end for end in ends[: len(words)]]
