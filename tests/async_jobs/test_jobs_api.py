"""The asynchronous job API over a real gunicorn server and its SQLite job database: 202 at
once, progress that never goes down, results byte-equal to ``POST /extract`` in every format,
the synchronous errors, 4xx at submit, cancel and delete, lists, caps and the time to live.
(Webhooks: test_webhooks.py; SIGKILL and PostgreSQL: test_jobs_durability.py.)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from jobs_support import Server, fresh_database, serve, submit, wait_for
from sqlalchemy import create_engine, text
from support import PAGE_ONE, PAGE_TWO, SPOKEN

from extractor import samples

pytestmark = pytest.mark.slow  # real servers and engines: make test, not test-fast


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server on each job database; every test here runs on both."""
    tmp = tmp_path_factory.mktemp("jobs-api")
    admin = request.getfixturevalue("postgres_admin_url") if request.param != "sqlite" else None
    with fresh_database(request.param, tmp, admin) as url:
        running = serve(tmp, url, max_pages=6, job_workers=1, secret="s3cret")
        yield running
        running.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url, timeout=120, headers={"Authorization": "Bearer s3cret"}
    ) as http:
        yield http


@pytest.fixture(scope="module")
def png() -> bytes:
    return samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")


@pytest.fixture(scope="module")
def pdf() -> bytes:
    pages = [samples.text_page(PAGE_ONE if i % 2 == 0 else PAGE_TWO, page=i) for i in range(5)]
    return samples.pdf(pages)


def test_a_job_answers_202_with_its_location_and_reads_like_extract(
    client: httpx.Client, png: bytes
) -> None:
    reply = submit(client, png, "scan.png", params={"ocr_rotate": "off"})
    assert reply.status_code == 202, reply.text
    job = reply.json()
    assert reply.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] in ("queued", "running") and job["progress"] < 1
    assert job["upload"] == {"filename": "scan.png", "kind": "image", "bytes": len(png)}
    assert job["options"] == {"ocr_rotate": False}
    assert len(job["id"].rsplit(":", 1)[1]) == 36  # a UUID4: 122 random bits
    done = wait_for(client, job["id"])
    assert done["status"] == "succeeded" and done["progress"] == 1, done
    assert done["result_url"] == f"/v1/jobs/{job['id']}/result"
    assert done["finished_at"] >= done["started_at"] >= done["created_at"], done
    for accept, fmt in (
        ("application/json", None),
        ("text/plain", None),
        (None, "hocr"),
        (None, "alto"),
        (None, "tsv"),
        ("text/plain", "json"),  # ?format= wins over Accept, as on /extract
    ):
        headers = {"Accept": accept} if accept else {}
        params = {"ocr_rotate": "off", **({"format": fmt} if fmt else {})}
        sync = client.post(
            "/extract", params=params, files={"upload": ("scan.png", png)}, headers=headers
        )
        stored = client.get(
            f"/v1/jobs/{job['id']}/result",
            params={"format": fmt} if fmt else None,
            headers=headers,
        )
        assert sync.status_code == stored.status_code == 200, (accept, fmt, stored.text)
        assert stored.headers["Content-Type"] == sync.headers["Content-Type"]
        assert stored.content == sync.content, (accept, fmt)


def test_progress_counts_pages_and_never_goes_down(client: httpx.Client, pdf: bytes) -> None:
    job = submit(client, pdf, "five.pdf", params={"ocr_rotate": "off"}).json()
    seen: list[dict[str, object]] = []
    wait_for(client, job["id"], seen=seen, every=0.05)
    progress = [float(str(j["progress"])) for j in seen]
    assert progress == sorted(progress), progress
    assert progress[-1] == 1.0
    # Pages done of pages; 0.99 while the last page's result is being stored.
    assert {p for p in progress if 0 < p < 1} <= {0.2, 0.4, 0.6, 0.8, 0.99}, progress
    sync = client.post("/extract?ocr_rotate=off&format=alto", files={"upload": ("five.pdf", pdf)})
    stored = client.get(f"/v1/jobs/{job['id']}/result?format=alto")
    assert stored.content == sync.content


