"""How many people speak, as a client may say it: ``num_speakers``, ``min_speakers``,
``max_speakers`` (the names whisperX and pyannote users know), checked into a ``SpeakerCount``.

Kept apart from the clustering so the request parsers (views, the OpenAI route, the CLI) can
check the fields without importing numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidParameter


@dataclass(frozen=True)
class SpeakerCount:
    """What the client said about how many people speak: exactly, or within bounds."""

    exactly: int | None = None
    least: int = 1
    most: int | None = None

    def clamp(self, found: int, windows: int) -> int:
        """``found`` brought within what the client allows (and the windows there are)."""
        if self.exactly is not None:
            return max(1, min(self.exactly, windows))
        wanted = max(found, self.least)
        if self.most is not None:
            wanted = min(wanted, self.most)
        return max(1, min(wanted, windows))


class BadSpeakerCount(InvalidParameter):
    """A speaker count the client gave is not usable; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


COUNT_FIELDS = ("num_speakers", "min_speakers", "max_speakers")


def parse_speaker_count(fields: Mapping[str, str | None], limit: int) -> SpeakerCount | None:
    """``num_speakers``, ``min_speakers``, ``max_speakers`` from a query or form, checked:
    whole numbers from 1 to ``limit`` (EXTRACTOR_SPEAKERS_MAX_COUNT), min not above max, and
    num within them when both are given. None when the client gave none of them."""
    numbers: dict[str, int] = {}
    for name in COUNT_FIELDS:
        raw = fields.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            raise BadSpeakerCount(f"{name} must be a whole number, not {raw!r}", name) from None
        if not 1 <= value <= limit:
            raise BadSpeakerCount(
                f"{name} must be from 1 to {limit} (EXTRACTOR_SPEAKERS_MAX_COUNT), not {value}",
                name,
            )
        numbers[name] = value
    if not numbers:
        return None
    least, most = numbers.get("min_speakers", 1), numbers.get("max_speakers")
    if most is not None and least > most:
        raise BadSpeakerCount(
            f"min_speakers ({least}) must not be above max_speakers ({most})", "min_speakers"
        )
    exactly = numbers.get("num_speakers")
    if exactly is not None and not (least <= exactly <= (most or exactly)):
        raise BadSpeakerCount(
            f"num_speakers ({exactly}) must lie within min_speakers and max_speakers",
            "num_speakers",
        )
    return SpeakerCount(exactly, least, most)
