"""Asynchronous work does not starve synchronous requests: ``test.png`` on ``/extract`` stays
within 3x its idle latency while two long jobs (transcriptions of long recordings) run on the
same server. Medians of seven requests each."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import httpx
import pytest
from jobs_support import fresh_database, serve, submit, wait_for
from support import PAGE_ONE, SPOKEN, requires_espeak

from extractor import samples

pytestmark = pytest.mark.slow  # real servers and engines: make test, not test-fast

SAMPLES = 7


def _latencies(client: httpx.Client, png: bytes, count: int) -> list[float]:
    took = []
    for _ in range(count):
        started = time.perf_counter()
        reply = client.post("/extract", files={"upload": ("test.png", png)})
        took.append(time.perf_counter() - started)
        assert reply.status_code == 200, reply.text
    return took


@requires_espeak
@pytest.mark.serial  # a latency ratio, measured alone (make test's second pass)
@pytest.mark.timeout(900)
def test_extract_stays_within_3x_while_two_jobs_run(tmp_path: Path) -> None:
    png = samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")
    recording = samples.repeat_speech(SPOKEN, 300)  # 5 minutes: the jobs outlast the test
    with fresh_database("sqlite", tmp_path, None) as url:
        server = serve(tmp_path, url, job_workers=2)
        try:
            with server.client() as client:
                _latencies(client, png, 2)  # warm
                idle = _latencies(client, png, SAMPLES)
                jobs = [submit(client, recording, f"long{i}.wav").json() for i in range(2)]
                for job in jobs:  # both taken by a job thread
                    wait_for(client, job["id"], lambda j: j["status"] == "running", every=0.2)
                time.sleep(1)
                loaded = _latencies(client, png, SAMPLES)
                still = [client.get(f"/v1/jobs/{job['id']}").json()["status"] for job in jobs]
                for job in jobs:
                    client.delete(f"/v1/jobs/{job['id']}")
                cancelled_at = time.monotonic()
                # Transcribing, each stops at the engine's next segment, not after 5 minutes.
                while not all(f"job {j['id']} interrupted" in server.log_text() for j in jobs):
                    assert time.monotonic() - cancelled_at < 30, "a cancelled job kept running"
                    time.sleep(0.2)
                stopped_after = time.monotonic() - cancelled_at
        finally:
            server.stop()
    assert still == ["running", "running"]  # they ran all along
    idle_median, loaded_median = statistics.median(idle), statistics.median(loaded)
    print(f"test.png: idle median {idle_median:.3f} s, with two jobs {loaded_median:.3f} s;"
          f" both jobs stopped {stopped_after:.1f} s after their DELETE")  # fmt: skip
    assert loaded_median <= 3 * idle_median, (idle, loaded)
