"""Live transcription accuracy, in-process: a tuning set and a held-out set, faster than real time.

The live session (``extractor.realtime.session.Session``, the real Whisper and Silero VAD) is
fed 40 ms ``input_audio_buffer.append`` messages and stepped until idle after each one, so
every partial decode runs exactly every ``step_seconds`` of audio: the decisions a session
makes in real time when its decodes keep up with the speaker (bench/realtime.py measures the
real-time pacing over a WebSocket). What it reports per set: the WER of the completed
transcripts against the labels, next to the same audio's WER through the whole-file engine
(``POST /extract``'s: faster-whisper, beam 5, VAD), and the audio seconds a word waited in the
session's audio (how far past a word's end the decode that sent it had heard).

Sets (real speech is scarce on the package index; every recording here is labelled):

- **tuning** (every choice was made on these only): the five LibriVox utterances of
  bench.datasets (a real reader), 1.5 s apart, and espeak-ng talks of bench.talks' tuning
  voice pool (2-4 voices, pauses of 0-1 s, turns back to back).
- **held-out** (reported, never tuned on): the real two-person telephone call of
  bench.datasets, pocketsphinx's five real "cards" recordings (another real speaker, short
  commands), and talks of bench.talks' test pool (voices the tuning never heard).
- **real** (reported, never tuned on): the real recordings only, the issue's own condition:
  the held-out call and cards, and bench.datasets' recited sonnet (a third real voice, line
  by line, added after every choice was made).

``python -m bench.realtime_eval --set tuning`` (or ``held-out``) prints the figures;
``--beam`` and the other flags try a policy without editing code. ``--talks 4 5 ...`` runs
other talks of the set's pool (the same seeds give the same talks): the default four tuning
talks are a draw on which the stream is as accurate as the whole file (24.58% against 24.17%),
while tuning talks 4-15 show the gap held-out talks do (bench/realtime.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import datasets, realtime, talks
from bench.accuracy_score import speech_errors
from extractor import samples

RATE = 16_000
CHUNK_MS = 40
GAP_SECONDS = 1.5
TUNING_TALKS = (0, 1, 2, 3)  # bench.talks tuning numbers (6 min 22 s in all)
HELD_OUT_TALKS = (0, 1, 2)  # bench.talks test numbers
SETS = ("tuning", "held-out", "real")  # what ``recordings`` takes (the docstring says each)
CARDS = "pocketsphinx-5.1.1/test/data/cards/"


@dataclass
class Recording:
    name: str
    audio: np.ndarray  # float32 mono 16 kHz
    text: str  # the labels

    @property
    def seconds(self) -> float:
        return len(self.audio) / RATE


def _gap() -> np.ndarray:
    return np.zeros(int(GAP_SECONDS * RATE), np.float32)


def _joined(name: str, parts: list[tuple[np.ndarray, str]]) -> Recording:
    audio = [_gap()]
    for wav, _text in parts:
        audio += [wav, _gap()]
    return Recording(name, np.concatenate(audio), " ".join(text for _w, text in parts))


def _mono16k(wav_bytes: bytes) -> np.ndarray:
    wav, rate = samples.decode_wav(wav_bytes)
    audio = wav.mean(axis=0).astype(np.float32)
    if rate != RATE:
        audio = np.interp(
            np.arange(0, len(audio), rate / RATE), np.arange(len(audio)), audio
        ).astype(np.float32)
    return audio


def librivox() -> Recording:
    parts = [(_mono16k(u.wav.read_bytes()), u.text) for u in datasets.librivox()]
    return _joined("librivox", parts)


def cards() -> Recording:
    """pocketsphinx's cards recordings, from the same pinned sdist as the LibriVox ones."""
    folder = datasets.cache_dir() / "cards"
    if not (folder / "cards.transcription").is_file():
        datasets.librivox()  # the sdist is fetched for it; cards come from a fresh download
        with tarfile.open(_sdist()) as sdist:
            folder.mkdir(parents=True, exist_ok=True)
            for member in sdist:
                if member.name.startswith(CARDS) and member.isfile():
                    data = sdist.extractfile(member)
                    assert data is not None
                    (folder / member.name.removeprefix(CARDS)).write_bytes(data.read())
    parts = []
    for line in (folder / "cards.transcription").read_text().splitlines():
        words, _, name = line.rpartition("(")
        text = " ".join(words.replace("<s>", "").replace("</s>", "").split())
        parts.append((_mono16k((folder / f"{name.strip(') ')}.wav").read_bytes()), text))
    return _joined("cards", parts)


