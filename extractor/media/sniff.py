"""What an uploaded file is, decided from its magic numbers (never its name or Content-Type)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from extractor.errors import (
    UnsupportedMedia,
)

log = logging.getLogger(__name__)


class MediaKind(Enum):
    IMAGE = "image"
    PDF = "pdf"
    AUDIO = "audio"


@dataclass(frozen=True)
class Sniffed:
    kind: MediaKind
    format: str  # a short name: png, jpeg, tiff, pdf, wav, flac, mp3, ogg, mp4, webm, ...


def sniff(head: bytes) -> Sniffed:
    """Classify a file by its first bytes; raise ``UnsupportedMedia`` for anything else."""
    checks: list[tuple[bool, MediaKind, str]] = [
        (head.startswith(b"\x89PNG\r\n\x1a\n"), MediaKind.IMAGE, "png"),
        (head.startswith(b"\xff\xd8\xff"), MediaKind.IMAGE, "jpeg"),
        (head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"), MediaKind.IMAGE, "tiff"),
        (head.startswith(b"BM") and len(head) >= 26, MediaKind.IMAGE, "bmp"),
        (head[:6] in (b"GIF87a", b"GIF89a"), MediaKind.IMAGE, "gif"),
        (head[:4] == b"RIFF" and head[8:12] == b"WEBP", MediaKind.IMAGE, "webp"),
        (b"%PDF-" in head[:1024], MediaKind.PDF, "pdf"),
        (head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE", MediaKind.AUDIO, "wav"),
        (head.startswith(b"fLaC"), MediaKind.AUDIO, "flac"),
        (head.startswith(b"ID3"), MediaKind.AUDIO, "mp3"),
        (head.startswith(b"OggS"), MediaKind.AUDIO, "ogg"),
        (head[4:8] == b"ftyp", MediaKind.AUDIO, "mp4"),
        (head.startswith(b"\x1a\x45\xdf\xa3"), MediaKind.AUDIO, "webm"),
        (head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"), MediaKind.AUDIO, "aiff"),
        # An MPEG audio frame or an ADTS (AAC) header: 11 set sync bits.
        (len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0, MediaKind.AUDIO, "mpeg"),
    ]
    for matched, kind, name in checks:
        if matched:
            return Sniffed(kind, name)
    raise UnsupportedMedia(
        "not a supported file: expected an image (PNG, JPEG, TIFF, BMP, GIF, WebP), a PDF, or"
        " audio (WAV, FLAC, MP3, OGG/Opus, M4A/AAC, WebM)"
    )
