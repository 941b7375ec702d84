"""A stream is refused only when no worker has room for it: a worker holding all the streams it
takes leaves new connections to a sibling with room (extractor.realtime.room)."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from realtime_support import live_metric
from support import start_server, stop_server
from websockets.sync.client import connect

from extractor.realtime.room import LiveRoom
from extractor.samples import speech_wav


def test_the_room_a_forked_worker_publishes_is_seen_by_its_siblings() -> None:
    room = LiveRoom(4)
    first, second = room.free_slot([]), room.free_slot([0])
    assert (first, second) == (0, 1)
    assert not room.elsewhere(first)  # nobody has published yet
    child = multiprocessing.get_context("fork").Process(target=room.publish, args=(second, 2))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert room.elsewhere(first)  # the child's store is in the shared page
    assert not room.elsewhere(second)
    room.publish(second, 0)
    assert not room.elsewhere(first)
    room.publish(second, 1)
    room.release(second)  # the worker exited
    assert not room.elsewhere(first)
    assert room.free_slot([0]) == 1
    assert LiveRoom(1).free_slot([0]) is None  # no slot: the worker acts alone


def test_a_client_address_is_counted_on_every_worker() -> None:
    """What a worker publishes of its streams' client addresses is counted by its siblings
    (the per-address cap holds over the server), and forgotten when the worker exits."""
    room = LiveRoom(3)
    first, second = room.free_slot([]), room.free_slot([0])
    publish = room.publish_clients
    child = multiprocessing.get_context("fork").Process(
        target=publish, args=(second, ["10.0.0.7", "10.0.0.7", "2001:db8::1"])
    )
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert room.clients_elsewhere(first, "10.0.0.7") == 2
    assert room.clients_elsewhere(first, "2001:db8::1") == 1
    assert room.clients_elsewhere(second, "10.0.0.7") == 0  # its own are counted by itself
    assert room.clients_elsewhere(first, "10.0.0.8") == 0
    room.publish_clients(second, ["10.0.0.7"])  # one of its streams closed
    assert room.clients_elsewhere(first, "10.0.0.7") == 1
    room.release(second)  # the worker exited
    assert room.clients_elsewhere(first, "10.0.0.7") == 0


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("room") / "server.log"
    with log_path.open("wb") as log:
        url, process = start_server(
            "--workers", "2", "--realtime-sessions", "1", "--log-level", "info", log=log
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while log_path.read_text(errors="replace").count("engines ready") < 2:
                assert time.monotonic() < deadline, "the second worker did not load"
                time.sleep(0.3)
            yield url
        finally:
            stop_server(process)


def first_event(url: str, ws_url: str) -> dict[str, object]:
    with connect(ws_url, open_timeout=30) as ws:
        return json.loads(ws.recv(timeout=30))


def test_a_stream_goes_to_the_worker_with_room_while_the_other_is_busy(
    two_workers: str, tmp_path: Path
) -> None:
    """Worker X holds one stream (its limit); worker Y transcribes files, so both hesitate
    before accepting (extractions and streams pending) and the kernel's choice between them was
    a coin toss: a new stream landing on X was refused though Y had room. Now X leaves it to Y,
    every time; and with both full, the next stream is refused as before."""
    url = two_workers
    ws_url = url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    wav = tmp_path / "speech.wav"
    wav.write_bytes(speech_wav("The weather is fine today and the meeting starts at noon. " * 3))
    stop = threading.Event()
    statuses: list[int] = []

    def post_files() -> None:
        body, boundary = wav.read_bytes(), "roomtest"
        data = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; '
                'filename="speech.wav"\r\nContent-Type: audio/wav\r\n\r\n'
            ).encode()
            + body
            + f"\r\n--{boundary}--\r\n".encode()
        )
        while not stop.is_set():
            request = urllib.request.Request(
                url + "/extract", data=data, method="POST",
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=120) as reply:
                statuses.append(reply.status)

    with connect(ws_url, open_timeout=30) as held:
        assert json.loads(held.recv(timeout=30))["type"] == "session.created"
        poster = threading.Thread(target=post_files, daemon=True)
        poster.start()  # X hesitates for its stream, so the files go to Y
        try:
            time.sleep(1.0)
            firsts = [first_event(url, ws_url)["type"] for _ in range(6)]
        finally:
            stop.set()
            poster.join(timeout=120)
        assert firsts == ["session.created"] * 6
        assert statuses and set(statuses) == {200}

        with connect(ws_url, open_timeout=30) as second:  # now both workers are full
            assert json.loads(second.recv(timeout=30))["type"] == "session.created"
            started = time.monotonic()
            refused = first_event(url, ws_url)
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "session_limit_reached"  # type: ignore[index]
            assert time.monotonic() - started < 10


def wait_until_no_stream_is_open(url: str) -> None:
    """Until the server's /metrics counts no open live stream (a closed stream's worker has
    published its room again by then: the same ``close``), at most 30 s."""
    deadline = time.monotonic() + 30
    while live_metric(url, "extractor_realtime_streams") != 0:
        assert time.monotonic() < deadline, "the previous streams did not close"
        time.sleep(0.1)


def open_held(
    ws_url: str, barrier: threading.Barrier, firsts: list[str], release: threading.Event
) -> None:
    """Connect when the other thread does; keep the stream open until ``release``."""
    barrier.wait(timeout=30)
    with connect(ws_url, open_timeout=30) as ws:
        firsts.append(json.loads(ws.recv(timeout=30))["type"])
        release.wait(timeout=60)


def test_streams_opened_at_once_are_spread_over_the_workers(two_workers: str) -> None:
    """Two streams connecting at the same moment to two workers of one session each: the
    first worker to wake took both (neither counted yet) and refused one."""
    ws_url = two_workers.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    for _attempt in range(5):
        # Both workers empty first: a stream of the previous attempt (or test) still closing
        # on a busy machine leaves one worker full, and then two new ones cannot both fit.
        wait_until_no_stream_is_open(two_workers)
        firsts: list[str] = []
        barrier, release = threading.Barrier(2), threading.Event()
        threads = [
            threading.Thread(target=open_held, args=(ws_url, barrier, firsts, release))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(firsts) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        for thread in threads:
            thread.join(timeout=60)
        assert firsts == ["session.created"] * 2
