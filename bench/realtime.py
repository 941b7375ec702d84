"""Live transcription (WS /v1/realtime?intent=transcription): latency, accuracy and cost.

Speech (the five LibriVox utterances of bench.datasets, 1.5 s apart; an espeak-ng conversation
of two voices; bench.datasets' recited sonnet, real and never tuned on) is streamed to a real
``extractor serve`` over loopback as a microphone would: PCM16 at 24 kHz in 40 ms messages
paced to the wall clock, by 1, 2, 3 and 4 streams at once. For each run:

- **word latency**: each word's end in the audio (the labels forced-aligned to the audio by
  Whisper's cross-attention, utterance by utterance: ``reference_words``) to the delta that
  carried it (streamed words matched to the labelled ones in order);
- **end latency**: the end of a turn's last word in the audio to its ``completed`` event;
- **WER** of the completed transcripts against the labels, next to the same audio's WER
  through ``POST /v1/audio/transcriptions`` (the whole file at once);
- **CPU seconds per audio second** of the workers, **RSS per stream** (workers' RSS while
  streaming, less idle, per stream), and ``test.png`` on ``POST /extract`` meanwhile against
  idle.

Each configuration (``--method``: the chosen short encoder window, and faster-whisper's full
30 s window as the alternative) runs on its own server, alternating per stream count so both
see the same load. ``python -m bench.realtime --streams 1 2 3 4`` writes bench/realtime.md.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import logging
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
from websockets.sync.client import connect

from bench import datasets, talks
from bench.accuracy_score import normalize_speech, speech_errors
from bench.server import Server, cpu_seconds, group_status_sums
from extractor import samples
from extractor.realtime.agreement import comparable
from extractor.realtime.items import DecodePolicy
from extractor.samples.conversations import Conversation, conversation

log = logging.getLogger("bench.realtime")
RATE = 24_000
CHUNK_MS = 40
GAP_SECONDS = 1.5
HISTORY_WORDS = 120  # the earlier turns' words in the prompt of the "history" method
METHODS = {
    "short-window": ("--realtime-min-window-seconds", "10"),
    # The short window with each turn heard alone, not after the previous turn's end
    # (EXTRACTOR_REALTIME_CONTEXT_SECONDS=0; not run unless named in --methods).
    "turn-alone": ("--realtime-min-window-seconds", "10", "--realtime-context-seconds", "0"),
    "full-window": ("--realtime-min-window-seconds", "30"),
    # The short window with beam 3 for the partial decodes (not run unless named in --methods).
    "partial-beam-3": ("--realtime-min-window-seconds", "10", "--realtime-partial-beam-size", "3"),
    # The short window with the last words of the earlier turns in each decode's prompt
    # (measured, not adopted: EXTRACTOR_REALTIME_HISTORY_WORDS=120).
    "history": (
        "--realtime-min-window-seconds", "10", "--realtime-history-words", str(HISTORY_WORDS),
    ),
    # The short window growing with a long turn until a pause past 20 s
    # (EXTRACTOR_REALTIME_SLIDE_SECONDS=0; not run unless named in --methods).
    "no-slide": ("--realtime-min-window-seconds", "10", "--realtime-slide-seconds", "0"),
    # Between the two (measured, not adopted; not run unless named in --methods):
    # LibriVox over 12 stream placements in-process 4.34% against the short window's 5.75%,
    # for 1.3-1.6x the CPU and a later end of turn (bench/realtime.md).
    "window-15": ("--realtime-min-window-seconds", "15"),
    # The short window with LocalAgreement-3 and no patience (always three agreeing decodes),
    # where a word heard differently holds every word after it back (not run unless named in
    # --methods).
    "strict": (
        "--realtime-min-window-seconds", "10", "--realtime-agreement-patience", "0",
    ),
    # The short window with LocalAgreement-2 and a 0.3 s word-end margin (bench/realtime.md):
    # better in-process on the tuning set, slower over a WebSocket on a loaded machine.
    "margin": (
        "--realtime-min-window-seconds", "10",
        "--realtime-agreement", "2", "--realtime-word-margin-seconds", "0.3",
    ),
}  # fmt: skip


@dataclass
class Recording:
    """One stream's audio and what is known of it."""

    name: str
    pcm: bytes  # PCM16 mono 24 kHz
    text: str  # the labels
    pieces: list[tuple[float, float, str]]  # (start s, end s, labelled text) of each utterance
    words: list[tuple[str, float]] = field(default_factory=list)  # (word, end s) reference

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / RATE


