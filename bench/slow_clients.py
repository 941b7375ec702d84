"""Slow request bodies against both services, per gunicorn worker: ``python -m bench.slow_clients``.

For each service (the extractor, the labeling service) and each worker variant, starts the real
server on a loopback port with one worker process of 4 threads (both services' default
thread count; the labeling service's default worker count), opens ``--dribblers``
connections that send their headers (``Content-Length: 100000``, a multipart upload to the
extractor or JSON to the labeling service, every other one with a valid token) and then one byte
every ``--every`` seconds, and meanwhile times a small request of
another client every 2 s (the extractor: a one-line PNG to ``POST /extract``; the labeling
service: a ``getTags`` query). It reports that client's latencies, how the dribblers ended
(408, closed, still open) and the server's threads and RSS, and writes bench/slow_clients.md.
``--scenario unclosed`` has the connections send a whole request that asks to close and never
close their side; ``--scenario flood`` has them send part of a head and stop.

Variants:

- ``gthread``: gunicorn's threaded worker as both services ran it before issue 18;
- ``deadline``: the same with a per-read socket deadline of ``--read-deadline`` s (what
  ``client_body_timeout`` is to nginx): a read that waits longer fails;
- ``buffering``: ``extractor.server.buffering_worker`` (requests received whole by the main loop,
  408 past the header/body deadlines, 503 past the pending cap), what both services run now.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.server import group_status_sums

VARIANTS = ("gthread", "deadline", "buffering")
SCENARIOS = {
    "dribble": "{n} connections send headers (Content-Length: 100000; a multipart upload to the"
    " extractor, JSON to the labeling service; every other one with a valid token), then 1 byte"
    " every {every:g} s, for {seconds:g} s",
    "unclosed": "{n} connections send `GET /healthz` with `Connection: close`, read the reply"
    " and never close their side, for {seconds:g} s",
    "flood": "{n} connections send part of a request head and nothing more, for {seconds:g} s",
}
SERVICES = ("extractor", "labeling")
SECRET = "bench-secret"
MULTIPART = "multipart/form-data; boundary=slow"  # an upload, as the extractor reads it


# -- the servers --------------------------------------------------------------------------------
def _deadline_worker(read_deadline: float) -> type:
    """gthread with a per-read socket timeout on every connection it serves."""
    from gunicorn.workers.gthread import TConn, ThreadWorker

    class DeadlineConn(TConn):
        def init(self) -> None:
            super().init()
            self.sock.settimeout(read_deadline)

    class ReadDeadlineWorker(ThreadWorker):
        def accept(self, listener: Any) -> None:
            try:
                sock, client = listener.accept()
            except BlockingIOError:
                return
            self.nr_conns += 1
            self.enqueue_req(DeadlineConn(self.cfg, sock, client, listener.getsockname()))

    return ReadDeadlineWorker


def serve(service: str, variant: str, port: int, read_deadline: float) -> None:
    """Run one service under one worker variant in the foreground (a subprocess of the bench)."""
    from extractor.server import application as serving

    bind = f"127.0.0.1:{port}"
    if service == "extractor":
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from extractor.config import Settings
        from extractor.server.gunicorn_conf import gunicorn_options, intake_limits
        from extractor.web.app import create_app

        # One worker: with several, which one accepts the dribblers is a race, and a run would
        # measure whether the other client's connection landed on a worker they left alone.
        settings = Settings.load(
            overrides={"bind": bind, "secret": SECRET, "log_level": "warning", "workers": 1}
        )
        options = gunicorn_options(settings)
        limits = intake_limits(settings)
        factory: Any = lambda: create_app(settings)  # noqa: E731
        plain = "extractor.server.gunicorn_conf.EngineAwareThreadWorker"
    else:
        from extractor.config import LabelingSettings
        from extractor.labeling.app import create_labeling_app
        from extractor.labeling.cli import graphql_intake_limits, serve_options

        lsettings = LabelingSettings.load()
        options = serve_options(lsettings, bind, 1, 4)
        options["accesslog"] = None
        limits = graphql_intake_limits(lsettings)
        factory = lambda: create_labeling_app(lsettings, start_workers=True)  # noqa: E731
        plain = "extractor.server.buffering_worker.BufferingThreadWorker"
    if variant == "gthread":
        options["worker_class"] = "gthread"
    elif variant == "deadline":
        options["worker_class"] = _deadline_worker(read_deadline)
    else:
        options["worker_class"] = plain
    serving.serve(factory, options, limits)


# -- the clients --------------------------------------------------------------------------------
@dataclass
class Dribblers:
    """Connections that send headers, then one body byte every ``every`` seconds."""

    port: int
    path: str
    token: str
    count: int
    every: float
    content_type: str  # what the app reads the body as (else it may refuse before reading)
    scenario: str = "dribble"  # or "unclosed", "flood": see SCENARIOS
    started: float = 0.0
    outcomes: dict[int, str] = field(default_factory=dict)  # index: what ended it, when

    def open(self) -> None:
        self.sockets: list[socket.socket] = []
        self.selector = selectors.DefaultSelector()
        for index in range(self.count):
            sock = socket.create_connection(("127.0.0.1", self.port))
            head = (
                f"POST {self.path} HTTP/1.1\r\nHost: bench\r\nContent-Length: 100000\r\n"
                f"Content-Type: {self.content_type}\r\n"
            )
            if index % 2 == 0:
                head += f"Authorization: Bearer {self.token}\r\n"
            if self.scenario == "unclosed":
                head = "GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n"
            sock.sendall((head if self.scenario == "flood" else head + "\r\n").encode())
            sock.setblocking(False)
            self.sockets.append(sock)
            self.selector.register(sock, selectors.EVENT_READ, index)
        self.started = time.monotonic()
        self.next_byte = self.started + (0.5 if self.scenario == "dribble" else 1e9)

    def start(self) -> None:
        """Dribble in a thread of its own, so bytes keep coming while the other client waits."""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            self.tick(time.monotonic() + 0.2)

    def tick(self, until: float) -> None:
        """Send bytes when due and note answers, until ``until``."""
        while (now := time.monotonic()) < until:
            if now >= self.next_byte:
                for index, sock in enumerate(self.sockets):
                    if index not in self.outcomes:
                        try:
                            sock.send(b"x")
                        except OSError:
                            self._end(index, "reset")
                self.next_byte = now + self.every
            for key, _ in self.selector.select(max(0.0, min(until, self.next_byte) - now)):
                self._read(key.data)

    def _read(self, index: int) -> None:
        try:
            data = self.sockets[index].recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data.startswith(b"HTTP/1.1 "):
            self._end(index, data[9:12].decode())
        elif not data:
            self._end(index, "closed")

    def _end(self, index: int, what: str) -> None:
        if index not in self.outcomes:
            self.outcomes[index] = f"{what} at {time.monotonic() - self.started:.0f} s"
            self.selector.unregister(self.sockets[index])

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()

    def summary(self) -> str:
        ends: dict[str, int] = {}
        for outcome in self.outcomes.values():
            status = outcome.split(" at ")[0]
            ends[status] = ends.get(status, 0) + 1
        seconds = [float(o.split(" at ")[1][:-2]) for o in self.outcomes.values()]
        still = self.count - len(self.outcomes)
        if not self.count:
            return "(none)"
        parts = [f"{n}x {status}" for status, n in sorted(ends.items())]
        if seconds:
            parts.append(f"after {min(seconds):.0f}-{max(seconds):.0f} s")
        if still:
            parts.append(f"{still} still open")
        return ", ".join(parts)


def group_stats(group: int) -> tuple[int, int]:
    """Threads and resident MB of every process in the process group ``group``."""
    sums = group_status_sums(group, "Threads", "VmRSS")
    return sums["Threads"], sums["VmRSS"] // 1024


@dataclass
class Run:
    service: str
    variant: str
    latencies: list[float | None]
    dribblers: str
    threads: int
    rss_mb: int
    refused: list[str] = field(default_factory=list)

    def row(self) -> str:
        answered = sorted(x for x in self.latencies if x is not None)
        missing = len(self.latencies) - len(answered)
        others = f"; {len(self.refused)} got {', '.join(self.refused)}" if self.refused else ""
        median = f"{statistics.median(answered):.3f}" if answered else "-"
        worst = f"{answered[-1]:.3f}" if answered else "-"
        return (
            f"| {self.service} | {self.variant} | {len(answered)}/{len(self.latencies) + len(self.refused)}"
            f" ({missing} timed out{others}) | {median} | {worst} | {self.dribblers} | {self.threads}"
            f" | {self.rss_mb} |"
        )


def _labeling_env(data: Path) -> tuple[dict[str, str], str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTRACTOR_LABELING_")}
    env["EXTRACTOR_LABELING_DATA_DIR"] = str(data)
    made = subprocess.run(
        [sys.executable, "-m", "extractor.cli", "labeling", "add-user", "bench@example.com",
         "--team", "Bench"], env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    user = json.loads(made.stdout)
    return env, user["token"], user["teamId"]


def _probe(service: str, url: str, token: str, team: str, png: bytes, timeout: float) -> Any:
    if service == "extractor":
        return httpx.post(
            url + "/extract?format=text",
            files={"upload": ("test.png", png, "image/png")},
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )
    query = 'query { getTags(input: {teamId: "' + team + '"}) { id } }'
    return httpx.post(
        url + "/graphql",
        json={"query": query},
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_one(service: str, variant: str, args: argparse.Namespace, png: bytes) -> Run:
    """Start the server, dribble, probe, and stop it."""
    with tempfile.TemporaryDirectory(prefix="slow-clients-") as scratch:
        env, token, team = dict(os.environ), SECRET, ""
        if service == "labeling":
            env, token, team = _labeling_env(Path(scratch))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "bench.slow_clients", "--serve", service, variant,
                   str(port), "--read-deadline", str(args.read_deadline)]  # fmt: skip
        server = subprocess.Popen(
            command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            ready = "/readyz" if service == "extractor" else "/healthz"
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url + ready, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"{service}/{variant} did not start")
                time.sleep(0.3)
            _probe(service, url, token, team, png, 60)  # warm up every path
            path = "/extract" if service == "extractor" else "/graphql"
            kind = MULTIPART if service == "extractor" else "application/json"
            dribblers = Dribblers(
                port, path, token, args.dribblers, args.every, kind, args.scenario
            )
            dribblers.open()
            dribblers.start()
            latencies: list[float | None] = []
            refused: list[str] = []  # answers other than 200 (503 past the pending cap)
            end = dribblers.started + args.seconds
            stats = (0, 0)
            while time.monotonic() < end:
                time.sleep(2)
                started = time.monotonic()
                try:
                    reply = _probe(service, url, token, team, png, args.probe_timeout)
                    if reply.status_code == 200:
                        latencies.append(time.monotonic() - started)
                    else:
                        refused.append(f"{reply.status_code} in {time.monotonic() - started:.3f} s")
                except httpx.HTTPError:
                    latencies.append(None)
                stats = max(stats, group_stats(server.pid))
            dribblers.close()
            return Run(service, variant, latencies, dribblers.summary(), *stats, refused)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=3, metavar=("SERVICE", "VARIANT", "PORT"))
    parser.add_argument("--services", default=",".join(SERVICES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--dribblers", type=int, default=64)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two bytes")
    parser.add_argument("--seconds", type=float, default=45.0, help="how long each run dribbles")
    parser.add_argument("--probe-timeout", type=float, default=10.0)
    parser.add_argument("--read-deadline", type=float, default=10.0)
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="dribble")
    parser.add_argument("--out", default=None, help="write the Markdown table here too")
    parser.add_argument("--append", action="store_true", help="add to --out, not replace it")
    args = parser.parse_args()
    if args.serve:
        service, variant, port = args.serve
        serve(service, variant, int(port), args.read_deadline)
        return 0
    from extractor import samples

    page = samples.text_page(["Slow clients bench"], size=(600, 200))
    png = samples.encode_image(page.image, "PNG")
    header = [
        SCENARIOS[args.scenario].format(n=args.dribblers, every=args.every, seconds=args.seconds)
        + "; another client sends one small request every 2 s (extractor: a one-line PNG to POST /extract; labeling: a"
        f" getTags query); no answer within {args.probe_timeout:g} s counts as timed out. Each"
        " server: one worker process of 4 threads. Threads and RSS: the server's whole process"
        " group, at most. `deadline`: gthread with a per-read socket deadline of"
        f" {args.read_deadline:g} s.",
        "",
        "| Service | Worker | Answered | Median s | Worst s | Dribblers ended | Threads | RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    rows = []
    idle = argparse.Namespace(**{**vars(args), "dribblers": 0})
    for service in args.services.split(","):
        reference = ["idle"] if args.scenario == "dribble" else []
        for variant in [*reference, *args.variants.split(",")]:
            if variant == "idle":  # the same requests with nobody dribbling, for reference
                row = run_one(service, "buffering", idle, png).row().replace("buffering", "idle")
            else:
                row = run_one(service, variant, args, png).row()
            print(row, flush=True)
            rows.append(row)
    if args.out:
        command = "python -m bench.slow_clients " + " ".join(sys.argv[1:])
        section = f"`{command.strip()}`\n\n" + "\n".join(header + rows) + "\n"
        out = Path(args.out)
        if args.append and out.exists():
            out.write_text(out.read_text() + "\n" + section)
        else:
            out.write_text("# Slow clients\n\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
