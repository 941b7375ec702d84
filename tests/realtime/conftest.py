"""One live-transcription decoder (the real tiny.en int8 model) for the whole test session."""

from __future__ import annotations

import pytest

from extractor.realtime.decoder import WindowDecoder


@pytest.fixture(scope="session")
def decoder() -> WindowDecoder:
    loaded = WindowDecoder(None, threads=1)
    loaded.load()
    return loaded
