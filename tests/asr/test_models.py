"""Speech models by name: base joined from its two packages and checked. Real packages, real
engine."""

from __future__ import annotations

import hashlib
import importlib
import shutil
from pathlib import Path

import pytest

from extractor.asr.faster import FasterWhisperEngine
from extractor.asr.models import BASE, installed_models
from extractor.errors import EngineUnavailable

needs_base = pytest.mark.skipif(
    "base" not in installed_models(), reason="pip install 'extractor[base]' for Whisper base"
)
GERMAN = "Guten Morgen. Heute ist das Wetter sehr schön, und wir fahren mit dem Zug nach Berlin."


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: base is joined and quantized once (~3 s), not per test."""
    return tmp_path_factory.mktemp("models")


@needs_base
def test_base_is_joined_once_into_the_cache_with_its_recorded_sha256(model_cache: Path) -> None:
    directory = BASE.directory(model_cache)
    assert directory.parent == model_cache
    assert hashlib.sha256((directory / "model.bin").read_bytes()).hexdigest() == BASE.sha256
    assert {p.name for p in directory.iterdir()} == {"model.bin", *BASE.files}
    stamp = (directory / "model.bin").stat().st_mtime_ns
    assert BASE.directory(model_cache) == directory
    assert (directory / "model.bin").stat().st_mtime_ns == stamp  # checked, not written again


@needs_base
def test_a_damaged_cached_copy_is_joined_again(tmp_path: Path) -> None:
    joined = BASE.directory(tmp_path) / "model.bin"
    with joined.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\0" * 16)
    assert BASE.directory(tmp_path) / "model.bin" == joined
    assert hashlib.sha256(joined.read_bytes()).hexdigest() == BASE.sha256


@needs_base
def test_a_truncated_part_is_an_engine_error_naming_it_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part cut short (an interrupted install, a full disk) must stop the worker at start
    with the file and the hash it should have, never load a model that decodes garbage."""
    last = BASE.parts[-1]
    installed = last.path()
    assert installed is not None
    package = tmp_path / "site" / last.package
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    with installed.open("rb") as source:
        (package / "data" / last.file).write_bytes(source.read(1_000_000))
    for name in BASE.files:
        shutil.copyfile(installed.parent / name, package / "data" / name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()

    engine = FasterWhisperEngine("base", cache_dir=tmp_path / "cache")
    with pytest.raises(EngineUnavailable) as refused:
        engine.load()
    message = str(refused.value)
    assert str(package / "data" / last.file) in message
    assert last.sha256 in message and "1000000 bytes" in message
    assert not engine.loaded
    assert not list((tmp_path / "cache").glob("whisper-base-*"))  # no half-joined model left
