"""One upload, one transcript, nothing dropped: long talks that repeat themselves, sent to a real
gunicorn server with the real default model, lose no stretch of speech, and the same upload
reads the same on every route, format, process and thread (extractor/asr/fallback.py).

Nothing here asserts a word of the decode: which words tiny.en hears depends on the CPU. What
holds for any decode is asserted: which stretches of the talk are covered by a line, and that
the transcripts of one upload are equal to each other.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from async_jobs.jobs_support import Server, restart, serve, submit, wait_for
from support import requires_espeak

from extractor import samples
from extractor.samples.conversations import SENTENCES

pytestmark = [pytest.mark.slow, requires_espeak]

# Longest stretch of speech a transcript may leave without a line (the bound).
MOST_SECONDS_UNCOVERED = 8.0
VOICES = ("en-us+m2", "en-gb-x-rp+f4")
WORDS_PER_MINUTE = 190  # a quick talker: at this pace every pattern below sets the fallback off
# Sentences said over and over, in the patterns that set Whisper's fallback off: a sentence
# said twice in a row (a decoder loop to its checks), a short cycle, a refrain every other one.
PATTERNS = {
    "each sentence twice": [0, 0, 1, 1, 2, 2, 3, 3, 4, 4] * 3,
    "a cycle of three": [5, 6, 7] * 8,
    "a refrain every other sentence": [8, 9, 8, 10, 8, 11, 8, 12, 8, 13] * 2,
}


class Talk:
    """Sentences in two alternating voices with short pauses: a WAV and when each is said."""

    def __init__(self, order: list[int]) -> None:
        parts: list[np.ndarray] = []
        self.spans: list[tuple[float, float]] = []
        said: dict[tuple[int, str], np.ndarray] = {}
        clock, rate = 0.0, 0
        for position, index in enumerate(order):
            voice = VOICES[position % 2]
            if (index, voice) not in said:
                audio, rate = samples.decode_wav(
                    samples.speech_wav(
                        SENTENCES[index], voice=voice, words_per_minute=WORDS_PER_MINUTE
                    )
                )
                said[index, voice] = audio[0]
            speech = said[index, voice]
            pause = np.zeros(int(rate * (0.25 + 0.1 * (position % 3))), np.float32)
            self.spans.append((clock, clock + len(speech) / rate))
            parts += [speech, pause]
            clock += (len(speech) + len(pause)) / rate
        self.wav = samples.encode_audio(np.concatenate(parts)[None], rate, "wav")
        self.seconds = clock

    def longest_uncovered(self, lines: list[tuple[float, float]]) -> float:
        """The longest stretch from speech no line covers to the next speech a line covers,
        on a 0.1 s grid; a line covers its span and 1 s either side (segment ends are rounded
        to Whisper's timestamps and pauses)."""
        grid = np.arange(0, self.seconds, 0.1)
        speech = np.zeros(len(grid), bool)
        for start, end in self.spans:
            speech |= (grid >= start) & (grid < end)
        covered = np.zeros(len(grid), bool)
        for start, end in lines:
            covered |= (grid >= start - 1) & (grid < end + 1)
        longest, since = 0.0, None
        for moment, spoken, seen in zip(grid, speech, covered, strict=True):
            if seen:
                since = None
            elif spoken:
                since = moment if since is None else since
                longest = max(longest, moment - since + 0.1)
        return float(longest)


@pytest.fixture(scope="module")
def talks() -> dict[str, Talk]:
    return {name: Talk(order) for name, order in PATTERNS.items()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("fidelity")
    running = serve(tmp, f"sqlite:///{tmp / 'jobs.db'}", workers=2, job_workers=1)
    yield running
    running.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=300) as http:
        yield http


def extract(client: httpx.Client, wav: bytes, fmt: str) -> httpx.Response:
    reply = client.post(
        "/extract", params={"format": fmt}, files={"upload": ("talk.wav", wav, "audio/wav")}
    )
    assert reply.status_code == 200, reply.text
    return reply


def lines_of(document: dict) -> list[tuple[str, int, int]]:
    """(content, start ms, end ms) of each cell of an Importable JSON transcript."""
    times = {label["startCellLine"]: label for label in document["labels"]}
    return [
        (cell["content"], times[cell["line"]]["startTimestampMillis"],
         times[cell["line"]]["endTimestampMillis"])
        for cell in document["cells"]
    ]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_long_talk_that_repeats_itself_loses_no_speech(
    client: httpx.Client, talks: dict[str, Talk], pattern: str
) -> None:
    talk = talks[pattern]
    document = extract(client, talk.wav, "json").json()
    lines = [(start / 1000, end / 1000) for _text, start, end in lines_of(document)]
    assert lines, "nothing transcribed"
    hole = talk.longest_uncovered(lines)
    assert hole <= MOST_SECONDS_UNCOVERED, f"{hole:.1f} s of speech without a line ({pattern})"
    # a line the decoder doubted is kept and says why, in the cell's metadata
    for cell in document["cells"]:
        for item in cell["metadata"]:
            if item["key"] == "suspect":
                assert item["value"] in ("loop", "improbable", "no_speech")


def vtt_cues(text: str) -> list[tuple[str, int, int]]:
    """(text, start ms, end ms) of each WebVTT cue."""

    def millis(stamp: str) -> int:
        hours, minutes, rest = stamp.split(":")
        seconds, ms = rest.split(".")
        return ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1000 + int(ms)

    found = re.findall(r"(\d+:\d\d:\d\d\.\d{3}) --> (\d+:\d\d:\d\d\.\d{3})\n(.+)", text)
    return [(line.strip(), millis(start), millis(end)) for start, end, line in found]


def test_one_upload_reads_the_same_on_every_route_process_and_thread(
    server: Server, client: httpx.Client, talks: dict[str, Talk], tmp_path: Path
) -> None:
    wav = talks["each sentence twice"].wav
    first = extract(client, wav, "json")
    lines = lines_of(first.json())
    assert lines
    # every rendering of /extract is the same transcript
    assert extract(client, wav, "text").text.splitlines() == [text for text, _s, _e in lines]
    cues = vtt_cues(extract(client, wav, "vtt").text)
    assert [text for text, _s, _e in cues] == [text for text, _s, _e in lines]
    assert [(s, e) for _t, s, e in cues] == [(s, e) for _t, s, e in lines]
    # two at once, on the server's two workers (and their threads): the same bytes
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda _n: extract(client, wav, "json").content, range(2)))
    assert together == [first.content, first.content]
    # the OpenAI route
    openai = client.post(
        "/v1/audio/transcriptions",
        data={"model": "whisper-1", "response_format": "verbose_json"},
        files={"file": ("talk.wav", wav, "audio/wav")},
    )
    assert openai.status_code == 200, openai.text
    segments = openai.json()["segments"]
    assert [s["text"].strip() for s in segments] == [text for text, _s, _e in lines]
    assert [round(s["start"] * 1000) for s in segments] == [s for _t, s, _e in lines]
    # a job's stored result
    job = submit(client, wav, "talk.wav", params={"format": "json"}).json()
    assert wait_for(client, job["id"])["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{job['id']}/result").content == first.content
    # the command line, in a process of its own
    path = tmp_path / "talk.wav"
    path.write_bytes(wav)
    cli = subprocess.run(
        [sys.executable, "-m", "extractor.cli", "extract", str(path), "--format", "json"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert json.loads(cli.stdout) == first.json()
    # and after a restart
    server.stop()
    again = restart(server, tmp_path)
    try:
        with httpx.Client(base_url=again.url, timeout=300) as fresh:
            assert extract(fresh, wav, "json").content == first.content
    finally:
        again.stop()
