"""What a forced word costs a live decode (bench/realtime.md): one espeak-ng window
decoded by the live decoder (``WindowDecoder``, one thread, beam 5) with none, some or all of
its words forced as the prefix, beside a greedy decode and the encoder alone (medians of 7)::

    OPENBLAS_NUM_THREADS=1 python -m bench.realtime_prefix
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from extractor.realtime.decoder import WindowDecoder
from extractor.samples import decode_wav, speech_wav

TEXT = (
    "They say it will rain in the afternoon but stay dry until noon. The museum opens a new"
    " exhibition about ships next week, and the children walked across the frozen lake."
)
RUNS = 7


def median_seconds(call: Callable[[], object]) -> float:
    spent = []
    for _ in range(RUNS):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


def main() -> int:
    samples, rate = decode_wav(speech_wav(TEXT))  # en-us, 150 words a minute
    positions = np.arange(0, samples.shape[1], rate / 16_000)
    audio = np.interp(positions, np.arange(samples.shape[1]), samples[0]).astype(np.float32)
    decoder = WindowDecoder(None, threads=1)
    decoder.load()
    words = decoder.decode(audio, beam_size=5)
    print(f"{len(audio) / 16_000:.1f} s, {len(words)} words: {' '.join(words)}")
    for forced in sorted({0, 5, 15, len(words) - 3, len(words)}):
        prefix = " ".join(words[:forced])

        def decode(prefix: str = prefix) -> list[str]:
            return decoder.decode(audio, prefix=prefix, beam_size=5)

        seconds = median_seconds(decode)
        print(f"beam 5, {forced} words forced: {seconds:.3f} s")
    print(f"greedy, nothing forced: {median_seconds(lambda: decoder.decode(audio)):.3f} s")
    print(f"the encoder alone: {median_seconds(lambda: decoder._encode(audio)):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