def to_pcm24(samples_: np.ndarray, rate: int) -> bytes:
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(samples_.reshape(1, -1), np.float32), format="flt", layout="mono"
    )
    frame.sample_rate = rate
    out = [*resampler.resample(frame), *resampler.resample(None)]
    return b"".join(bytes(f.planes[0])[: f.samples * 2] for f in out)


def recordings() -> list[Recording]:
    gap = np.zeros(int(GAP_SECONDS * 16_000), np.float32)
    audio, texts, pieces, clock = [gap], [], [], GAP_SECONDS
    for utterance in datasets.librivox():
        wav, rate = samples.decode_wav(utterance.wav.read_bytes())
        assert rate == 16_000
        audio += [wav[0], gap]
        texts.append(utterance.text)
        pieces.append((clock, clock + wav.shape[1] / rate, utterance.text))
        clock += (wav.shape[1] + len(gap)) / rate
    librivox = Recording(
        "librivox", to_pcm24(np.concatenate(audio), 16_000), " ".join(texts), pieces
    )
    return [librivox, _talk("espeak-talk", conversation(turns=6, seed=3))]


def sonnet() -> Recording:
    """bench.datasets' recited sonnet (real, nothing tuned on it), after 1 s of silence."""
    recital = datasets.sonnet()
    wav, rate = samples.decode_wav(recital.wav.read_bytes())
    lead = np.zeros(rate, np.float32)
    pieces = [(1.0 + start, 1.0 + end, text) for start, end, text in recital.lines]
    return Recording("sonnet", to_pcm24(np.concatenate([lead, wav[0]]), rate), recital.text, pieces)


def _talk(name: str, talk: Conversation) -> Recording:
    wav, rate = samples.decode_wav(talk.wav())
    lead = np.zeros(int(rate * 1.0), np.float32)
    return Recording(
        name,
        to_pcm24(np.concatenate([lead, wav[0], lead]), rate),
        " ".join(t.text for t in talk.turns),
        [(1.0 + t.start, 1.0 + t.end, t.text) for t in talk.turns],
    )


def held_out(name: str) -> Recording:
    """``talk-test-N``: bench/talks.py's held-out talk N (the in-process set's, bench/realtime_eval.py),
    streamed as the others are; only where named in ``--recordings``."""
    return _talk(name, talks.talk("test", int(name.removeprefix("talk-test-"))).conversation)


def reference_words(recording: Recording) -> list[tuple[str, float]]:
    """Each labelled word and the end (s) of its sound: the labels of each utterance
    forced-aligned to its audio by Whisper's cross-attention (faster-whisper's own word
    timestamps, given the true words instead of a decoded guess).

    The reference was once faster-whisper's word timestamps of the whole file as decoded, which
    is random where Whisper's temperature fallback samples (one run in three of the espeak-ng
    talk lost its first 30 s window that way and matched few of the streamed words) and times
    the words it misheard. The labels are what was said; aligning them piece by piece (each
    utterance under 30 s, with 0.1 s of its surroundings) gives the same times on every run."""
    from faster_whisper import WhisperModel
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    from extractor.asr.faster import bundled_model_dir

    model = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8")
    tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
    audio = np.frombuffer(recording.pcm, "<i2").astype(np.float32) / 32768
    audio16 = np.interp(np.arange(0, len(audio), 1.5), np.arange(len(audio)), audio)
    words: list[tuple[str, float]] = []
    for start, end, text in recording.pieces:
        first = max(0, int((start - 0.1) * 16_000))
        piece = audio16[first : int((end + 0.1) * 16_000)].astype(np.float32)
        features = model.feature_extractor(piece)
        frames = features.shape[-1] - 1
        assert frames <= 3000, f"an utterance over 30 s: {end - start:.1f} s"
        encoded = model.encode(pad_or_trim(features))
        tokens = tokenizer.encode(" " + text.strip())
        for word in model.find_alignment(tokenizer, [tokens], encoded, frames)[0]:
            if normalize_speech(word["word"]):  # not a lone punctuation mark
                words.append((word["word"].strip(), first / 16_000 + float(word["end"])))
    return words


