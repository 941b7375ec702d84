"""How many windows CAM++ embeds at once (``extractor.asr.speakers.EMBED_BATCH``): a worker's
memory peak over its loaded size and the time the embedding takes, against senko's own
``_generate_embeddings`` (64 at once), on generated talks; and whether the speakers come out
the same (the embeddings' lowest cosine, the windows' labels after our clustering).

Each talk and batch size runs in a process of its own (the allocator keeps what an earlier run
freed): after a warm-up embedding, the peak RSS of the talk's first embedding over the RSS it
began at (Linux's VmHWM, reset first); the time is the median of 3::

    OPENBLAS_NUM_THREADS=1 python -m bench.speakers_batch --out bench/speakers_batch.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from extractor.asr import speakers
from extractor.asr.fbank import Features, fbank
from extractor.config import Settings

from .server import memory_mb, reset_peak
from .speakers_fbank import TALKS, lowest_cosine, talk_windows

BATCHES = (0, 16, 8, 4)  # 0: senko's own, 64 at once


def one(set_name: str, number: int, batch: int, out: Path) -> dict[str, float]:
    """In this process: embed one talk's windows ``batch`` at a time (0: senko's way)."""
    settings = Settings()
    diarizer = speakers.SpeakerDiarizer(
        1, settings.speakers_merge_similarity, settings.speakers_min_speech
    )
    diarizer.load()
    model = diarizer._model
    audio, windows = talk_windows(model, set_name, number)
    features = fbank(audio, windows)
    if batch:
        speakers.EMBED_BATCH = batch

        def embed(f: Features) -> np.ndarray:
            return speakers._embeddings(model, *f)
    else:

        def embed(f: Features) -> np.ndarray:
            return model._generate_embeddings(f[0], f[1], [int(o) for o in f[2]], f[3])

    embed(fbank(audio, windows[:2]))  # TorchScript's first run
    me = os.getpid()
    reset_peak(me)
    before = memory_mb(me)
    spent = []
    for _ in range(3):
        started = time.perf_counter()
        embeddings = embed(features)
        spent.append(time.perf_counter() - started)
        if len(spent) == 1:
            added = memory_mb(me, "VmHWM") - before  # the first run's peak over what it began at
    labels = speakers.cluster(embeddings, np.asarray(windows), diarizer.clustering, None)
    np.savez(out, embeddings=embeddings, labels=labels)
    return {
        "seconds": statistics.median(spent),
        "added_mb": added,
        "audio_s": len(audio) / 16_000,
        "windows": len(windows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_batch", description=__doc__)
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # SET NUMBER BATCH NPZ
    args = parser.parse_args(argv)
    if args.one:
        set_name, number, batch, out = args.one
        print(json.dumps(one(set_name, int(number), int(batch), Path(out))))
        return 0
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for set_name, number in TALKS:
            runs, kept = {}, {}
            for batch in BATCHES:
                out = Path(tmp) / f"{set_name}-{number}-{batch}.npz"
                child = [sys.executable, "-m", "bench.speakers_batch", "--one", set_name,
                         str(number), str(batch), str(out)]  # fmt: skip
                done = subprocess.run(child, check=True, capture_output=True, text=True)
                runs[batch] = json.loads(done.stdout.strip().splitlines()[-1])
                with np.load(out) as saved:
                    kept[batch] = (saved["embeddings"], saved["labels"])
            theirs, their_labels = kept[0]
            first = runs[0]
            parts = [f"senko's 64: {first['seconds']:.2f} s, +{first['added_mb']:.0f} MB"]
            for batch in BATCHES[1:]:
                ours, labels = kept[batch]
                same = "the same labels" if np.array_equal(labels, their_labels) else "OTHER LABELS"
                parts.append(
                    f"{batch}: {runs[batch]['seconds']:.2f} s, +{runs[batch]['added_mb']:.0f} MB,"
                    f" cosine {lowest_cosine(ours, theirs):.7f}, {same}"
                )
            lines.append(
                f"- {set_name} {number} ({first['audio_s']:.0f} s, {first['windows']:.0f}"
                f" windows): " + "; ".join(parts)
            )
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
