"""Speech through POST /extract with both real Whisper engines and the bundled tiny.en model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import SPOKEN, post_file, requires_espeak, words_of

from extractor import samples

# openai-whisper imports torch here: see pytest_collection_modifyitems.
pytestmark = [requires_espeak, pytest.mark.torch]
ENGINES = ["faster-whisper", "openai-whisper"]


@pytest.fixture(scope="module", params=ENGINES)
def engine_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One app per engine for the module: loading openai-whisper (and its numba warm-up) once."""
    from extractor.web.app import create_app

    cache = tmp_path_factory.mktemp("models")
    app = create_app({"asr_engine": request.param, "cache_dir": str(cache)})
    app.extensions["extractor"].load()
    yield app.test_client()
    app.extensions["extractor"].close()


def audio_duration_ms(data: bytes) -> int:
    samples_, rate = samples.decode_wav(data)
    return int(samples_.shape[1] / rate * 1000)


def assert_timestamps_valid(body: dict[str, Any], duration_ms: int) -> None:
    labels = body["labels"]
    assert len(labels) == len(body["cells"]), "one TIMESTAMP label per line"
    starts = [label["startTimestampMillis"] for label in labels]
    assert starts == sorted(starts), "lines run forwards in time"
    for n, (label, cell) in enumerate(zip(labels, body["cells"], strict=True)):
        assert label["type"] == "TIMESTAMP" and label["id"] == n + 1
        assert 0 <= label["startTimestampMillis"] <= label["endTimestampMillis"] <= duration_ms
        assert label["startCellLine"] == label["endCellLine"] == cell["line"] == n
        assert label["startTokenIndex"] == 0 and label["endTokenIndex"] == len(cell["tokens"]) - 1
        assert label["endCharIndex"] == len(cell["tokens"][-1]) - 1


def test_speech_comes_back_with_ordered_timestamps(
    engine_client: Any, speech_wav: bytes, validator: Any
) -> None:
    reply = post_file(engine_client, speech_wav, "speech.wav")
    assert reply.status_code == 200
    body = reply.get_json()
    validator.validate(body)
    assert body["type"] == "TIMESTAMP" and body["pages"] == [] and body["language"] == "en"
    heard = words_of(" ".join(c["content"] for c in body["cells"]))
    assert len(heard & words_of(SPOKEN)) >= 0.7 * len(words_of(SPOKEN)), heard
    assert_timestamps_valid(body, audio_duration_ms(speech_wav))


@pytest.mark.parametrize("fmt", ["flac", "mp3", "ogg", "webm", "m4a"])
def test_every_audio_container_is_decoded(engine_client: Any, fmt: str) -> None:
    data = samples.speech(SPOKEN, fmt)
    text = post_file(engine_client, data, f"clip.{fmt}", accept="text/plain").get_data(as_text=True)
    assert len(words_of(text) & words_of(SPOKEN)) >= 0.7 * len(words_of(SPOKEN)), text


def test_silence_and_noise_give_no_text(engine_client: Any, validator: Any) -> None:
    body = post_file(engine_client, samples.silence_and_noise(10), "quiet.wav").get_json()
    validator.validate(body)
    assert body["cells"] == [] and body["labels"] == []


def test_stereo_channels_become_speakers(engine_client: Any, validator: Any) -> None:
    data = samples.two_speaker_stereo("good morning everyone", "hello and welcome to the meeting")
    reply = post_file(engine_client, data, "call.wav", query="?speakers=channels")
    body = reply.get_json()
    validator.validate(body)
    speakers = [
        dict((m["key"], m["value"]) for m in c["metadata"])["speaker"] for c in body["cells"]
    ]
    assert speakers[0] == "Speaker 1" and speakers[-1] == "Speaker 2"
    assert "Speaker" not in " ".join(c["content"] for c in body["cells"])
    text = post_file(engine_client, data, query="?speakers=channels&format=text").get_data(
        as_text=True
    )
    lines = text.splitlines()
    assert lines[0].startswith("Speaker 1: ") and "morning" in lines[0].casefold()
    assert lines[-1].startswith("Speaker 2: ") and "welcome" in lines[-1].casefold()


def test_word_timings_on_request(engine_client: Any, speech_wav: bytes) -> None:
    body = post_file(engine_client, speech_wav, query="?words=true").get_json()
    duration = audio_duration_ms(speech_wav)
    for cell, label in zip(body["cells"], body["labels"], strict=True):
        timings = json.loads(
            dict((m["key"], m["value"]) for m in cell["metadata"])["wordTimestamps"]
        )
        assert [t["word"] for t in timings] == cell["tokens"]
        for t in timings:
            assert label["startTimestampMillis"] <= t["startMs"] <= t["endMs"] <= duration
            assert t["endMs"] <= label["endTimestampMillis"]


def test_subtitles_from_the_same_document(engine_client: Any, speech_wav: bytes) -> None:
    body = post_file(engine_client, speech_wav).get_json()
    vtt = post_file(engine_client, speech_wav, accept="text/vtt")
    assert vtt.headers["Content-Type"] == "text/vtt; charset=utf-8"
    cues = vtt.get_data(as_text=True).split("\n\n")
    assert cues[0] == "WEBVTT" and len(cues) - 1 == len(body["cells"])
    srt = post_file(engine_client, speech_wav, accept="application/x-subrip").get_data(as_text=True)
    first = srt.split("\n\n")[0].splitlines()
    assert first[0] == "1" and " --> " in first[1] and first[2] == body["cells"][0]["content"]


def test_openai_checkpoint_matches_faster_whisper_text(tmp_path: Any, speech_wav: bytes) -> None:
    """The converted checkpoint is faithful: both engines hear the same words."""
    from extractor.web.app import create_app

    texts = []
    for engine in ENGINES:
        app = create_app({"asr_engine": engine, "cache_dir": str(tmp_path)})
        reply = post_file(app.test_client(), speech_wav, accept="text/plain")
        texts.append(words_of(reply.get_data(as_text=True)))
        app.extensions["extractor"].close()
    assert texts[0] == texts[1]


def test_speech_that_sets_the_fallback_off_reads_the_same_twice(engine_client: Any) -> None:
    """A sentence said back to back makes Whisper's beam text fail its checks (faster-whisper
    decodes it again by beam search; openai-whisper samples, from a generator seeded per
    transcription): the same upload gives the same bytes."""
    wav = samples.speech("Let us take the bus. " * 4, "wav")
    first, second = (post_file(engine_client, wav, "bus.wav") for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert first.get_json()["cells"], "the speech was dropped"
    assert first.data == second.data
