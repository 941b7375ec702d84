"""Turns the client commits (``turn_detection: null``) over the official openai client, on a
real server decoding with faster-whisper: nothing of a buffer is sent before its commit, and a
cleared buffer leaves nothing behind.

Protocol facts are asserted (which events come, in which order, for which item); the words,
which depend on the machine, only against /extract's of the same audio."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from realtime_support import ALIKE, FIRST, SECOND, extracted, likeness, pcm, silence
from support import start_server, stop_server

SECRET = "manual-secret"
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
CHUNK = 24_000 * 2 * 40 // 1000  # 40 ms of PCM16 at 24 kHz


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = start_server("--workers", "1", "--secret", SECRET)
    try:
        yield url
    finally:
        stop_server(process)


class Received:
    """The server events a connection's reader thread has seen, in order."""

    def __init__(self, conn: Any) -> None:
        self.events: list[Any] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
        self.reader.start()

    def _read(self, conn: Any) -> None:
        for event in conn:
            with self.changed:
                self.events.append(event)
                self.changed.notify_all()

    def wait_for(self, accept: Any, timeout: float = 120) -> int:
        """The index of the first event after those already matched for which ``accept``
        holds, waiting for it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = next((i for i, e in enumerate(self.events) if accept(e)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, [e.type for e in self.events]
                self.changed.wait(left)


def send_paced(conn: Any, audio: bytes) -> None:
    """``audio`` as a microphone sends it, 40 ms every 40 ms: the server has time to decode
    the buffer while it grows (and, were it to stream a buffer before its commit, would)."""
    started = time.monotonic()
    for index, start in enumerate(range(0, len(audio), CHUNK)):
        time.sleep(max(0.0, started + index * 0.04 - time.monotonic()))
        conn.input_audio_buffer.append(
            audio=base64.b64encode(audio[start : start + CHUNK]).decode()
        )


def is_text(event: Any) -> bool:
    """A delta or one of the server's ``x_`` tentative events: text about an item."""
    return event.type == DELTA or event.type.startswith("x_")


@pytest.mark.slow
def test_a_buffer_is_only_transcribed_once_committed_and_a_clear_leaves_nothing(
    server: str,
) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server + "/v1", websocket_base_url=server.replace("http", "ws") + "/v1",
                    api_key=SECRET)  # fmt: skip
    # Two sentences with a pause between them (where a long buffer's decoding window is cut),
    # then a pause before the clear: the whole of it decoded while it was sent.
    thrown_away = silence(0.5) + pcm(SECOND) + silence(0.8) + pcm(FIRST) + silence(1.0)
    kept = silence(0.5) + pcm(FIRST) + silence(0.5)
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        received = Received(conn)
        received.wait_for(lambda e: e.type == "session.created")
        conn.session.update(
            session={"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        )
        received.wait_for(lambda e: e.type == "session.updated")
        send_paced(conn, thrown_away)
        time.sleep(2.0)  # a decode of the buffer's end has had time to run
        conn.input_audio_buffer.clear()
        cleared = received.wait_for(lambda e: e.type == "input_audio_buffer.cleared")
        send_paced(conn, kept)
        conn.input_audio_buffer.commit()
        done = received.wait_for(lambda e: e.type == "conversation.item.done")
        conn.close()
    events = received.events[: done + 1]
    before_clear, after_clear = events[:cleared], events[cleared + 1 :]
    # Before the clear: no text about the buffer, no item, no error; nothing after it either
    # voids words (there were none to void).
    assert [e.type for e in before_clear] == ["session.created", "session.updated"]
    assert not [e for e in events if e.type.endswith("failed") or e.type == "error"], events
    # After it: the committed buffer's item, and only its events; no text before its commit.
    committed = next(
        i for i, e in enumerate(after_clear) if e.type == "input_audio_buffer.committed"
    )
    assert not [e for e in after_clear[:committed] if is_text(e)], after_clear
    item_id = after_clear[committed].item_id
    for event in after_clear:
        assert item_id in (getattr(event, "item_id", None), getattr(event.item, "id", None)
                           if hasattr(event, "item") else None), event  # fmt: skip
    (completed,) = [e for e in after_clear if e.type == COMPLETED]
    deltas = [e.delta for e in after_clear if e.type == DELTA]
    assert "".join(deltas) == completed.transcript
    # Its audio is the committed buffer's alone, not the cleared one's before it: its words
    # are what /extract hears in that audio, none of the cleared sentences' came back.
    assert completed.usage.seconds == pytest.approx(len(kept) / 48_000, abs=0.05)
    alone = extracted(server, kept, SECRET)
    assert likeness(completed.transcript, alone) >= ALIKE, (completed.transcript, alone)
    assert len(completed.transcript.split()) <= len(alone) + 3, completed.transcript
