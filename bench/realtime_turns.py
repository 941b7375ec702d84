"""What hearing each turn on its own costs, offline: the live stream's turns given whole to the
whole-file engine.

A live session decodes each turn (speech between pauses of ``silence_duration_ms``) as it
comes; ``POST /extract`` decodes the whole recording in Whisper's 30 s windows, each turn
heard among the turns around it. This bench splits a recording where the stream would
(``extractor.realtime.turns.TurnDetector``, server_vad's defaults), and gives each turn to the
whole-file engine (faster-whisper, beam 5, timestamps, Whisper's temperature fallback, the
previous window's text as the prompt within the turn), with ``--around`` seconds of the
recording around it (``--side``: before, after or both; the words Whisper ends outside the
turn are dropped). With nothing around, its WER is the stream's turns decoded offline by the
whole-file machinery, each as a whole; with audio around, what hearing the turns before and
after adds (a live stream has the audio before a turn, not what comes after it until it is
said). bench/realtime.md has the figures.

``python -m bench.realtime_turns --set tuning --talks 4 5 6 7 8 9 10 11 12 13 14 15
--around 0 10`` (the sets are bench.realtime_eval's).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench import realtime_eval
from bench.accuracy_score import speech_errors

RATE = realtime_eval.RATE


def turns(audio: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) samples of each turn the live session's server_vad would make."""
    from extractor.realtime.events import ServerVad
    from extractor.realtime.turns import TurnDetector

    config = ServerVad()
    detector = TurnDetector(config)
    padding = config.prefix_padding_ms * RATE // 1000
    found, start = [], 0
    for change in detector.feed(audio):
        if change.kind == "started":
            start = max(change.start - padding, 0)
        else:
            found.append((start, change.end))
    if detector.speaking:
        found.append((start, len(audio)))
    return found


def heard_alone(
    engine: Any, audio: np.ndarray, spans: list[tuple[int, int]], around: float, side: str
) -> str:
    """Each span of ``audio`` transcribed with ``around`` seconds of audio on ``side`` (left,
    right or both), keeping the words that end in the span."""
    from extractor.asr.base import TranscribeOptions

    options = TranscribeOptions(language="en", vad=False, word_timestamps=True)
    before = int(around * RATE) if side in ("left", "both") else 0
    after = int(around * RATE) if side in ("right", "both") else 0
    texts = []
    for first, end in spans:
        start = max(first - before, 0)
        result = engine.transcribe(audio[start : end + after], options)
        low, high = (first - start) / RATE, (end - start) / RATE
        # By its end: Whisper stretches a word after a pause back over the silence before it.
        texts += [w.text for s in result.segments for w in s.words if low < w.end <= high]
    return " ".join(texts)


def main() -> None:
    from extractor.asr.faster import FasterWhisperEngine

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=realtime_eval.SETS, default="tuning")
    parser.add_argument("--talks", type=int, nargs="+", default=None)
    parser.add_argument("--around", type=float, nargs="+", default=[0.0, 10.0])
    parser.add_argument("--side", choices=["both", "left", "right"], default="both")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    # The engine whole_file uses too: one model in memory, not two.
    engine = realtime_eval._ENGINE.setdefault(
        "engine", FasterWhisperEngine(None, threads=args.threads)
    )
    refs: list[str] = []
    heard: dict[str, list[str]] = {"whole file": []}
    for recording in realtime_eval.recordings(args.set, args.talks):
        spans = turns(recording.audio)
        refs.append(recording.text)
        line = [f"{recording.name}: {recording.seconds:.0f} s, {len(spans)} turns"]
        for around in args.around:
            text = heard_alone(engine, recording.audio, spans, around, args.side)
            name = f"turns, {around:g} s {args.side}"
            heard.setdefault(name, []).append(text)
            line.append(f"{name} {_wer(recording.text, text)}")
        heard["whole file"].append(realtime_eval.whole_file(recording, args.threads))
        line.append(f"whole file {_wer(recording.text, heard['whole file'][-1])}")
        print(", ".join(line), flush=True)
    for name, texts in heard.items():
        print(f"ALL {args.set}, {name}: WER {speech_errors(refs, texts).wer:.2%}", flush=True)


def _wer(reference: str, text: str) -> str:
    return f"{speech_errors([reference], [text]).wer:.1%}"


if __name__ == "__main__":
    main()
