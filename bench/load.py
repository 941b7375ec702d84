"""HTTP on loopback for the benchmark: one timed upload, and a bounded load generator.

Each request opens its own connection (``Connection: close``), as independent clients do; that
also lets whichever gunicorn worker is free accept it instead of pinning a client to one worker.
"""

from __future__ import annotations

import http.client
import itertools
import mimetypes
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

JSON = "application/json"


@dataclass(frozen=True)
class Upload:
    """A multipart/form-data body with one file in the field ``upload``, built once."""

    name: str
    body: bytes
    content_type: str

    @classmethod
    def of(cls, path: Path) -> Upload:
        boundary = uuid.uuid4().hex
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="upload";'
            f' filename="{path.name}"\r\nContent-Type: {mime}\r\n\r\n'
        ).encode()
        body = head + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        return cls(path.name, body, f"multipart/form-data; boundary={boundary}")


@dataclass(frozen=True)
class Reply:
    status: int  # 0: no HTTP answer (connection error or client timeout)
    seconds: float
    body: bytes = b""
    retry_after: str | None = None
    error: str | None = None
    ended: float = 0.0  # time.perf_counter() when the reply was read (or the request failed)

    @property
    def ok(self) -> bool:
        return self.status == 200

    def share_within(self, start: float, end: float) -> float:
        """How much of this request falls within ``start``..``end`` (perf_counter seconds), as
        a fraction of it: a request is counted as done evenly over its latency."""
        began = self.ended - self.seconds
        overlap = min(self.ended, end) - max(began, start)
        return max(overlap, 0.0) / self.seconds if self.seconds > 0 else float(start <= began < end)


def post(
    host: str, port: int, upload: Upload, *, accept: str = JSON, timeout: float = 300.0
) -> Reply:
    """POST /extract with ``upload``; the time covers connect, upload, extraction and reply."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request(
            "POST", "/extract", body=upload.body,
            headers={"Content-Type": upload.content_type, "Accept": accept, "Connection": "close"},
        )  # fmt: skip
        response = connection.getresponse()
        body = response.read()
        ended = time.perf_counter()
        return Reply(
            response.status, ended - started, body, response.getheader("Retry-After"), ended=ended
        )
    except OSError as exc:
        ended = time.perf_counter()
        return Reply(0, ended - started, error=f"{type(exc).__name__}: {exc}", ended=ended)
    finally:
        connection.close()


@dataclass
class LoadResult:
    """What N concurrent clients got: every reply, and the wall time from first send to last."""

    clients: int
    replies: list[Reply] = field(default_factory=list)
    wall: float = 0.0  # seconds
    started: float = 0.0  # time.perf_counter() when the clients started
    duration: float | None = None  # how long the clients kept sending, when that was bounded

    @property
    def ok(self) -> list[Reply]:
        return [r for r in self.replies if r.ok]

    @property
    def failed(self) -> int:
        return len(self.replies) - len(self.ok)

    @property
    def per_second(self) -> float:
        return len(self.ok) / self.wall if self.wall else 0.0

    def steady_per_second(self) -> float:
        """Successful requests per second while the load was steady: from the moment every
        client has had its first reply until the clients stopped sending (``duration``), each
        request counted by the share of its latency inside that window (``Reply.share_within``).

        Not the drain at the end (``per_second`` counts it): once the clients stop, the requests
        still queued finish with a worker idle now and then, which is the benchmark's doing.
        Not the ramp at the start either: every client sends at once and a request counts as
        it waits in a queue, so from a standing start the first waits would count as work (with
        4 clients on 2 workers, half a request per worker). Between two moments of a steady
        load the requests under way are alike, so what is counted between them is what was
        done, without rounding to whole requests."""
        if self.duration is None:
            raise ValueError("steady_per_second needs a run bounded by duration")
        end = self.started + self.duration
        firsts = sorted(r.ended for r in self.ok)[: self.clients]
        if len(firsts) < self.clients or firsts[-1] >= end:
            raise ValueError("the clients stopped before each had a reply: no steady load")
        begin = firsts[-1]
        done = sum(r.share_within(begin, end) for r in self.ok)
        return done / (end - begin)

    def latency(self, quantile: float) -> float:
        """A latency quantile of the successful requests, in seconds (nan when none)."""
        return percentile([r.seconds for r in self.ok], quantile)


def percentile(values: list[float], quantile: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    # Inclusive method: the quantile stays within the observed values for small samples.
    return statistics.quantiles(values, n=100, method="inclusive")[round(quantile * 100) - 1]


def run_load(
    host: str,
    port: int,
    uploads: list[Upload],
    clients: int,
    *,
    duration: float | None = None,
    total: int | None = None,
    deadline: float = 300.0,
) -> LoadResult:
    """``clients`` threads post ``uploads`` in turn until ``total`` requests were sent or
    ``duration`` seconds passed; nothing runs past ``deadline`` seconds (requests time out)."""
    if duration is None and total is None:
        raise ValueError("give a duration, a total, or both")
    tickets = itertools.count()
    lock = threading.Lock()
    started = time.perf_counter()
    result = LoadResult(clients, started=started, duration=duration)
    hard_stop = started + deadline

    def client(index: int) -> None:
        while True:
            now = time.perf_counter()
            if duration is not None and now - started >= duration:
                return
            with lock:
                ticket = next(tickets)
            if total is not None and ticket >= total:
                return
            if now >= hard_stop:
                return
            upload = uploads[(ticket + index) % len(uploads)]
            reply = post(host, port, upload, timeout=max(hard_stop - now, 1.0))
            with lock:
                result.replies.append(reply)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(hard_stop - time.perf_counter(), 0) + 5)
    result.wall = time.perf_counter() - started
    return result


def poll(host: str, port: int, path: str, seconds: float, interval: float = 0.05) -> list[float]:
    """GET ``path`` every ``interval`` for ``seconds``: latencies of the 200 answers, in seconds
    (a failed poll counts as the full interval it blocked, so it is not hidden)."""
    latencies = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        started = time.perf_counter()
        connection = http.client.HTTPConnection(host, port, timeout=10)
        try:
            connection.request("GET", path, headers={"Connection": "close"})
            response = connection.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started if response.status == 200 else 10.0)
        except OSError:
            latencies.append(10.0)
        finally:
            connection.close()
        time.sleep(max(interval - (time.perf_counter() - started), 0))
    return latencies
