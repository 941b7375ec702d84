"""Speed per speech model: the service against bare faster-whisper on the same model.

For each installed model (``tiny.en``, ``base`` with ``extractor[base]``): one LibriVox
utterance (short) and the recited sonnet (53 s, about a minute), each POSTed to one
``extractor serve`` worker with ``?model=`` and transcribed by faster-whisper's ``WhisperModel``
in this process on the same model directory with the server's default options. CPU seconds
(the worker's, the bare process's), best of ``--rounds``: CPU time moves less with the
machine's other load than wall time, which is given beside it. The trivial baseline: the
bare engine itself (ratio 1.00).

    .venv/bin/python -m bench.speed_models --out bench/speed_models.md
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from extractor.asr.models import installed_models

from . import datasets
from .accuracy_engines import Service
from .accuracy_languages import BareModel, Clip
from .server import cpu_seconds

log = logging.getLogger("bench.speed_models")
COMMAND = ".venv/bin/python -m bench.speed_models --out bench/speed_models.md"


def clips() -> list[Clip]:
    short = datasets.librivox()[0]
    sonnet = datasets.sonnet()
    return [
        Clip(f"short ({short.name[-4:]})", short.wav, short.text, "en"),
        Clip("sonnet (53 s)", sonnet.wav, sonnet.text, "en"),
    ]


def service_costs(
    service: Service, clip: Clip, model: str, rounds: int
) -> tuple[float, float]:  # fmt: skip
    """Best CPU seconds of the worker and best wall seconds of the request."""
    worker = service.worker_pids()[0]
    cpu, wall = [], []
    data = clip.path.read_bytes()
    for _ in range(rounds):
        before, started = cpu_seconds(worker), time.perf_counter()
        service.post(data, clip.path.name, query=f"?model={model}", accept="text/plain")
        wall.append(time.perf_counter() - started)
        cpu.append(cpu_seconds(worker) - before)
    return min(cpu), min(wall)


def bare_costs(bare: BareModel, clip: Clip, rounds: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(rounds):
        before, started = time.process_time(), time.perf_counter()
        bare.heard(clip)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - before)
    return min(cpu), min(wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_models", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "speed_models.md")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    models, measured = installed_models(), {}
    with (
        tempfile.TemporaryDirectory(prefix="extractor-speed-") as scratch,
        Service("--workers", "1", log_dir=Path(scratch)) as service,
    ):
        service.wait_ready(1)
        for model in models:
            for clip in clips():
                service.post(clip.path.read_bytes(), clip.path.name,
                             query=f"?model={model}", accept="text/plain")  # fmt: skip
                measured[model, "service", clip.name] = service_costs(
                    service, clip, model, args.rounds
                )
            log.info("service %s done", model)
    for model in models:
        bare = BareModel(model)
        for clip in clips():
            bare.heard(clip)  # the first call's one-time costs out
            measured[model, "bare", clip.name] = bare_costs(bare, clip, args.rounds)
        log.info("bare %s done", model)
    lines = [
        "# Speed per speech model",
        "",
        "One `extractor serve` worker (`?model=`) against faster-whisper's `WhisperModel` on",
        "the same model directory with the server's default options (int8, 1 thread, beam 5,",
        "VAD), after one warm-up each; CPU seconds and wall seconds, best of",
        f"{args.rounds}. The bare engine is the baseline (ratio 1.00).",
        "",
        "| model | clip | service CPU s | bare CPU s | service / bare | service wall s"
        " | bare wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in models:
        for clip in clips():
            (s_cpu, s_wall), (b_cpu, b_wall) = (
                measured[model, "service", clip.name], measured[model, "bare", clip.name]
            )  # fmt: skip
            lines.append(
                f"| {model} | {clip.name} | {s_cpu:.2f} | {b_cpu:.2f} | {s_cpu / b_cpu:.2f}"
                f" | {s_wall:.2f} | {b_wall:.2f} |"
            )
    lines += ["", f"Reproduce: `{COMMAND}`"]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
