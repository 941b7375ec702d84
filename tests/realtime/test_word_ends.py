"""A timed decode: each word with where it ends in the audio (the margin policy's input)."""

from __future__ import annotations

import numpy as np
from realtime_support import ALIKE, likeness, pcm, transcript_words
from support import requires_espeak

from extractor.realtime.decoder import WindowDecoder

pytestmark = requires_espeak


def test_a_timed_decode_gives_each_word_its_end(decoder: WindowDecoder) -> None:
    speech = np.frombuffer(pcm("Good morning, how are you today?", rate=16_000), "<i2")
    audio = np.concatenate([speech.astype(np.float32) / 32768, np.zeros(16_000, np.float32)])
    words, ends = decoder.decode_timed(audio, beam_size=5)
    # The words of the untimed decode (which ones tiny.en hears depends on the CPU).
    assert words == decoder.decode(audio, beam_size=5) and len(words) >= 4
    assert len(ends) == len(words) and ends == sorted(ends)
    # Every word but the last ends within the speech, before the second of silence.
    assert ends[0] > 0 and ends[-2] <= len(speech) / 16_000 + 0.2
    # With the first words forced, only the rest come back, timed in the same audio.
    rest, rest_ends = decoder.decode_timed(audio, prefix=" ".join(words[:2]), beam_size=5)
    assert likeness(" ".join(rest), transcript_words(" ".join(words[2:]))) >= ALIKE, rest
    assert rest_ends[0] > ends[1] - 0.2
