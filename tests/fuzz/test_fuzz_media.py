"""Property tests of sniffing and decoding: any bytes are a result or a 4xx, never a crash.

Inputs are arbitrary bytes behind each magic number (so the decoder, not the sniffer, sees
them) and real files from ``samples`` with random damage: truncation, flipped bytes, a
spliced-in run of bytes.
"""

from __future__ import annotations

import functools
import io
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from extractor import samples
from extractor.errors import ExtractorError, UnsupportedMedia
from extractor.media import MediaKind, PdfPages, decode_audio, image_pages, sniff

MAX_PAGES = 4
MAX_SECONDS = 30.0  # seconds: short, so a header claiming hours is refused before decoding
PDF_DPI = 36  # renders stay tiny; what is tested is that damage never escapes as a crash

MAGIC = {
    "png": b"\x89PNG\r\n\x1a\n",
    "jpeg": b"\xff\xd8\xff",
    "tiff": b"II*\x00",
    "bmp": b"BM" + bytes(24),
    "gif": b"GIF89a",
    "webp": b"RIFF\x00\x00\x00\x00WEBP",
    "pdf": b"%PDF-1.4\n",
    "wav": b"RIFF\x24\x00\x00\x00WAVE",
    "flac": b"fLaC",
    "mp3": b"ID3",
    "ogg": b"OggS",
    "mp4": b"\x00\x00\x00\x18ftyp",
    "webm": b"\x1a\x45\xdf\xa3",
    "mpeg": b"\xff\xfb\x90\x00",
}

# Decoders warn about what they repair in damaged files (Pillow: "Corrupt EXIF data"); the
# outcome is what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

IMAGE_FORMATS = {"png": "L", "jpeg": "L", "bmp": "L", "gif": "L", "webp": "RGB"}  # and mode
AUDIO_FORMATS = ("flac", "mp3", "ogg", "webm", "m4a")  # re-encoded from the espeak WAV

FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@functools.cache
def valid_files() -> dict[str, bytes]:
    """One small real file per container the service reads, made once."""
    page = samples.text_page(["Fuzz 42"], size=(160, 48), font_size=20, margin=8)
    second = samples.text_page(["two"], size=(120, 40), font_size=20, margin=8)
    files = {
        fmt: samples.encode_image(page.image.convert(mode), fmt.upper())
        for fmt, mode in IMAGE_FORMATS.items()
    }
    files["tiff"] = samples.multipage_tiff([page, second])
    files["pdf"] = samples.pdf([page, second], dpi=72)
    if samples.have_espeak():
        wav = samples.speech_wav("hi there")
        files["wav"] = wav
        pcm, rate = samples.decode_wav(wav)
        for fmt in AUDIO_FORMATS:
            files[fmt] = samples.encode_audio(pcm, rate, fmt)
    return files


@contextmanager
def workspace(data: bytes) -> Iterator[tuple[Path, Path]]:
    """The bytes as an uploaded file, and the request's work directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="fuzz-media-") as tmp:
        path = Path(tmp) / "upload"
        path.write_bytes(data)
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        yield path, workdir


def decode(data: bytes) -> None:
    """Sniff and decode ``data`` as the service does, all pages rendered."""
    sniffed = sniff(data[:2048])
    with workspace(data) as (path, workdir):
        if sniffed.kind is MediaKind.AUDIO:
            decode_audio(path, max_seconds=MAX_SECONDS, keep_channels=True)
        elif sniffed.kind is MediaKind.PDF:
            pdf = PdfPages(path, workdir, PDF_DPI, MAX_PAGES)
            try:
                for index in range(pdf.count):
                    pdf.render(index)
            finally:
                pdf.close()
        else:
            image_pages(path, workdir, MAX_PAGES)


def known_bug(error: Exception) -> bool:
    """Crashes already reported to the lead, each reproduced by a strict xfail test below.

    The properties pass over exactly these so they keep guarding everything else; when a fix
    lands its xfail test passes, fails as strict, and the entry here goes with the marker.
    """
    message = str(error)
    return (isinstance(error, AttributeError) and "no attribute 'channels'" in message) or (
        isinstance(error, TypeError) and message == "Missing dimensions"
    )


def assert_client_error_only(run: Callable[[], object]) -> None:
    """``run`` returns, or raises an ``ExtractorError`` with a 4xx status: nothing else."""
    try:
        run()
    except ExtractorError as error:
        assert 400 <= error.status < 500, f"{type(error).__name__} is a {error.status}"
    except Exception as error:
        if not known_bug(error):
            raise


@st.composite
def damaged(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` truncated, with bytes flipped, or with a run of bytes spliced in."""
    data = bytearray(original)
    damage = draw(st.sampled_from(["truncate", "flip", "splice", "all"]))
    if damage in ("flip", "all"):
        # Headers hold the sizes and offsets decoders trust: damage near the start is favoured.
        window = draw(st.sampled_from([64, 512, len(data)]))
        for _ in range(draw(st.integers(1, 8))):
            at = draw(st.integers(0, min(window, len(data)) - 1))
            data[at] ^= draw(st.integers(1, 255))
    if damage in ("splice", "all"):
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=64))
    if damage in ("truncate", "all"):
        data = data[: draw(st.integers(1, len(data)))]
    return bytes(data)


