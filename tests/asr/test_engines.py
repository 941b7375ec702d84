"""Every registered speech engine implements the one Protocol, and the default needs no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from extractor.asr import ENGINES, SpeechEngine
from extractor.config import ENGINES as CONFIGURABLE


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engine_satisfies_the_protocol(name: str, tmp_path: Path) -> None:
    engine = ENGINES[name](None, 1, "int8", tmp_path)
    assert isinstance(engine, SpeechEngine)
    assert engine.name == name
    assert not engine.loaded  # building an engine loads nothing: that waits for the worker


def test_the_settings_offer_exactly_the_registered_engines() -> None:
    assert set(CONFIGURABLE) == set(ENGINES)


def test_the_default_engine_never_imports_torch() -> None:
    """A faster-whisper worker stays small: serving a transcription must not pull in torch."""
    script = (
        "import sys\n"
        "from extractor.web.app import create_app\n"
        "app = create_app()\n"
        "app.extensions['extractor'].load()\n"
        "from extractor import samples\n"
        "import io\n"
        "data = samples.silence_and_noise(2)\n"
        "reply = app.test_client().post('/extract', data={'upload': (io.BytesIO(data), 'a.wav')})\n"
        "assert reply.status_code == 200, reply.get_data()\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"
