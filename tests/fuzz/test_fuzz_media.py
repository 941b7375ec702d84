"""Property tests of sniffing and decoding: any bytes are a result or a 4xx, never a crash.

Inputs are arbitrary bytes behind each magic number (so the decoder, not the sniffer, sees
them) and real files from ``samples`` with random damage: truncation, flipped bytes, a
spliced-in run of bytes.
"""

from __future__ import annotations

import io
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzzing import (
    AUDIO_FORMATS,
    IMAGE_FORMATS,
    MAGIC,
    damaged_files,
    pdf_with_media_box,
    png_claiming,
    valid_files,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from extractor.errors import ExtractorError, UnsupportedMedia
from extractor.media.audio import decode_audio
from extractor.media.images import image_pages
from extractor.media.pdf import PdfPages
from extractor.media.sniff import MediaKind, sniff

MAX_PAGES = 4
MAX_SECONDS = 30.0  # seconds: short, so a header claiming hours is refused before decoding
PDF_DPI = 36  # renders stay tiny; what is tested is that damage never escapes as a crash

# Decoders warn about what they repair in damaged files (Pillow: "Corrupt EXIF data"); the
# outcome is what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


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


def assert_client_error_only(run: Callable[[], object]) -> None:
    """``run`` returns, or raises an ``ExtractorError`` with a 4xx status: nothing else."""
    try:
        run()
    except ExtractorError as error:
        assert 400 <= error.status < 500, f"{type(error).__name__} is a {error.status}"


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


@pytest.mark.slow
@settings(FUZZ, max_examples=800)
@given(damaged_files())
def test_damaged_real_files_are_a_result_or_a_4xx(named: tuple[str, bytes]) -> None:
    _name, data = named
    assert_client_error_only(lambda: decode(data))


numbers = st.one_of(
    st.integers(-(2**31), 2**31).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["0", "1e30", "-0", "nan", "inf", "1/0", "", "()"]),
)


@pytest.mark.slow
# 300 PDFs rendered: 135 s alone on a loaded machine, past 300 s beside two other workers.
@pytest.mark.timeout(900)
@settings(FUZZ, max_examples=300)
@given(
    box=st.lists(numbers, min_size=0, max_size=5).map(" ".join),
    pages=st.integers(1, MAX_PAGES + 1),
)
def test_pdf_page_boxes_of_any_size_are_a_result_or_a_4xx(box: str, pages: int) -> None:
    assert_client_error_only(lambda: decode(pdf_with_media_box(box, pages)))


@settings(FUZZ, max_examples=300)
@given(
    width=st.integers(0, 2**31 - 1),
    height=st.integers(0, 2**31 - 1),
    color_type=st.sampled_from([0, 2, 3, 4, 6, 1, 7]),
)
def test_png_headers_claiming_any_size_are_a_result_or_a_4xx(
    width: int, height: int, color_type: int
) -> None:
    assert_client_error_only(lambda: decode(png_claiming(width, height, color_type)))


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


def test_unknown_audio_codec_is_unsupported_media() -> None:
    with pytest.raises(UnsupportedMedia):
        decode(wav_with_codec_tag(0x00FE))


def test_tiff_frame_without_dimensions_is_unsupported_media() -> None:
    with pytest.raises(UnsupportedMedia):
        decode(tiff_with_second_frame_missing_width())
