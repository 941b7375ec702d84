"""One decode of a live turn's window: what Whisper hears after the words already sent.

The words sent in the window are the decoder's forced prefix; the prompt is the client's
``prompt``, the last words of the session's finished turns (``DecodePolicy.history_words``,
off by default) and the turn's earlier text (before the window), as a whole file's prompt is
the text before its window; a hypothesis that repeats itself is cut (``repeats.unrepeated``).
A turn's first window is heard after the previous turn's end (``Item.context``): its audio
ahead of the turn's, its words ahead of the forced prefix, as much as fits in the shortest
encoder window with the turn (the decode then costs what the turn's alone does). Whisper hears
a turn alone worse than in a whole file: LibriVox's "ill-disposed" began a turn and was sent
as "old-sposed". Unlike the previous text as a prompt (which made tiny.en say it again), a
forced prefix is what the audio says, and the decoder continues after it. If it ends its text
there instead (a sentence's end, another voice next), the turn is heard alone from then on.
A partial decode also gives each word's slack, the audio it heard after the word's end, when
the policy confirms words by a margin (``DecodePolicy.margin``; word timings cost an alignment
pass, so they are asked for only then).
"""

from __future__ import annotations

import logging
import re

import numpy as np

from ..errors import EngineFailure
from .audio import SAMPLE_RATE
from .decoder import PAD_SECONDS, WindowDecoder
from .items import Context, DecodePolicy, Item
from .repeats import unrepeated

log = logging.getLogger(__name__)

CONTEXT_SILENT_SECONDS = 1.0  # a partial decode this far into a turn hearing nothing after the
# context: the turn is heard without it (a final decode: however short the turn)


def prompt(item: Item, session_prompt: str, words: int) -> str:
    """``session_prompt`` (the client's prompt, the earlier turns' last words) and the turn's
    words before the window being decoded."""
    earlier = item.transcript[: len(item.transcript) - len(item.window_text)].split()
    # Earlier turns' words (policy.history_words, off by default) once made tiny.en say them
    # again ("They say it will rain" three times in a row); now that a hypothesis repeating
    # the words sent is cut, they help one reader and carry a misheard sentence into the
    # next turn of a talk (bench/realtime.md).
    return " ".join([session_prompt, *(earlier[-words:] if words > 0 else [])]).strip()


def turn_end(
    decoder: WindowDecoder, audio: np.ndarray, text: str, seconds: float
) -> Context | None:
    """A finished turn's words ``text`` in its last ``seconds`` of ``audio``, and that audio,
    cut where Whisper's alignment says those words start: the next turn's context."""
    ends = decoder.word_ends(audio, text)
    words = text.split()
    return Context.of(audio, words, ends, seconds) if len(ends) == len(words) else None


def slide(decoder: WindowDecoder, policy: DecodePolicy, item: Item, audio: np.ndarray) -> None:
    """A window past ``policy.slide_seconds`` of ``audio`` (its audio so far) starts anew at
    the first word sent in its last ``policy.slide_keep`` seconds, by Whisper's alignment of
    the window's words, which stay forced from there on. A forced word costs the decoder a
    step (CTranslate2 steps through a prefix), dearer the longer the window: a long turn's
    decodes and its end then wait less. Unchanged where every word sent starts before, or
    the alignment does not fit the words (tried again once more words are sent)."""
    tried = (item.window, item.window_words)
    long = len(audio) > policy.slide_seconds * SAMPLE_RATE
    if (
        not (policy.slide_seconds > 0 and long and item.context is None)
        or item.slide_tried == tried
    ):
        return
    item.slide_tried = tried
    pieces = list(re.finditer(r"\S+", item.window_text))
    heard = audio[: max(item.sent_heard_at - item.window, 0)]  # holds every word sent
    if len(pieces) < 2 or len(pieces) != item.window_words or not len(heard):
        return
    try:
        ends = decoder.word_ends(heard, item.window_text)
    except EngineFailure as exc:
        log.warning("a live window's alignment failed: it grows on", extra={"error": str(exc)})
        return
    if len(ends) != len(pieces):
        return
    limit = len(audio) - policy.slide_keep * SAMPLE_RATE
    # A word's start is the end of the word before it (as Context.of reads them).
    first = next((k for k in range(1, len(ends)) if ends[k - 1] * SAMPLE_RATE >= limit), None)
    if first is None:
        return
    item.window += int(ends[first - 1] * SAMPLE_RATE)
    item.window_text = item.window_text[pieces[first].start() - 1 :]  # " word ...", as sent
    item.window_words -= first


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
    if item.context is not None:
        # The previous turn's end first, as much as fits in the encoder's shortest window
        # with the turn (no longer decode), its words forced ahead of the window's.
        room = decoder.min_window_seconds - PAD_SECONDS - len(audio) / SAMPLE_RATE
        context = item.context.last(int(room * SAMPLE_RATE))
        if context is not None:
            heard = _decoded(decoder, policy, item, [*context.words, *item.words],
                             np.concatenate([context.audio, audio]),
                             " ".join([*context.words, item.window_text]).strip(),
                             beam, session_prompt, timed)  # fmt: skip
            # A partial decode hearing nothing under a second into the turn is early; the
            # final one is not (a short "Yes." after a turn would be lost).
            early = timed and len(audio) < CONTEXT_SILENT_SECONDS * SAMPLE_RATE
            if heard[0] or early:
                return heard
        # tiny.en ended its text at the context's end, or the turn outgrew it: hear it alone
        item.context = None
    return _decoded(decoder, policy, item, item.words, audio, item.window_text, beam,
                    session_prompt, timed)  # fmt: skip


def _decoded(
    decoder: WindowDecoder,
    policy: DecodePolicy,
    item: Item,
    sent: list[str],
    audio: np.ndarray,
    prefix: str,
    beam: int,
    session_prompt: str,
    timed: bool,
) -> tuple[list[str], list[float] | None]:
    options = {"prefix": prefix, "prompt": prompt(item, session_prompt, policy.prompt_words)}
    if not (timed and policy.margin > 0):
        words = decoder.decode(audio, beam_size=beam, **options)
        return unrepeated(sent, words, policy.repeat_words), None
    words, ends = decoder.decode_timed(audio, beam_size=beam, **options)
    words = unrepeated(sent, words, policy.repeat_words)
    heard = len(audio) / SAMPLE_RATE
    return words, [heard - end for end in ends[: len(words)]]
