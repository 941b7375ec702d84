"""Asynchronous jobs measured on loopback: ``python -m bench.async_jobs [--samples DIR]``.

Real ``extractor serve`` processes (bench/server.py), a throwaway PostgreSQL cluster
(bench/postgres.py) and a webhook receiver on 127.0.0.1. Four figures, each a median with its
min and max (the machine is shared and busy: single numbers under load are noise):

1. **202 latency**: ``POST /v1/jobs`` with a 2-minute recording until the 202, on SQLite (the
   default) and on PostgreSQL; every job is cancelled at once so the queue stays short.
2. **Jobs per minute, 1 and 2 replicas**: a batch of 2-minute recordings submitted at once to
   replicas of one worker process and one job thread each, sharing the PostgreSQL queue; from
   the first submit to the last job ended. Rounds alternate 1 and 2 replicas.
3. **Sync latency under async load**: ``test.png`` on ``POST /extract`` on a default server
   (2 workers), idle and while two long jobs run, alternating within each round; the ratio of
   the medians is held to 3x (issue 21).
4. **Webhook delay**: from a job's end (its ``finished_at``) to its signed callback arriving at
   the receiver; the signature is checked too.

It also samples each replica's process group RSS (gunicorn's master and worker) while jobs run:
what deploy/kubernetes/ sizes its pods from. Writes its section into bench/results.md between
``<!-- async-jobs -->`` markers (``make bench`` runs it after bench.run rewrote the file).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.async_support import (
    SECRET,
    WEBHOOK_SECRET,
    JobClient,
    RssSampler,
    WebhookReceiver,
    spread,
    write_section,
)
from bench.inputs import varied_speech
from bench.postgres import PostgresCluster
from bench.server import Server, machine_busy_seconds, memory_mb, reset_peak
from extractor import samples

HERE = Path(__file__).resolve().parent
RECORDING_SECONDS = 120
LONG_RECORDING_SECONDS = 600  # the two jobs that load a server while sync latency is timed
TEST_PNG_LINES = ["This is a lot of 12 point text to test the", "ocr code and see if it works"]


def test_png(folder: Path | None) -> tuple[str, bytes]:
    """``test.png`` from the samples folder, or a generated stand-in of the same kind."""
    if folder is not None and (folder / "test.png").is_file():
        return "test.png", (folder / "test.png").read_bytes()
    return "test.png", samples.encode_image(samples.text_page(TEST_PNG_LINES).image, "PNG")


@contextlib.contextmanager
def serving(*flags: str, log_dir: Path, name: str, workers: int) -> Iterator[JobClient]:
    """One ``extractor serve`` with the bench's secret, ready, as a job client."""
    with Server(*flags, "--secret", SECRET, log_dir=log_dir, name=name) as server:
        server.wait_ready(workers)
        yield JobClient(server)


def server_memory(server: Server) -> tuple[float, list[float]]:
    """The gunicorn master's RSS and each worker's peak RSS (VmHWM: exact, not sampled), MB."""
    assert server.process is not None
    return memory_mb(server.process.pid), [memory_mb(pid, "VmHWM") for pid in server.worker_pids()]