@dataclass
class StreamResult:
    word_latencies: list[float]
    end_latencies: list[float]
    transcript: str
    audio_seconds: float
    failed: str | None = None
    shown_latencies: list[float] = field(default_factory=list)


def stream(url: str, recording: Recording, start_at: float) -> StreamResult:
    """Send ``recording`` paced to the wall clock; time every event."""
    received: list[tuple[float, dict[str, Any]]] = []
    ws_url = url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    with connect(ws_url, open_timeout=60, max_size=None) as ws:
        first = json.loads(ws.recv(timeout=60))
        if first["type"] != "session.created":
            return StreamResult([], [], "", 0, failed=json.dumps(first))

        def read() -> None:
            try:
                for message in ws:
                    received.append((time.monotonic(), json.loads(message)))
            except Exception:  # the connection closed
                return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        size = RATE * 2 * CHUNK_MS // 1000
        while time.monotonic() < start_at:
            time.sleep(0.005)
        t0 = time.monotonic()
        for index, offset in enumerate(range(0, len(recording.pcm), size)):
            due = t0 + index * CHUNK_MS / 1000
            time.sleep(max(0.0, due - time.monotonic()))
            chunk = base64.b64encode(recording.pcm[offset : offset + size]).decode()
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kinds = [e["type"] for _t, e in received]
            if (kinds and kinds[-1] == "conversation.item.done") or "error" in kinds:
                break
            time.sleep(0.05)
        time.sleep(0.3)
    return score(recording, received, t0)


def score(
    recording: Recording, received: list[tuple[float, dict[str, Any]]], t0: float
) -> StreamResult:
    """Match streamed words to the reference words in order; time them."""
    streamed: list[tuple[str, float]] = []  # (word, arrival)
    ends: list[tuple[int, float]] = []  # (index of the turn's last streamed word, completion)
    transcripts = []
    for at, event in received:
        if event["type"] == "conversation.item.input_audio_transcription.delta":
            streamed += [(w, at - t0) for w in event["delta"].split()]
        elif event["type"].endswith("transcription.completed") and event["transcript"].strip():
            transcripts.append(event["transcript"])
            ends.append((len(streamed) - 1, at - t0))
    ref_of = match_words(streamed, recording.words)
    word_latencies = [
        arrival - recording.words[ref_of[i]][1]
        for i, (_w, arrival) in enumerate(streamed)
        if i in ref_of
    ]
    end_latencies = []
    for last, completed in ends:
        matched = [ref_of[i] for i in range(max(0, last - 3), last + 1) if i in ref_of]
        if matched:
            end_latencies.append(completed - recording.words[max(matched)][1])
    shown = first_shown([(at - t0, event) for at, event in received])
    shown_of = match_words(shown, recording.words)
    shown_latencies = [
        at - recording.words[shown_of[i]][1] for i, (_w, at) in enumerate(shown) if i in shown_of
    ]
    return StreamResult(
        word_latencies, end_latencies, " ".join(transcripts), recording.seconds,
        shown_latencies=shown_latencies,
    )  # fmt: skip


