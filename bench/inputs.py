"""The benchmark's own inputs, made on the spot so ``make bench`` needs no files.

Pages come from ``extractor.samples``; speech is espeak-ng reading sentences that never repeat,
because Whisper loops (and then drops its own output) on audio that says the same line again and
again, which would time a failure mode instead of ordinary transcription.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from extractor import samples

A4_300DPI = (2480, 3508)  # pixels
A4_150DPI = (1240, 1754)

SUBJECTS = (
    "the old farmer", "a young doctor", "my neighbour", "the quiet teacher", "our captain",
    "the tired driver", "a clever student", "the baker", "her brother", "the night guard",
    "a small child", "the new manager", "his grandmother", "the mayor", "a travelling singer",
)  # fmt: skip
VERBS = (
    "carried", "painted", "repaired", "counted", "described", "ordered", "visited", "cleaned",
    "measured", "borrowed", "delivered", "photographed", "planted", "found", "sold",
)  # fmt: skip
OBJECTS = (
    "a wooden chair", "three green apples", "the broken window", "a heavy parcel", "the red bicycle",
    "twelve paper cups", "an empty bottle", "the kitchen table", "a long letter", "the garden gate",
    "a silver spoon", "the winter coat", "four old maps", "a blue umbrella", "the station clock",
)  # fmt: skip
PLACES = (
    "near the river", "before breakfast", "after the storm", "in the market", "behind the school",
    "on Monday morning", "at the harbour", "during the concert", "beside the library",
    "under the bridge", "at midnight", "in the village square", "next to the bakery",
)  # fmt: skip


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` plain English sentences, each different from the others."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        line = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(PLACES)}."
        if line not in seen:
            seen.add(line)
            out.append(line[0].upper() + line[1:])
    return out


def varied_speech(seconds: float, seed: int = 0) -> bytes:
    """A 16-bit WAV of exactly ``seconds`` of varied speech (cut at the end, pauses between)."""
    # espeak-ng at 150 words a minute says about one of these sentences in 3 s.
    text = " ".join(sentences(int(seconds / 2.5) + 4, seed))
    spoken, rate = samples.decode_wav(samples.speech_wav(text))
    target = int(seconds * rate)
    if spoken.shape[1] < target:  # pad with silence rather than repeat
        spoken = np.pad(spoken, ((0, 0), (0, target - spoken.shape[1])))
    return samples.encode_audio(spoken[:, :target], rate, "wav")


@dataclass(frozen=True)
class Inputs:
    """Every generated file the benchmark posts, by role."""

    a4_page: Path  # a full A4 page of text at 300 dpi (PNG)
    pdf: Path  # 10 A4 pages at 300 dpi
    pdf_pages: tuple[Path, ...]  # its 10 pages as the server draws them: the bare CLI baseline
    small_page: Path  # half an A4 page at 150 dpi: OCR throughput
    tiny_page: Path  # three lines: the memory mix
    tiny_pdf: Path  # two small pages: the memory mix
    speech_60s: Path
    speech_10min: Path
    speech_clip: Path  # ~12 s: throughput
    speech_short: Path  # ~4 s: the memory mix
    silence: Path


def a4_page(
    page: int = 0, *, size: tuple[int, int] = A4_300DPI, lines: int = 50
) -> samples.TextPage:
    """A page full of ordinary text; ``page`` shifts the text so every page differs."""
    scale = size[0] / A4_150DPI[0]
    text = samples.a4_page_lines(lines + page, 10)[page:]
    return samples.text_page(
        text, page=page, size=size, font_size=int(30 * scale), margin=int(100 * scale),
        line_gap=1.6,
    )  # fmt: skip


def drawn_pages(pdf: Path, folder: Path) -> tuple[Path, ...]:
    """The pages of ``pdf`` drawn as the server draws them (its renderer, its default dpi and
    pixel limit), as lossless PNGs: the bare CLI baseline reads the pixels the server's
    Tesseract reads. Not the pages the PDF was made from: Pillow stores them as JPEGs, and
    the CLI took 16.58 s for the ten pages drawn against 15.24 s for the original PNGs
    (alternating, medians of 3), a difference of input that the baseline counted as the
    server's overhead before.
    """
    from extractor.config import Settings
    from extractor.media.pdf import PdfPages

    settings = Settings()
    drawn = []
    with tempfile.TemporaryDirectory(dir=folder) as workdir:
        document = PdfPages(
            pdf, Path(workdir), settings.pdf_dpi, settings.max_pages,
            fit_pixels=settings.ocr_max_pixels,
        )  # fmt: skip
        try:
            for index in range(document.count):
                page = document.render(index)
                path = folder / f"pdf-page-{index}.png"
                with Image.open(page.path) as image:
                    image.save(path, format="PNG")
                page.path.unlink()
                drawn.append(path)
        finally:
            document.close()
    return tuple(drawn)


def make_inputs(folder: Path, *, quick: bool = False) -> Inputs:
    """Write every input into ``folder`` (a quick run makes a shorter "10-minute" file)."""
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, data: bytes) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    page = write("a4-300dpi.png", samples.encode_image(a4_page().image, "PNG"))
    pages = [a4_page(i) for i in range(10)]
    pdf = write("10-pages-300dpi.pdf", samples.pdf(pages, dpi=300))
    pngs = drawn_pages(pdf, folder)
    small = a4_page(size=A4_150DPI, lines=25)
    tiny = [samples.text_page(samples.a4_page_lines(3 + i, 6)[i:], page=i, size=(720, 200),
                              font_size=28, margin=20) for i in range(2)]  # fmt: skip
    return Inputs(
        a4_page=page,
        pdf=pdf,
        pdf_pages=pngs,
        small_page=write("half-a4-150dpi.png", samples.encode_image(small.image, "PNG")),
        tiny_page=write("three-lines.png", samples.encode_image(tiny[0].image, "PNG")),
        tiny_pdf=write("two-small-pages.pdf", samples.pdf(tiny, dpi=300)),
        speech_60s=write("speech-60s.wav", varied_speech(60, seed=1)),
        speech_10min=write("speech-10min.wav", varied_speech(60 if quick else 600, seed=2)),
        speech_clip=write("speech-12s.wav", varied_speech(12, seed=3)),
        speech_short=write("speech-4s.wav", varied_speech(4, seed=4)),
        silence=write("silence-10s.wav", samples.silence_and_noise(10)),
    )
