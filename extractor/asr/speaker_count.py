"""How many people speak, as a client may say it: ``num_speakers``, ``min_speakers``,
``max_speakers`` (the names whisperX and pyannote users know; the request model,
``pipeline.request.ExtractionRequest``, reads and checks them), as the clustering takes it.
"""

from __future__ import annotations

from dataclasses import dataclass


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


COUNT_FIELDS = ("num_speakers", "min_speakers", "max_speakers")