def damaged_files() -> st.SearchStrategy[tuple[str, bytes]]:
    files = valid_files()
    return st.sampled_from(sorted(files)).flatmap(
        lambda name: st.tuples(st.just(name), damaged(files[name]))
    )


@settings(FUZZ, max_examples=500)
@given(st.binary(max_size=2048))
def test_sniff_refuses_only_as_unsupported_media(head: bytes) -> None:
    try:
        sniffed = sniff(head)
    except UnsupportedMedia:
        return
    assert sniffed.kind in MediaKind


@settings(FUZZ, max_examples=400)
@given(
    st.tuples(st.sampled_from(sorted(MAGIC)), st.binary(max_size=1024)).map(
        lambda m: MAGIC[m[0]] + m[1]
    )
)
def test_arbitrary_bytes_behind_a_magic_number_are_a_4xx(data: bytes) -> None:
    assert_client_error_only(lambda: decode(data))


@pytest.mark.parametrize("name", [*IMAGE_FORMATS, "tiff", "pdf", "wav", *AUDIO_FORMATS])
def test_every_valid_file_decodes(name: str) -> None:
    """The damage tests start from files that decode, so damage is what they exercise."""
    files = valid_files()
    if name not in files:
        pytest.skip("espeak-ng is not installed")
    decode(files[name])


@settings(FUZZ, max_examples=800)
@given(damaged_files())
def test_damaged_real_files_are_a_result_or_a_4xx(named: tuple[str, bytes]) -> None:
    _name, data = named
    assert_client_error_only(lambda: decode(data))


# -- reported bugs, reproduced from bytes built here ----------------------------------------


def wav_with_codec_tag(tag: int) -> bytes:
    """A 48-byte WAV: a header naming codec ``tag`` and four bytes of data."""
    fmt = struct.pack("<HHIIHH", tag, 1, 16_000, 32_000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 4)
    return b"RIFF" + struct.pack("<I", len(body) + 4) + body + bytes(4)


def tiff_with_second_frame_missing_width() -> bytes:
    """Two 1x1 frames; the second frame's ImageWidth tag (256) renamed to an unknown tag."""
    buffer = io.BytesIO()
    frame = Image.new("L", (1, 1), 255)
    frame.save(buffer, format="TIFF", save_all=True, append_images=[frame])
    data = bytearray(buffer.getvalue())
    width_tag = struct.pack("<HH", 256, 4)  # tag 256, type LONG
    second = data.find(width_tag, data.find(width_tag) + 1)
    data[second : second + 2] = struct.pack("<H", 0x7FFF)
    return bytes(data)


@pytest.mark.xfail(
    strict=True,
    raises=AttributeError,
    reason="bug reported to the lead: PyAV opens a WAV with an unknown codec tag with no codec"
    " context, and decode_audio's stream.codec_context.channels raises AttributeError (a 500)",
)
def test_unknown_audio_codec_is_unsupported_media() -> None:
    with pytest.raises(UnsupportedMedia):
        decode(wav_with_codec_tag(0x00FE))


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="bug reported to the lead: Pillow raises TypeError('Missing dimensions') seeking to a"
    " TIFF frame without ImageWidth, which _pillow_errors does not translate (a 500)",
)
def test_tiff_frame_without_dimensions_is_unsupported_media() -> None:
    with pytest.raises(UnsupportedMedia):
        decode(tiff_with_second_frame_missing_width())
