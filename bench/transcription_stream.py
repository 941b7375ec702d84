"""``POST /v1/audio/transcriptions`` with ``stream=true``: when the first delta arrives against
when the whole reply does.

A minute of real speech (the call sample and the five LibriVox utterances of bench.datasets,
joined with 1 s pauses, repeated up to ``--seconds``) goes to a real ``extractor serve``
(one worker) over loopback, alternately streamed and not, ``--runs`` times each. For each
streamed run: seconds from the request to the first ``transcript.text.delta``, and to
``transcript.text.done``; for each plain one, seconds to the whole reply; and whether the
deltas joined equal the plain reply's text. Medians are printed as a Markdown table.

``python -m bench.transcription_stream --runs 5``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench import datasets
from bench.server import Server
from extractor import samples

RATE = 16_000


def real_speech(seconds: float) -> bytes:
    """``seconds`` of real speech as a 16 kHz mono WAV."""
    files = [datasets.call().wav, *(u.wav for u in datasets.librivox())]
    pause = np.zeros((1, RATE), np.float32)
    pieces: list[np.ndarray] = []
    for path in files:
        audio, rate = samples.decode_wav(Path(path).read_bytes())
        mono = audio.mean(axis=0, keepdims=True)
        index = np.arange(0, mono.shape[1], rate / RATE)
        pieces += [np.interp(index, np.arange(mono.shape[1]), mono[0])[None, :], pause]
    once = np.concatenate(pieces, axis=1).astype(np.float32)
    reps = int(np.ceil(seconds * RATE / once.shape[1]))
    return samples.encode_audio(np.tile(once, (1, reps))[:, : int(seconds * RATE)], RATE, "wav")


def streamed(url: str, wav: bytes) -> tuple[float, float, str]:
    """Seconds to the first delta and to ``done``, and the deltas joined."""
    started = time.perf_counter()
    first = None
    deltas = []
    form = {"model": "whisper-1", "stream": "true"}
    with httpx.stream("POST", url, files={"file": ("a.wav", wav)}, data=form, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "transcript.text.delta":
                first = first or time.perf_counter() - started
                deltas.append(event["delta"])
            elif event["type"] == "transcript.text.done":
                return first or 0.0, time.perf_counter() - started, "".join(deltas)
    raise RuntimeError("the stream ended without transcript.text.done")


def plain(url: str, wav: bytes) -> tuple[float, str]:
    started = time.perf_counter()
    reply = httpx.post(url, files={"file": ("a.wav", wav)}, data={"model": "whisper-1"},
                       timeout=600)  # fmt: skip
    reply.raise_for_status()
    return time.perf_counter() - started, reply.json()["text"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    wav = real_speech(args.seconds)
    firsts, dones, wholes, equal = [], [], [], []
    with tempfile.TemporaryDirectory() as logs, Server(
        "--workers", "1", log_dir=Path(logs), name="stream"
    ) as server:  # fmt: skip
        server.wait_ready(1)
        url = f"http://{server.host}:{server.port}/v1/audio/transcriptions"
        for _ in range(args.runs):  # alternating, so both see the same load
            first, done, text = streamed(url, wav)
            whole, reply = plain(url, wav)
            firsts.append(first)
            dones.append(done)
            wholes.append(whole)
            equal.append(text == reply)
    med = statistics.median
    print(f"{args.seconds:.0f} s of real speech, {args.runs} alternating runs each, one worker\n")
    print("| | median s | min s | max s |\n|---|---|---|---|")
    for name, values in (("stream: first delta", firsts), ("stream: done", dones),
                         ("plain reply", wholes)):  # fmt: skip
        print(f"| {name} | {med(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    print(f"\ndeltas joined == plain text: {sum(equal)}/{len(equal)} runs")


if __name__ == "__main__":
    main()
