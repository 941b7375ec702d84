"""Speech models by name: base joined from its two packages and checked, chosen per request,
at most EXTRACTOR_ASR_MAX_MODELS of them loaded in a worker. Real packages, real engine."""

from __future__ import annotations

import hashlib
import importlib
import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from support import post_file, requires_espeak

from extractor import samples
from extractor.asr.faster import FasterWhisperEngine
from extractor.asr.models import BASE, installed_models
from extractor.async_jobs.options import job_request, read_options, stored_options
from extractor.errors import EngineUnavailable, InvalidParameter
from extractor.pipeline.request import Limits

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


def test_an_unknown_model_is_a_400_naming_model_and_listing_the_installed(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    reply = post_file(client, samples.silence_and_noise(1), query="?model=large-v9")
    assert reply.status_code == 400
    error = reply.get_json()["error"]
    assert error["code"] == "invalid_parameter" and error["param"] == "model"
    assert all(name in error["message"] for name in installed_models())

    reply = client.post(
        "/v1/audio/transcriptions",
        data={"model": "gpt-4o-transcribe", "file": (io.BytesIO(b"RIFF"), "a.wav")},
        content_type="multipart/form-data",
    )
    error = reply.get_json()["error"]
    assert (reply.status_code, error["param"]) == (400, "model")
    assert "tiny.en" in error["message"]


@pytest.mark.slow
@requires_espeak
@needs_base
def test_german_speech_with_model_base_comes_back_as_german(
    make_app: Callable[..., Flask], model_cache: Path
) -> None:
    """Detected, with how sure base was; a language given in another spelling is read as de."""
    client = make_app(cache_dir=str(model_cache)).test_client()
    wav = samples.speech_wav(GERMAN, voice="de")
    reply = client.post(
        "/v1/audio/transcriptions",
        data={"file": (io.BytesIO(wav), "gruss.wav"), "model": "base",
              "response_format": "verbose_json"},
        content_type="multipart/form-data",
    )  # fmt: skip
    assert reply.status_code == 200, reply.get_data()
    verbose = reply.get_json()
    assert verbose["language"] == "de"
    assert verbose["language_probability"] > 0.5

    query = "?model=base&language=ger"
    reply = post_file(client, wav, "gruss.wav", query=query, accept="application/json")
    assert reply.status_code == 200, reply.get_data()
    body = reply.get_json()
    assert body["language"] == "de"
    assert "languageProbability" not in body  # given, not detected


@pytest.mark.slow
@needs_base
def test_one_model_at_most_unloads_the_least_recently_used(
    make_app: Callable[..., Flask], model_cache: Path
) -> None:
    app = make_app(cache_dir=str(model_cache), asr_max_models=1)
    models: Any = app.extensions["extractor"].models
    client = app.test_client()
    quiet = samples.silence_and_noise(1)
    assert post_file(client, quiet, "a.wav").status_code == 200
    assert models.loaded() == ["tiny.en"]
    assert post_file(client, quiet, "a.wav", query="?model=base").status_code == 200
    assert models.loaded() == ["base"]
    assert not models.engine("tiny.en").loaded
    assert post_file(client, quiet, "a.wav", query="?model=whisper-1").status_code == 200
    assert models.loaded() == ["tiny.en"]


def test_a_job_keeps_its_model_and_whisper_1_means_the_default() -> None:
    limits = Limits(speech_models=("tiny.en", "base"))
    chosen = job_request(stored_options(read_options({"model": "base"}, limits)))
    assert chosen.model == "base"
    assert read_options({"model": "whisper-1"}, limits).model is None
    with pytest.raises(InvalidParameter) as refused:
        read_options({"model": "small"}, limits)
    assert refused.value.param == "model"
