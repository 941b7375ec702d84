"""Inputs for the fuzz tests: real files made by ``samples``, damaged at random.

Shared by the decoder properties and the HTTP-level fuzzing, so both see the same inputs and
pass over the same already-reported crashes.
"""

from __future__ import annotations

import functools
import struct
import zlib

from hypothesis import strategies as st

from extractor import samples

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

IMAGE_FORMATS = {"png": "L", "jpeg": "L", "bmp": "L", "gif": "L", "webp": "RGB"}  # and mode
AUDIO_FORMATS = ("flac", "mp3", "ogg", "webm", "m4a")  # re-encoded from the espeak WAV


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


# -- files whose headers claim sizes the content does not have ----------------------------


def png_claiming(width: int, height: int, color_type: int = 0) -> bytes:
    """A PNG whose (CRC-valid) header claims ``width`` x ``height``, over one tiny pixel row."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + b"\xff" * 4)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def pdf_with_media_box(box: str, pages: int = 1) -> bytes:
    """A minimal PDF of ``pages`` empty pages whose MediaBox is ``box`` (four numbers, or not)."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>",
        *[f"<< /Type /Page /Parent 2 0 R /MediaBox [{box}] >>" for _ in range(pages)],
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1", "replace")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)
