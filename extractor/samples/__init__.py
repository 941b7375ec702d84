"""Test material made on the spot: text drawn at known positions, and speech from espeak-ng.

The conformance kit, the test suite and the benchmark all need real inputs whose content is
known in advance; making them here means none of them depends on files a user may not have.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SAMPLE_RATE = 16_000  # Hz, for the WAVs made here
FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
)


@dataclass(frozen=True)
class DrawnWord:
    """A word drawn on a page, with its ink box in that page's pixels (right/bottom exclusive)."""

    text: str
    page: int
    left: int
    top: int
    right: int
    bottom: int


@dataclass(frozen=True)
class TextPage:
    image: Image.Image
    words: tuple[DrawnWord, ...]


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """A sans-serif TrueType font when the system has one, else Pillow's built-in one."""
    for candidate in FONT_CANDIDATES:
        if Path(candidate).is_file():
            return ImageFont.truetype(candidate, size)
    return ImageFont.load_default(size=size)


def text_page(
    lines: list[str],
    *,
    page: int = 0,
    size: tuple[int, int] = (1240, 1754),  # A4 at 150 dpi
    font_size: int = 36,
    margin: int = 100,
    line_gap: float = 1.8,
) -> TextPage:
    """Black text on white, one line per entry, recording each word's ink box."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    face = font(font_size)
    space = draw.textlength(" ", font=face)
    words = []
    y = margin
    for line in lines:
        x = float(margin)
        for word in line.split():
            left, top, right, bottom = draw.textbbox((x, y), word, font=face)
            draw.text((x, y), word, font=face, fill=0)
            words.append(DrawnWord(word, page, int(left), int(top), int(right), int(bottom)))
            x += draw.textlength(word, font=face) + space
        y += int(font_size * line_gap)
    return TextPage(image, tuple(words))


def encode_image(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def multipage_tiff(pages: list[TextPage]) -> bytes:
    buffer = io.BytesIO()
    first, *rest = [p.image for p in pages]
    first.save(buffer, format="TIFF", save_all=True, append_images=rest, compression="tiff_lzw")
    return buffer.getvalue()


def pdf(pages: list[TextPage], dpi: int = 150) -> bytes:
    """A PDF with one raster page per ``TextPage`` at ``dpi`` (scale boxes by pageWidth)."""
    buffer = io.BytesIO()
    first, *rest = [p.image.convert("RGB") for p in pages]
    first.save(buffer, format="PDF", save_all=True, append_images=rest, resolution=dpi)
    return buffer.getvalue()


PARAGRAPH = [
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
    "matches",
    "near",
    "the",
    "river",
    "bank",
    "and",
    "every",
    "clever",
    "student",
    "writes",
    "careful",
    "notes",
    "about",
    "the",
    "weather",
    "report",
]


def a4_page_lines(count: int = 45, words_per_line: int = 10) -> list[str]:
    """Enough ordinary text to fill a page: ``count`` lines cycling through a paragraph."""
    lines = []
    for n in range(count):
        start = (n * 7) % len(PARAGRAPH)
        picked = [PARAGRAPH[(start + k) % len(PARAGRAPH)] for k in range(words_per_line)]
        lines.append(" ".join(picked))
    return lines


# -- speech -------------------------------------------------------------------------------


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def speech_wav(text: str, *, voice: str = "en-us", words_per_minute: int = 150) -> bytes:
    """Spoken ``text`` as a 16-bit mono WAV (espeak-ng's own rate, 22.05 kHz)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "speech.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-w", str(target), text],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return target.read_bytes()


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """Float samples (channels, n) and the rate of a WAV, through PyAV."""
    import av

    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        chunks = [_planar(f.to_ndarray(), f) for f in container.decode(stream)]
    samples = np.concatenate(chunks, axis=1)
    if samples.dtype == np.int16:
        samples = samples.astype(np.float32) / 32768
    return samples.astype(np.float32), rate


def _planar(array: np.ndarray, frame: object) -> np.ndarray:
    """A frame's samples as (channels, n): a packed (interleaved) format comes as (1, n * channels)."""
    channels = len(frame.layout.channels)  # type: ignore[attr-defined]
    if frame.format.is_planar or channels == 1:  # type: ignore[attr-defined]
        return array
    return array.reshape(-1, channels).T


def encode_audio(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """Encode float samples (channels, n) as wav, flac, mp3, ogg (Opus), webm or m4a with PyAV."""
    import av

    codecs = {
        "wav": ("wav", "pcm_s16le", "s16"),
        "flac": ("flac", "flac", "s16"),
        "mp3": ("mp3", "libmp3lame", "fltp"),
        "ogg": ("ogg", "libopus", "flt"),
        "webm": ("webm", "libopus", "flt"),
        "m4a": ("ipod", "aac", "fltp"),
    }
    container_name, codec, sample_format = codecs[fmt]
    channels = samples.shape[0]
    out_rate = 48_000 if codec == "libopus" else rate
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_name) as container:
        stream = cast("av.AudioStream", container.add_stream(codec, rate=out_rate))
        stream.layout = "stereo" if channels == 2 else "mono"
        resampler = av.AudioResampler(format=sample_format, layout=stream.layout, rate=out_rate)
        frame_size = 1024
        for start in range(0, samples.shape[1], frame_size):
            chunk = np.ascontiguousarray(samples[:, start : start + frame_size], dtype=np.float32)
            # Planar float: one row per channel, as the samples are held.
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=stream.layout)
            frame.sample_rate = rate
            for resampled in resampler.resample(frame):
                container.mux(stream.encode(resampled))
        for resampled in resampler.resample(None):
            container.mux(stream.encode(resampled))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def speech(text: str, fmt: str = "wav", **voice: object) -> bytes:
    """Spoken ``text`` in the container ``fmt`` (see ``encode_audio``)."""
    wav = speech_wav(text, **voice)  # type: ignore[arg-type]
    if fmt == "wav":
        return wav
    samples, rate = decode_wav(wav)
    return encode_audio(samples, rate, fmt)


def two_speaker_stereo(first: str, second: str, gap_seconds: float = 1.0) -> bytes:
    """A stereo WAV: ``first`` spoken on the left channel, then ``second`` on the right."""
    left, rate = decode_wav(speech_wav(first, voice="en-us"))
    right, rate_r = decode_wav(speech_wav(second, voice="en-gb"))
    assert rate == rate_r
    gap = int(gap_seconds * rate)
    total = left.shape[1] + gap + right.shape[1]
    stereo = np.zeros((2, total), np.float32)
    stereo[0, : left.shape[1]] = left[0]
    stereo[1, left.shape[1] + gap :] = right[0]
    return encode_audio(stereo, rate, "wav")


def silence_and_noise(seconds: float, *, noise_level: float = 0.003, seed: int = 0) -> bytes:
    """``seconds`` of near-silence with faint white noise: should transcribe to nothing."""
    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal((1, int(seconds * SAMPLE_RATE))) * noise_level).astype(
        np.float32
    )
    return encode_audio(samples, SAMPLE_RATE, "wav")


def repeat_speech(text: str, seconds: float, fmt: str = "wav") -> bytes:
    """Speech of about ``seconds``: ``text`` spoken once, then repeated with short pauses."""
    once, rate = decode_wav(speech_wav(text))
    pause = np.zeros((1, int(0.6 * rate)), np.float32)
    unit = np.concatenate([once, pause], axis=1)
    reps = max(1, int(np.ceil(seconds * rate / unit.shape[1])))
    samples = np.tile(unit, (1, reps))[:, : int(seconds * rate)]
    return encode_audio(samples, rate, fmt)