def match_words(
    words: list[tuple[str, float]], reference: list[tuple[str, float]]
) -> dict[int, int]:
    """Which word of ``reference`` each of ``words`` is (by index; in order, unmatched left
    out): (word, time) pairs both, compared as Whisper's English normalizer writes them."""
    norm = [normalize_speech(w) for w, _t in words]
    ref = [normalize_speech(w) for w, _e in reference]
    matcher = difflib.SequenceMatcher(a=norm, b=ref, autojunk=False)
    return {
        block.a + k: block.b + k
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    }


def first_shown(received: list[tuple[float, dict[str, Any]]]) -> list[tuple[str, float]]:
    """Each word of the completed transcripts, in order, with when (of ``received``'s times)
    it was first on screen as it ends up: at its place in a delta, or in the revisable tail
    after the deltas (``x_...tentative``), as the page shows them."""
    final = {
        e["item_id"]: e["transcript"].split()
        for _at, e in received
        if e["type"] == "conversation.item.input_audio_transcription.completed"
    }
    sent: dict[str, str] = {}
    first: dict[tuple[str, int], float] = {}
    for at, event in received:
        item = event.get("item_id", "")
        if event["type"] == "conversation.item.input_audio_transcription.delta":
            sent[item] = sent.get(item, "") + event["delta"]
            on_screen = sent[item].split()
        elif event["type"] == "x_conversation.item.input_audio_transcription.tentative":
            on_screen = (sent.get(item, "") + event["text"]).split()
        else:
            continue
        ends_as = final.get(item, [])
        for k, word in enumerate(on_screen[: len(ends_as)]):
            if comparable(word) == comparable(ends_as[k]):
                first.setdefault((item, k), at)
    return [(word, first[(item, k)]) for item, words in final.items()
            for k, word in enumerate(words) if (item, k) in first]  # fmt: skip


def whole_file_text(url: str, recording: Recording) -> str:
    wav = samples.encode_audio(
        (np.frombuffer(recording.pcm, "<i2").astype(np.float32) / 32768).reshape(1, -1),
        RATE,
        "wav",
    )
    return post(url + "/v1/audio/transcriptions", "audio.wav", wav, {"response_format": "text"})


def post(url: str, filename: str, data: bytes, fields: dict[str, str]) -> str:
    boundary = uuid.uuid4().hex
    body = b""
    for name, value in fields.items():
        body += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        ).encode()
    body += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body += data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        return str(reply.read().decode())


def extract_png_seconds(url: str, png: bytes) -> float:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="test.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + png
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "/extract",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as reply:
        reply.read()
    return time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def rounds_for(streams: int) -> int:
    """How many times a row's streams run, one round after the other: the one-stream row twice.

    A row's percentiles pool every turn of its streams, and a p95 over few turns lies near
    their largest, which is expected to grow with their number: one LibriVox stream has 5
    turns, two have 10 (the espeak-ng talk 3 and 6), and of uniform draws the p95 of 10 is
    8% above the p95 of 5 in expectation, so two streams read slower with no turn slower. Two
    rounds of one stream give the one-stream row as many turns as the row it is compared with
    (issue 23: two streams within 10% of one).
    """
    return 2 if streams == 1 else 1