def submit_latency(client: JobClient, recording: bytes, runs: int) -> list[float]:
    """Seconds to the 202 of ``runs`` submits; each job is cancelled straight after."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        job = client.submit("talk.wav", recording)
        times.append(time.perf_counter() - started)
        client.cancel(job["id"])
    return times


def throughput(clients: list[JobClient], recording: bytes, jobs: int) -> float:
    """Jobs per minute: ``jobs`` submitted at once (round robin), until the last one ends."""
    started = time.monotonic()
    ids = [clients[i % len(clients)].submit("talk.wav", recording)["id"] for i in range(jobs)]
    for job_id in ids:
        ended = clients[0].wait(job_id, timeout=1800)
        assert ended["status"] == "succeeded", ended
    return jobs / ((time.monotonic() - started) / 60)


def sync_under_load(
    client: JobClient, png: tuple[str, bytes], long: bytes, rounds: int, per_round: int
) -> tuple[list[float], list[float]]:
    """``test.png`` latencies idle and while two long jobs run, alternating by round."""
    idle: list[float] = []
    loaded: list[float] = []
    for _ in range(rounds):
        idle += [client.extract(*png) for _ in range(per_round)]
        jobs = [client.submit("long.wav", long)["id"] for _ in range(2)]
        for job_id in jobs:
            client.wait_running(job_id)
        loaded += [client.extract(*png) for _ in range(per_round)]
        for job_id in jobs:
            client.cancel(job_id)
    return idle, loaded


def webhook_delays(client: JobClient, png: tuple[str, bytes], runs: int) -> list[float]:
    """Seconds from each job's end to its webhook's arrival (signatures checked)."""
    with WebhookReceiver(WEBHOOK_SECRET) as receiver:
        delays = []
        for _ in range(runs):
            job = client.submit(*png, callback_url=receiver.url)
            ended = client.wait(job["id"], timeout=300)
            arrival = receiver.wait_for(job["id"], timeout=120)
            delays.append(arrival - ended["finished_at_epoch"])
        return delays


def met(times: list[float], target: float) -> str:
    """Whether the median is within the target."""
    return "yes" if statistics.median(times) <= target else "no"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--samples", type=Path, default=None, help="folder holding test.png")
    parser.add_argument("--out", type=Path, default=HERE / "results.md")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of each comparison")
    parser.add_argument("--batch", type=int, default=6, help="jobs per throughput batch")
    args = parser.parse_args(argv)

    png = test_png(args.samples)
    recording = varied_speech(RECORDING_SECONDS)
    compressed = samples.encode_audio(*samples.decode_wav(recording), "mp3")
    long = varied_speech(LONG_RECORDING_SECONDS, seed=1)
    started, busy_before = time.monotonic(), machine_busy_seconds()
    rows: list[str] = []
    memory: dict[str, float] = {}
    master, workers = 0.0, [0.0]  # set by the first phase
    with tempfile.TemporaryDirectory(prefix="bench-async-") as scratch:
        logs = Path(scratch)
        receiver_allow = "http://127.0.0.1:*"
        # -- one default server on SQLite: 202, sync under load, webhooks ---------------------
        with serving(
            "--data-dir", str(logs / "data"), "--webhook-secret", WEBHOOK_SECRET,
            "--outbound-allow", receiver_allow, log_dir=logs, name="sqlite", workers=2,
        ) as client:  # fmt: skip
            for name, upload in (("WAV", recording), ("MP3", compressed)):
                accepted = submit_latency(client, upload, runs=10)
                rows.append(
                    f"| 202 latency: POST /v1/jobs, {RECORDING_SECONDS // 60}-min recording "
                    f"({len(upload) / 1e6:.1f} MB {name}), SQLite (10 runs) | "
                    f"{spread(accepted)} | <= 500 ms | {met(accepted, 0.5)} |"
                )
            for pid in client.server.worker_pids():
                reset_peak(pid)
            idle, loaded = sync_under_load(client, png, long, args.rounds, per_round=5)
            master, workers = server_memory(client.server)
            ratio = statistics.median(loaded) / statistics.median(idle)
            rows.append(
                f"| test.png on POST /extract, idle (2 workers; {len(idle)} runs) | "
                f"{spread(idle)} | reported | — |"
            )
            rows.append(
                f"| the same while two {LONG_RECORDING_SECONDS // 60}-min jobs run "
                f"({len(loaded)} runs; {ratio:.2f}x the idle median) | {spread(loaded)} | "
                f"<= 3x idle | {'yes' if ratio <= 3 else 'no'} |"
            )
            delays = webhook_delays(client, png, runs=8)
            rows.append(
                f"| webhook delay: job end to signed callback received (test.png jobs; "
                f"{len(delays)} runs) | {spread(delays)} | <= 2 s | "
                f"{'yes' if max(delays) <= 2 else 'no'} |"
            )
        # -- replicas on PostgreSQL: 202 and jobs per minute ---------------------------------
        cluster = PostgresCluster()
        try:
            one = ("--database-url", cluster.url, "--workers", "1", "--job-workers", "1")
            per_minute: dict[int, list[float]] = {1: [], 2: []}
            with serving(*one, log_dir=logs, name="replica-1", workers=1) as first:
                for name, upload in (("WAV", recording), ("MP3", compressed)):
                    accepted = submit_latency(first, upload, runs=10)
                    rows.append(
                        f"| 202 latency: the same {name} on PostgreSQL (10 runs) | "
                        f"{spread(accepted)} | <= 500 ms | {met(accepted, 0.5)} |"
                    )
                sampler = RssSampler({"replica-1": first.server})
                with sampler:
                    for _ in range(args.rounds):
                        per_minute[1].append(throughput([first], recording, args.batch))
                        with serving(*one, log_dir=logs, name="replica-2", workers=1) as second:
                            sampler.add("replica-2", second.server)
                            per_minute[2].append(throughput([first, second], recording, args.batch))
                memory = sampler.peaks_mb()
            for count, figures in per_minute.items():
                rows.append(
                    f"| jobs per minute, {count} replica{'s' if count > 1 else ''} (1 worker, "
                    f"1 job thread each; batches of {args.batch} {RECORDING_SECONDS // 60}-min "
                    f"recordings; {len(figures)} rounds) | {spread(figures, unit='')} | "
                    f"reported | — |"
                )
            scaling = statistics.median(per_minute[2]) / statistics.median(per_minute[1])
            rows.append(f"| 2 replicas against 1 (medians) | {scaling:.2f}x | reported | — |")
        finally:
            cluster.stop()
    minutes = (time.monotonic() - started) / 60
    others = (machine_busy_seconds() - busy_before) / 60 / minutes
    rows.append(
        f"| memory of the default server after the sync-under-load rounds: peak RSS (VmHWM) "
        f"of each worker (a job thread and sync requests in one process), RSS of gunicorn's "
        f"master | workers {', '.join(f'{mb:.0f}' for mb in workers)} MB; master "
        f"{master:.0f} MB | reported (deploy/kubernetes sizes pods from it) | — |"
    )
    for name, peak in sorted(memory.items()):
        rows.append(
            f"| peak RSS of {name}'s process group (master + 1 worker; sampled every 50 ms) "
            f"while its jobs ran | {peak:.0f} MB | reported | — |"
        )
    write_section(args.out, rows, minutes=minutes, machine_cores_busy=others)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