def _sdist() -> Path:
    """pocketsphinx's pinned sdist (bench.datasets checks the LibriVox files of the same)."""
    import subprocess
    import sys
    import tempfile

    into = Path(tempfile.mkdtemp(prefix="cards-"))
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", "pocketsphinx", "--dest", str(into), datasets.POCKETSPHINX]
    subprocess.run(command, check=True, capture_output=True, timeout=1200)
    (found,) = into.iterdir()
    return found


def call() -> Recording:
    the_call = datasets.call()
    return Recording("call", _mono16k(the_call.wav.read_bytes()), the_call.text)


def sonnet() -> Recording:
    recital = datasets.sonnet()
    return Recording("sonnet", _mono16k(recital.wav.read_bytes()), recital.text)


def talk(set_name: str, number: int) -> Recording:
    made = talks.talk(set_name, number)
    conv = made.conversation
    audio = _mono16k(conv.wav())
    lead = np.zeros(RATE, np.float32)
    text = " ".join(turn.text for turn in conv.turns)
    return Recording(f"talk-{set_name}-{number}", np.concatenate([lead, audio, lead]), text)


def recordings(set_name: str, talks_only: list[int] | None = None) -> list[Recording]:
    """The set's recordings; with ``talks_only``, just those talks of its pool."""
    pool = "tuning" if set_name == "tuning" else "test"
    if talks_only is not None:
        return [talk(pool, n) for n in talks_only]
    if set_name == "tuning":
        return [librivox(), *(talk("tuning", n) for n in TUNING_TALKS)]
    if set_name == "real":
        return [call(), cards(), sonnet()]
    return [call(), cards(), *(talk("test", n) for n in HELD_OUT_TALKS)]


def _led(recording: Recording, seconds: float) -> Recording:
    """``recording`` after ``seconds`` of silence (itself for 0)."""
    if seconds <= 0:
        return recording
    lead = np.zeros(int(seconds * RATE), np.float32)
    name = f"{recording.name}+{seconds:g}s"
    return Recording(name, np.concatenate([lead, recording.audio]), recording.text)


def to_pcm24(audio: np.ndarray, resample: str = "swr") -> bytes:
    """``audio`` (16 kHz) as a client sends it: PCM16 at 24 kHz by libswresample, as
    ``extractor listen`` and bench/realtime.py resample (``resample="linear"``: the linear
    interpolation this bench once used, a duller signal on which tiny.en's close
    calls fell otherwise; bench/realtime.md)."""
    if resample == "linear":
        up = np.interp(np.arange(0, len(audio), 2 / 3), np.arange(len(audio)), audio)
        return (np.clip(up, -1, 1) * 32767).astype("<i2").tobytes()
    return realtime.to_pcm24(audio, RATE)


def stream(
    session_factory: Any, recording: Recording, resample: str = "swr"
) -> tuple[str, list[dict[str, Any]]]:
    """Feed ``recording`` to a new session in 40 ms appends, stepping it idle after each.

    Each event gets ``x_heard``: the seconds of audio sent when it came out (what the session
    had heard; a word's wait is that less its end in the audio)."""
    events: list[dict[str, Any]] = []
    session = session_factory(events.append)
    pcm = to_pcm24(recording.audio, resample)
    size = 24_000 * 2 * CHUNK_MS // 1000
    for offset in range(0, len(pcm), size):
        chunk = base64.b64encode(pcm[offset : offset + size]).decode()
        session.receive(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        while session.step():
            pass
        _heard(events, min(offset + size, len(pcm)) / (24_000 * 2))
    session.receive(json.dumps({"type": "input_audio_buffer.commit"}))
    while session.step():
        pass
    _heard(events, len(pcm) / (24_000 * 2))
    done = [
        e["transcript"]
        for e in events
        if e["type"] == "conversation.item.input_audio_transcription.completed"
    ]
    _check_append_only(events)
    return " ".join(t for t in done if t.strip()), events


def _heard(events: list[dict[str, Any]], seconds: float) -> None:
    for event in reversed(events):
        if "x_heard" in event:
            break
        event["x_heard"] = seconds


def reference_words(recording: Recording) -> list[tuple[str, float]]:
    """Each word's end (s) in ``recording``: faster-whisper's word timestamps of the whole
    file (tiny.en, beam 5), as bench/realtime.py times words; cached by the audio's digest."""
    import hashlib

    digest = hashlib.sha256(recording.audio.tobytes()).hexdigest()[:16]
    cached = datasets.cache_dir() / "realtime_eval" / f"{recording.name}-{digest}.json"
    if cached.is_file():
        return [(w, e) for w, e in json.loads(cached.read_text())]
    from faster_whisper import WhisperModel

    from extractor.asr.faster import bundled_model_dir

    model = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8")
    segments, _ = model.transcribe(recording.audio, word_timestamps=True, beam_size=5)
    words = [(w.word.strip(), w.end) for s in segments for w in (s.words or [])]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(words))
    return words