def test_a_failed_job_carries_the_synchronous_error(client: httpx.Client) -> None:
    pages = [samples.text_page([f"page {i}"], page=i) for i in range(7)]  # the server takes 6
    seven = samples.pdf(pages)
    sync = client.post("/extract", files={"upload": ("seven.pdf", seven)})
    assert sync.status_code == 413
    job = wait_for(client, submit(client, seven, "seven.pdf").json()["id"])
    assert job["status"] == "failed"
    assert job["error"] == sync.json()["error"]
    refused = client.get(f"/v1/jobs/{job['id']}/result")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "job_not_finished"


@pytest.mark.parametrize(
    ("data", "params", "status", "code"),
    [
        (b"", {}, 400, "empty_upload"),
        (b"plain words, no known kind" * 10, {}, 415, "unsupported_media_type"),
        (None, {"speakers": "everyone"}, 400, "invalid_parameter"),
        (None, {"ocr_languages": "xx_none"}, 400, "invalid_parameter"),
        (None, {"format": "srt"}, 400, "invalid_parameter"),  # srt is for audio
        (None, {"callback_url": "ftp://example.com/x"}, 400, "invalid_callback_url"),
        (None, {"callback_url": "http://10.0.0.1/x"}, 400, "invalid_callback_url"),
        (None, {"callback_url": "http://127.0.0.2:9/x"}, 400, "invalid_callback_url"),
        (None, {"callback_url": "http://169.254.169.254/"}, 400, "invalid_callback_url"),
    ],
)
def test_what_extract_refuses_is_refused_at_submit(
    client: httpx.Client,
    png: bytes,
    data: bytes | None,
    params: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = client.get("/v1/jobs", params={"limit": 100}).json()["data"]
    reply = submit(client, png if data is None else data, "x.png", params=params)
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code
    assert client.get("/v1/jobs", params={"limit": 100}).json()["data"] == before


def test_options_may_be_form_fields(client: httpx.Client, png: bytes) -> None:
    reply = submit(client, png, "form.png", form={"ocr_rotate": "off", "format": "text"})
    assert reply.status_code == 202, reply.text
    job = wait_for(client, reply.json()["id"])
    assert job["options"] == {"ocr_rotate": False} and job["format"] == "text"
    result = client.get(f"/v1/jobs/{job['id']}/result")  # the format given at submit
    assert result.headers["Content-Type"].startswith("text/plain")
    bad = submit(client, png, "form.png", form={"words": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_parameter"


def test_prefer_respond_async_on_extract(client: httpx.Client, png: bytes) -> None:
    reply = submit(
        client, png, "pref.png", path="/extract", headers={"Prefer": "respond-async, wait=5"}
    )
    assert reply.status_code == 202, reply.text
    assert reply.headers["Preference-Applied"] == "respond-async"
    assert wait_for(client, reply.json()["id"])["status"] == "succeeded"


def test_the_secret_guards_every_route(server: Server, png: bytes) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for method, path in (
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs"),
            ("GET", "/v1/jobs/ExtractionQueue:x"),
            ("DELETE", "/v1/jobs/ExtractionQueue:x"),
            ("GET", "/v1/jobs/ExtractionQueue:x/result"),
        ):
            files = {"upload": ("a.png", png)} if method == "POST" else None
            reply = anonymous.request(method, path, files=files)
            assert reply.status_code == 401, (method, path, reply.text)
            assert reply.json()["error"]["code"] == "unauthorized"  # our shape, not OpenAI's


def test_unknown_jobs_are_404(client: httpx.Client) -> None:
    for method, path in (
        ("GET", "/v1/jobs/ExtractionQueue:00000000-0000-4000-8000-000000000000"),
        ("GET", "/v1/jobs/nothing/result"),
        ("DELETE", "/v1/jobs/nothing"),
    ):
        reply = client.request(method, path)
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "job_not_found"


def test_lists_are_newest_first_paged_and_filtered(client: httpx.Client, png: bytes) -> None:
    ids = [submit(client, png, f"list{i}.png").json()["id"] for i in range(3)]
    for job_id in ids:
        # wait_for returns at any end: a job that failed would only show up below as missing
        # from the succeeded list, its error lost (a clean-clone run failed that way once).
        ended = wait_for(client, job_id)
        assert ended["status"] == "succeeded", ended
    first = client.get("/v1/jobs", params={"limit": 2}).json()
    assert [job["id"] for job in first["data"]] == ids[::-1][:2]
    assert first["has_more"] and first["next"] == ids[1]
    second = client.get("/v1/jobs", params={"limit": 2, "after": first["next"]}).json()
    assert second["data"][0]["id"] == ids[0]
    succeeded = client.get("/v1/jobs", params={"status": "succeeded", "limit": 100}).json()
    assert set(ids) <= {job["id"] for job in succeeded["data"]}
    assert all(job["status"] == "succeeded" for job in succeeded["data"])
    queued = client.get("/v1/jobs", params={"status": "queued,running"}).json()
    assert not set(ids) & {job["id"] for job in queued["data"]}
    for params in ({"status": "done"}, {"limit": "0"}, {"limit": "101"}, {"limit": "x"}):
        assert client.get("/v1/jobs", params=params).status_code == 400


def test_delete_cancels_a_running_job_and_then_deletes_it(
    server: Server, client: httpx.Client, png: bytes
) -> None:
    pages = [samples.text_page(PAGE_ONE, page=i) for i in range(6)]
    long = samples.pdf(pages)
    job = submit(client, long, "long.pdf").json()
    wait_for(client, job["id"], lambda j: j["status"] == "running" and j["progress"] > 0)
    asked = time.monotonic()
    cancelled = client.delete(f"/v1/jobs/{job['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["deleted"] is False
    # Its worker stops at its next page (a second or so), not after the six pages.
    while f"job {job['id']} interrupted" not in server.log_text():
        assert time.monotonic() - asked < 20, "the cancelled job's worker did not stop"
        time.sleep(0.2)
    # Its worker stops at its next page: the next job runs soon after, not after 6 pages.
    after = wait_for(client, submit(client, png, "next.png").json()["id"])
    assert after["status"] == "succeeded"
    assert time.monotonic() - asked < 60
    assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
    assert client.get(f"/v1/jobs/{job['id']}/result").status_code == 409
    deleted = client.delete(f"/v1/jobs/{job['id']}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404


def test_queued_jobs_per_client_are_capped_and_jobs_expire(tmp_path: Path, png: bytes) -> None:
    with fresh_database("sqlite", tmp_path, None) as url:
        # No job threads: everything stays queued (the cap), then one runs (the TTL).
        server = serve(
            tmp_path, url, job_workers=0, max_queued_jobs_per_client=2, job_ttl_seconds=3,
            max_upload_bytes=len(png) + 1000,
        )  # fmt: skip
        try:
            with server.client() as client:
                too_big = submit(client, png + bytes(2000), "big.png")  # as on /extract
                assert too_big.status_code == 413, too_big.text
                assert too_big.json()["error"]["code"] == "payload_too_large"
                for name in ("one.png", "two.png"):
                    assert submit(client, png, name).status_code == 202
                refused = submit(client, png, "three.png")
                assert refused.status_code == 429, refused.text
                assert refused.json()["error"]["code"] == "too_many_jobs"
                assert int(refused.headers["Retry-After"]) > 0
                queued = client.get("/v1/jobs").json()["data"]
                cancelled = client.delete(f"/v1/jobs/{queued[0]['id']}").json()
                assert cancelled["status"] == "cancelled"
                assert submit(client, png, "three.png").status_code == 202  # room again
                time.sleep(3.5)
                assert client.get(f"/v1/jobs/{cancelled['id']}").status_code == 404
                listed = {job["id"] for job in client.get("/v1/jobs").json()["data"]}
                assert cancelled["id"] not in listed and len(listed) == 2
            engine = create_engine(url)  # and its rows are deleted soon after
            try:
                deadline = time.monotonic() + 30
                while True:
                    with engine.connect() as connection:
                        left = connection.execute(
                            text(
                                "SELECT (SELECT count(*) FROM jobs WHERE id = :id)"
                                " + (SELECT count(*) FROM extraction_jobs WHERE job_id = :id)"
                            ),
                            {"id": cancelled["id"]},
                        ).scalar_one()
                    if left == 0 or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
            finally:
                engine.dispose()
            assert left == 0
        finally:
            server.stop()


def test_the_command_line_submits_waits_and_lists(
    server: Server, client: httpx.Client, pdf: bytes, tmp_path: Path
) -> None:
    source = tmp_path / "five.pdf"
    source.write_bytes(pdf)
    out = tmp_path / "five.txt"
    command = [sys.executable, "-m", "extractor.cli"]
    connection = ["--server", server.url, "--secret", "s3cret"]
    done = subprocess.run(
        [*command, "submit", str(source), *connection, "--wait", "--format", "text",
         "-o", str(out), "--no-ocr-rotate"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    progress = done.stderr.splitlines()
    assert progress[-1].endswith("100% succeeded") and progress[-1].startswith("[####")
    sync = client.post("/extract?ocr_rotate=off&format=text", files={"upload": ("five.pdf", pdf)})
    assert out.read_bytes() == sync.content
    listed = subprocess.run(
        [*command, "jobs", *connection, "--limit", "1"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "succeeded" in listed.stdout and "five.pdf (pdf)" in listed.stdout
    queued = subprocess.run(
        [*command, "submit", str(source), *connection],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert queued.stdout.startswith("ExtractionQueue:")
    refused = subprocess.run(
        [*command, "submit", str(source), "--url", server.url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "401 unauthorized" in refused.stderr


def test_a_long_document_result_is_sent_from_a_spool_byte_equal_in_every_format(
    client: httpx.Client, pdf: bytes
) -> None:
    """A job of several pages is read back a line at a time into a spool and its reply written
    into a file, as a long /extract reply is (documents.read_document): the same bytes."""
    params = {"ocr_rotate": "off"}
    job = submit(client, pdf, "five.pdf", params=params).json()
    assert wait_for(client, job["id"])["status"] == "succeeded"
    for fmt in ("json", "text", "hocr", "alto", "tsv"):
        sync = client.post(
            "/extract", params={**params, "format": fmt}, files={"upload": ("five.pdf", pdf)}
        )
        stored = client.get(f"/v1/jobs/{job['id']}/result", params={"format": fmt})
        assert sync.status_code == stored.status_code == 200, (fmt, stored.text)
        assert stored.headers["Content-Type"] == sync.headers["Content-Type"]
        assert stored.headers["Content-Length"] == str(len(sync.content))
        assert stored.content == sync.content, fmt


def test_an_audio_result_is_byte_equal_in_every_format(
    client: httpx.Client, speech_wav: bytes
) -> None:
    params = {"words": "true", "language": "en"}
    job = submit(client, speech_wav, "spoken.wav", params=params).json()
    assert job["options"] == {"words": True, "language": "en"}
    done = wait_for(client, job["id"])
    assert done["status"] == "succeeded" and done["upload"]["kind"] == "audio"
    for fmt in ("json", "text", "vtt", "srt"):
        sync = client.post(
            "/extract",
            params={**params, "format": fmt},
            files={"upload": ("spoken.wav", speech_wav)},
        )
        stored = client.get(f"/v1/jobs/{job['id']}/result", params={"format": fmt})
        assert sync.status_code == stored.status_code == 200, (fmt, stored.text)
        assert stored.content == sync.content, fmt
    hocr = client.get(f"/v1/jobs/{job['id']}/result", params={"format": "hocr"})
    assert hocr.status_code == 400  # as /extract: hOCR is for images and PDFs


@pytest.mark.serial  # a 500 ms reply time, measured alone (make test's second pass)
def test_a_two_minute_recording_is_accepted_within_500_ms(client: httpx.Client) -> None:
    """Nothing is decoded on the request path: the 202 for 2 minutes of audio (5.3 MB of WAV)
    comes in well under the issue's 500 ms (median of 5; each job cancelled at once)."""
    recording = samples.repeat_speech(SPOKEN, 120)
    took = []
    for _ in range(5):
        started = time.perf_counter()
        reply = submit(client, recording, "two-minutes.wav")
        took.append(time.perf_counter() - started)
        assert reply.status_code == 202, reply.text
        client.delete(reply.headers["Location"])
    print(f"202 for a 2-minute WAV: median {statistics.median(took):.3f} s, max {max(took):.3f} s")
    assert statistics.median(took) < 0.5, took
