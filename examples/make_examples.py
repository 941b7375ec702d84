"""Write the files the documentation's examples upload, from this project's own sample helpers.

Run from the repository root: ``.venv/bin/python examples/make_examples.py``. Text is drawn with
Pillow (DejaVu Sans) and speech is spoken by espeak-ng, so every file is this project's own
work, under its licence (see examples/README.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from extractor import samples

HERE = Path(__file__).parent
SCAN = ["Invoice number 4417 for garden tools", "Delivered to Harbor Street warehouse"]
SECOND_PAGE = ["Second page mentions purple elephants", "and seven quiet libraries"]
SPOKEN = "The weather is sunny today and we will walk to the park."
FIRST_VOICE = "Did you finish the report for the meeting on Friday?"
SECOND_VOICE = "Yes, I sent it to the whole team this morning."
LIVE_RATE = 24_000  # Hz: OpenAI's Realtime PCM rate, so the live example sends the file as is


def page(lines: list[str]) -> samples.TextPage:
    """A short page: two lines of text at 150 dpi, small enough to keep in git."""
    return samples.text_page(lines, size=(1240, 400))


def main() -> None:
    (HERE / "scan.png").write_bytes(samples.encode_image(page(SCAN).image, "PNG"))
    (HERE / "scan.pdf").write_bytes(samples.pdf([page(SCAN), page(SECOND_PAGE)]))
    spoken, rate = samples.decode_wav(samples.speech_wav(SPOKEN))
    count = round(spoken.shape[1] * LIVE_RATE / rate)
    resampled = np.interp(np.linspace(0, spoken.shape[1] - 1, count), np.arange(spoken.shape[1]),
                          spoken[0])  # fmt: skip
    (HERE / "speech.wav").write_bytes(samples.encode_audio(resampled[None, :], LIVE_RATE, "wav"))
    stereo, rate = samples.decode_wav(samples.two_speaker_stereo(FIRST_VOICE, SECOND_VOICE))
    (HERE / "two-voices.mp3").write_bytes(samples.encode_audio(stereo, rate, "mp3"))


if __name__ == "__main__":
    main()
