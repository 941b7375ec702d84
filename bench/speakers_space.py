"""``python -m bench.speakers_space``: fit the voice space (``extractor/asr/voice_space.npz``)
on the tuning talks only.

Every window of every tuning talk (``bench.talks``, set ``tuning``; embeddings cached by
``bench.speakers_tune``) that lies inside one voice's turn is grouped with the others of that
voice in that talk; ``extractor.asr.voice_space.fit`` turns the groups into the projection.
No held-out (``test``) or accuracy-harness talk is read.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from extractor.asr import voice_space

from .speakers_tune import Embedded, load

DIMS = 32  # of the voice space; chosen by two-fold cross-validation on the tuning set
TUNING_TALKS = 60


def groups(items: list[Embedded]) -> list[np.ndarray]:
    """Per talk and voice, the embeddings of the windows wholly inside that voice's turns."""
    found = []
    for item in items:
        at = item.talk.conversation.speaker_at
        who = np.array([
            at(start + 0.05) if at(start + 0.05) == at(end - 0.05) else -1
            for start, end in item.windows.tolist()
        ])  # fmt: skip
        found += [item.embeddings[who == v] for v in range(item.talk.speakers) if (who == v).sum()]
    return found


def fitted(items: list[Embedded], dims: int = DIMS) -> voice_space.VoiceSpace:
    return voice_space.fit(groups(items), dims)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_space", description=__doc__)
    parser.add_argument("--count", type=int, default=TUNING_TALKS, help="tuning talks to fit on")
    parser.add_argument("--dims", type=int, default=DIMS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    space = fitted(load("tuning", args.count), args.dims)
    voice_space.save(space)
    print(f"wrote {voice_space.SPACE} ({args.dims} of 192 directions, {args.count} tuning talks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