def waits(events: list[dict[str, Any]], reference: list[tuple[str, float]]) -> list[float]:
    """Audio seconds each sent word waited: what the session had heard when its delta came
    out, less the word's end (streamed words matched in order to the reference's)."""
    sent = [
        (word, event["x_heard"])
        for event in events
        if event["type"] == "conversation.item.input_audio_transcription.delta"
        for word in event["delta"].split()
    ]
    return _waited(sent, reference)


def shown(events: list[dict[str, Any]], reference: list[tuple[str, float]]) -> list[float]:
    """Audio seconds each word of the completed transcripts waited to be on screen as it
    ends up, the revisable tail included (``realtime.first_shown``), less the word's end."""
    return _waited(realtime.first_shown([(e["x_heard"], e) for e in events]), reference)


def _waited(sent: list[tuple[str, float]], reference: list[tuple[str, float]]) -> list[float]:
    """When each of ``sent`` (word, audio seconds heard) came, less the end of the word of
    ``reference`` it matches (in order)."""
    return [sent[i][1] - reference[j][1] for i, j in realtime.match_words(sent, reference).items()]


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _check_append_only(events: list[dict[str, Any]]) -> None:
    deltas: dict[str, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "conversation.item.input_audio_transcription.delta":
            deltas[event["item_id"]] = deltas.get(event["item_id"], "") + event["delta"]
        elif kind == "conversation.item.input_audio_transcription.completed":
            assert deltas.get(event["item_id"], "") == event["transcript"], event


def whole_file(recording: Recording, threads: int) -> str:
    from extractor.asr.base import TranscribeOptions
    from extractor.asr.faster import FasterWhisperEngine

    engine = _ENGINE.setdefault("engine", FasterWhisperEngine(None, threads=threads))
    result = engine.transcribe(recording.audio, TranscribeOptions(language="en"))
    return " ".join(s.text for s in result.segments)


_ENGINE: dict[str, Any] = {}


def final_window(seconds: float) -> None:
    """Give a turn's final decodes (the session's untimed ones; partial decodes are timed) an
    encoder window of at least ``seconds``."""
    from extractor.realtime.session import Session

    decode = Session._decode

    def decode_final(
        self: Any, item: Any, end: int, beam: int, *, timed: bool = False
    ) -> tuple[list[str], list[float] | None]:
        if timed:
            return decode(self, item, end, beam, timed=timed)
        saved = self.decoder.min_window_seconds
        self.decoder.min_window_seconds = max(saved, seconds)
        try:
            return decode(self, item, end, beam, timed=timed)
        finally:
            self.decoder.min_window_seconds = saved

    Session._decode = decode_final  # type: ignore[method-assign]


def main() -> None:
    from extractor.realtime import session
    from extractor.realtime.decoder import WindowDecoder
    from extractor.realtime.items import DecodePolicy
    from extractor.realtime.session import Session

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SETS, default="tuning")
    parser.add_argument("--partial-beam", type=int, default=None)
    parser.add_argument("--final-beam", type=int, default=None)
    parser.add_argument("--agreement", type=int, default=None)
    parser.add_argument("--hold-back", type=int, default=None)
    parser.add_argument("--repeat-words", type=int, default=None)
    parser.add_argument("--step", type=float, default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CTranslate2 threads per decode (the server's default, EXTRACTOR_REALTIME_THREADS, is"
        " 1; 2 ran a decode 2.2x slower than 1 on a 2-core host)",
    )
    parser.add_argument("--margin", type=float, default=None)
    parser.add_argument("--margin-newest", action="store_true")
    parser.add_argument("--patience", type=int, default=None)
    parser.add_argument("--prompt-words", type=int, default=None)
    parser.add_argument("--history-words", type=int, default=None)
    parser.add_argument("--context", type=float, default=None)
    parser.add_argument("--long-window", type=float, default=None)
    parser.add_argument("--slide", type=float, nargs=2, default=None, metavar=("PAST", "KEEP"))
    parser.add_argument("--min-window", type=float, default=10.0)
    parser.add_argument(
        "--final-window", type=float, default=None,
        help="seconds of window the encoder gets for a turn's final decodes (the partial"
        " decodes keep --min-window)",
    )  # fmt: skip
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument(
        "--talks", type=int, nargs="+", default=None,
        help="only these generated talks of the set's voice pool (bench.talks numbers)",
    )  # fmt: skip
    parser.add_argument("--dump", type=Path, help="write each recording's events here (JSON)")
    parser.add_argument("--no-whole", action="store_true")
    parser.add_argument(
        "--phase", type=float, nargs="+", default=[0.0],
        help="seconds of silence before each recording: each value streams it once more, so"
        " the partial decodes fall at other moments of its speech (as paced ones do)",
    )  # fmt: skip
    parser.add_argument(
        "--resample", choices=["swr", "linear"], default="swr",
        help="16 to 24 kHz as clients do (libswresample) or by linear interpolation (before)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.long_window:  # a turn's window is cut at the next pause past this many seconds
        session.LONG_WINDOW_SECONDS = args.long_window
    if args.final_window:
        final_window(args.final_window)
    base = DecodePolicy()
    policy = DecodePolicy(
        step_seconds=args.step or base.step_seconds,
        partial_beam=args.partial_beam or base.partial_beam,
        final_beam=args.final_beam or base.final_beam,
        agreement=args.agreement or base.agreement,
        hold_back=base.hold_back if args.hold_back is None else args.hold_back,
        repeat_words=base.repeat_words if args.repeat_words is None else args.repeat_words,
        margin=base.margin if args.margin is None else args.margin,
        prompt_words=base.prompt_words if args.prompt_words is None else args.prompt_words,
        history_words=base.history_words if args.history_words is None else args.history_words,
        margin_all=not args.margin_newest,
        patience=base.patience if args.patience is None else args.patience,
        context_seconds=base.context_seconds if args.context is None else args.context,
        slide_seconds=args.slide[0] if args.slide else base.slide_seconds,
        slide_keep=args.slide[1] if args.slide else base.slide_keep,
    )
    decoder = WindowDecoder(None, threads=args.threads, min_window_seconds=args.min_window)
    decoder.load()
    refs, streamed, whole = [], [], []
    all_waited: list[float] = []
    all_shown: list[float] = []  # the same to a word first shown right, the tail included
    talk_waited: list[float] = []  # the espeak-ng talks' words
    decode_total = audio_total = 0.0
    chosen = [r for r in recordings(args.set, args.talks) if not args.only or r.name in args.only]
    for recording in [_led(r, phase) for r in chosen for phase in args.phase]:
        started, busy = time.perf_counter(), decoder.seconds_busy
        text, events = stream(
            lambda emit: Session(decoder, emit, policy=policy), recording, args.resample
        )
        reference = reference_words(recording)
        waited, on_screen = waits(events, reference), shown(events, reference)
        all_shown += on_screen
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{recording.name}.json").write_text(json.dumps(events))
        all_waited += waited
        if recording.name.startswith("talk-"):
            talk_waited += waited
        spent = time.perf_counter() - started
        decoding = decoder.seconds_busy - busy
        decode_total += decoding
        audio_total += recording.seconds
        refs.append(recording.text)
        streamed.append(text)
        wer = speech_errors([recording.text], [text])
        line = f"{recording.name}: {recording.seconds:.0f} s, streamed WER {wer.wer:.1%}"
        if not args.no_whole:
            whole.append(whole_file(recording, args.threads))
            line += f", whole {speech_errors([recording.text], [whole[-1]]).wer:.1%}"
        cost = f"decode {decoding / recording.seconds:.3f} s per audio s"
        line += f", waited p50/p90 {_pct(waited, 50):.2f}/{_pct(waited, 90):.2f} s"
        line += f", shown {_pct(on_screen, 50):.2f}/{_pct(on_screen, 90):.2f} s"
        print(line + f" ({spent:.0f} s, {cost})", flush=True)
        print("   streamed:", text[:3000], flush=True)
    total = speech_errors(refs, streamed)
    line = f"ALL {args.set}: streamed WER {total.wer:.2%}"
    if whole:
        line += f", whole file {speech_errors(refs, whole).wer:.2%}"
    line += f"; words waited p50/p90/p95 {_pct(all_waited, 50):.2f}/{_pct(all_waited, 90):.2f}"
    line += f"/{_pct(all_waited, 95):.2f} s ({len(all_waited)} words)"
    line += f", talks' {_pct(talk_waited, 50):.2f}/{_pct(talk_waited, 90):.2f}"
    line += f"/{_pct(talk_waited, 95):.2f} s"
    line += f"; shown (tail included) {_pct(all_shown, 50):.2f}/{_pct(all_shown, 90):.2f}"
    line += f"/{_pct(all_shown, 95):.2f} s"
    if audio_total:
        line += f"; decode {decode_total / audio_total:.3f} s per audio s"
    print(line, flush=True)


if __name__ == "__main__":
    main()