def run(server: Server, streams: int, recording: Recording, png: bytes) -> dict[str, Any]:
    url = f"http://{server.host}:{server.port}"
    pids = server.worker_pids()
    group = server.process.pid if server.process else 0
    idle_rss = group_status_sums(group, "VmRSS")["VmRSS"]
    cpu_before = sum(cpu_seconds(p) for p in pids)
    results: list[StreamResult] = []
    png_times: list[float] = []
    peak_rss = idle_rss
    for _round in range(rounds_for(streams)):
        start_at = time.monotonic() + 1.0
        threads = [
            threading.Thread(
                target=lambda at=start_at + 0.37 * i: results.append(stream(url, recording, at))
            )
            for i in range(streams)
        ]
        for thread in threads:
            thread.start()
        time.sleep(3)
        while any(t.is_alive() for t in threads):
            png_times.append(extract_png_seconds(url, png))
            peak_rss = max(peak_rss, group_status_sums(group, "VmRSS")["VmRSS"])
            time.sleep(1.5)
        for thread in threads:
            thread.join()
    cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
    words = [x for r in results for x in r.word_latencies]
    shown = [x for r in results for x in r.shown_latencies]
    ends = [x for r in results for x in r.end_latencies]
    errors = [speech_errors([recording.text], [r.transcript]).wer for r in results]
    return {
        "streams": streams,
        "failed": [r.failed for r in results if r.failed],
        "word_p50": pct(words, 50), "word_p90": pct(words, 90), "word_p95": pct(words, 95),
        "end_p50": pct(ends, 50), "end_p90": pct(ends, 90), "end_p95": pct(ends, 95),
        "shown_p50": pct(shown, 50), "shown_p90": pct(shown, 90),
        "wer": statistics.mean(errors) if errors else float("nan"),
        "cpu_per_audio_s": cpu / sum(r.audio_seconds for r in results) if results else 0,
        "rss_per_stream_mb": (peak_rss - idle_rss) / 1024 / streams,
        "png_s": statistics.median(png_times) if png_times else float("nan"),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument(
        "--methods", nargs="+", choices=list(METHODS),
        default=[
            m for m in METHODS
            if m not in ("window-15", "strict", "no-slide", "turn-alone", "partial-beam-3")
        ],
    )  # fmt: skip
    parser.add_argument("--recordings", nargs="+", default=["librivox", "espeak-talk", "sonnet"])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("realtime.md"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    chosen = [r for r in recordings() if r.name in args.recordings]
    chosen += [held_out(name) for name in args.recordings if name.startswith("talk-test-")]
    chosen += [sonnet()] if "sonnet" in args.recordings else []
    for recording in chosen:
        recording.words = reference_words(recording)
    png = samples.encode_image(samples.text_page(["Invoice 4417", "Harbor Street"]).image, "PNG")
    rows: list[tuple[str, str, dict[str, Any]]] = []
    whole: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as logs:
        servers = {}
        for method in args.methods:
            server = Server(
                # every stream comes from 127.0.0.1: the per-address cap must admit all four
                "--workers", "2", "--realtime-sessions", "2",
                "--realtime-sessions-per-client", "4", *METHODS[method],
                log_dir=Path(logs), name=method,
            )  # fmt: skip
            server.start()
            server.wait_ready(2)
            servers[method] = server
        try:
            first = next(iter(servers.values()))
            url = f"http://{first.host}:{first.port}"
            idle_png = statistics.median(extract_png_seconds(url, png) for _ in range(5))
            for recording in chosen:
                # The median of three requests: a reply varies where Whisper's fallback samples.
                # The espeak-ng talk's did (10-82%) until extractor/asr/fallback.py kept its
                # repeated sentences without sampling; it reads the same every time now.
                whole[recording.name] = statistics.median(
                    speech_errors([recording.text], [whole_file_text(url, recording)]).wer
                    for _ in range(3)
                )
                for streams in args.streams:
                    for method, server in servers.items():  # alternating: the same load
                        row = run(server, streams, recording, png)
                        log.info("%s %s %s", recording.name, method, row)
                        rows.append((recording.name, method, row))
        finally:
            for server in servers.values():
                server.stop()
    write_report(args.out, rows, whole, idle_png)


def write_report(
    out: Path, rows: list[tuple[str, str, dict[str, Any]]], whole: dict[str, float], idle_png: float
) -> None:
    policy = DecodePolicy()  # the server's too: its defaults are the settings' defaults
    lines = [
        "# Live transcription: latency, accuracy, cost",
        "",
        "Measured by `python -m bench.realtime` (bench/realtime.py says how); machine shared"
        " with other jobs, so absolute times are only indicative.",
        "",
        f"`test.png` on `POST /extract`, idle: {idle_png:.2f} s (median of 5).",
        "",
        "- **short-window** (the default): the encoder gets the turn padded to 10 s"
        " (`EXTRACTOR_REALTIME_MIN_WINDOW_SECONDS=10`); **full-window**: Whisper's 30 s window,"
        " as faster-whisper's `transcribe` always pads (`=30`); **window-15** (when"
        " measured): 15 s (`=15`). All: the default decoding"
        f" policy, LocalAgreement-{policy.agreement} every {policy.step_seconds} s of new audio"
        f" (the newest two decodes after {policy.patience} in a row agreed on nothing new),"
        f" beam {policy.partial_beam} ({policy.final_beam} for a turn's or window's end), the"
        " turn's end decoded during the pause, a turn heard"
        f" after the last {policy.context_seconds:g} s of the one before (as fits in the window),"
        f" a window past {policy.slide_seconds:g} s started anew at a word sent in its last"
        f" {policy.slide_keep:g} s; **history** (when measured): the short window, the prompt also holding the"
        f" last {HISTORY_WORDS} words of the turns before; **no-slide** (when measured): windows grow to a pause past 20 s;"
        " **turn-alone** (when measured): the short window, each turn heard alone (context 0);"
        " **strict** (when measured): the short window, always three agreeing decodes (patience 0);"
        " **partial-beam-3** (when measured): the short window, beam 3 for the partial decodes;"
        " **margin** (when measured): the short window, LocalAgreement-2 and a 0.3 s word-end"
        " margin.",
        "- Server: `extractor serve --workers 2 --realtime-sessions=2"
        " --realtime-sessions-per-client=4` (4 streams at most, all from one address);"
        " clients send PCM16 24 kHz in 40 ms messages paced to the wall clock, each stream"
        " starting 0.37 s after the previous one; the one-stream rows are two rounds of one"
        " stream, so that their percentiles pool as many turns as the two-stream rows'.",
        "- *word*: a word's end in the audio (the labels forced-aligned to it, utterance by"
        " utterance) to the delta carrying it; *shown*: to its first appearance as it ends up,"
        " in a delta or in the revisable tail after the deltas (`x_...tentative`, which the"
        " page shows); *end*: a turn's last word's end to its `completed`;"
        " *WER* against the labels (Whisper's English normalizer), *whole file*: the median of three requests of the same audio"
        " through `POST /v1/audio/transcriptions`; *CPU*: the workers' CPU seconds per second of"
        " audio streamed; *RSS*: the workers' peak RSS over idle, per stream (the first stream"
        " of a worker loads its live model, ~85 MB).",
        "",
        "| recording | method | streams | word p50 / p90 / p95 s | shown p50 / p90 s |"
        " end p50 / p90 / p95 s | WER streamed | WER whole file | CPU s per audio s |"
        " RSS MB per stream | test.png s | failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, method, r in rows:
        lines.append(
            f"| {name} | {method} | {r['streams']} | {r['word_p50']:.2f} / {r['word_p90']:.2f}"
            f" / {r['word_p95']:.2f} | {r['shown_p50']:.2f} / {r['shown_p90']:.2f} |"
            f" {r['end_p50']:.2f} / {r['end_p90']:.2f} /"
            f" {r['end_p95']:.2f} | {r['wer']:.1%} | {whole[name]:.1%} |"
            f" {r['cpu_per_audio_s']:.2f} | {r['rss_per_stream_mb']:.0f} | {r['png_s']:.2f} |"
            f" {len(r['failed'])} |"
        )
    out.write_text("\n".join(lines) + "\n" + _sections(out))
    print("\n".join(lines))


def _sections(out: Path) -> str:
    """What follows the generated table in ``out`` (its ``## `` sections: each session's
    findings, written by hand), kept when the table is written anew."""
    if not out.is_file():
        return ""
    text = out.read_text()
    start = text.find("\n## ")
    return "" if start < 0 else text[start:]


if __name__ == "__main__":
    main()
