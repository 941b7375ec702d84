"""`extractor listen` when the server reports a turn as failed (a decode that crashed: the
real engine cannot be made to), or is not this server and sends events out of the protocol's
shape: a scripted WebSocket server on loopback plays the server's part."""

from __future__ import annotations

import io
import json
import threading
import wave
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from realtime_support import silence
from websockets.sync.server import ServerConnection, serve

from extractor.realtime.listen import listen

DELTA = "conversation.item.input_audio_transcription.delta"


def script(ws: ServerConnection) -> None:
    """A turn that fails after two words went out, then one that completes."""
    ws.send(json.dumps({"type": "session.created", "session": {"type": "transcription"}}))
    failed = False
    for message in ws:
        kind = json.loads(message)["type"]
        if kind == "input_audio_buffer.append" and not failed:
            failed = True
            ws.send(json.dumps({"type": DELTA, "item_id": "item_1", "delta": "Words that"}))
            ws.send(json.dumps({
                "type": "conversation.item.input_audio_transcription.failed",
                "item_id": "item_1", "content_index": 0,
                "error": {"type": "transcription_error", "code": "decode_failed",
                          "message": "the engine crashed"},
            }))  # fmt: skip
        elif kind == "input_audio_buffer.commit":
            ws.send(json.dumps({"type": "input_audio_buffer.committed", "item_id": "item_2"}))
            ws.send(json.dumps({"type": DELTA, "item_id": "item_2", "delta": "Next turn."}))
            ws.send(json.dumps({
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": "item_2", "content_index": 0, "transcript": "Next turn.",
            }))  # fmt: skip
            ws.send(json.dumps({"type": "conversation.item.done", "item": {"id": "item_2"}}))
        elif kind == "session.update":
            ws.send(json.dumps({"type": "session.updated", "session": {}}))


def misshapen(ws: ServerConnection) -> None:
    """A delta without its ``delta`` field, then nothing (a server speaking something else)."""
    ws.send(json.dumps({"type": "session.created", "session": {"type": "transcription"}}))
    for _message in ws:
        ws.send(json.dumps({"type": DELTA, "item_id": "item_1", "text": "Words"}))
        break
    for _message in ws:  # read on until the client closes
        pass


@contextmanager
def scripted(handler: Callable[[ServerConnection], None]) -> Iterator[str]:
    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()
            thread.join(timeout=10)


def quiet_wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes(silence(0.5))
    return path


def test_a_failed_turn_ends_its_line_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = quiet_wav(tmp_path / "quiet.wav")
    printed = io.StringIO()
    with scripted(script) as url:
        status = listen(url, str(wav), secret=None, rate=24_000, fast=True, out=printed)
    # The failed turn's words keep their line; the next turn is on its own.
    assert printed.getvalue() == "Words that\nNext turn.\n"
    assert "extractor listen: a turn failed: the engine crashed" in capsys.readouterr().err
    assert status == 0


def test_an_event_out_of_the_protocols_shape_is_a_clear_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = quiet_wav(tmp_path / "quiet.wav")
    with scripted(misshapen) as url:
        status = listen(url, str(wav), secret=None, rate=24_000, fast=True, out=io.StringIO())
    err = capsys.readouterr().err
    assert status == 1
    assert "extractor listen: the server sent an event not in the protocol's shape" in err
    assert "'delta'" in err and "Traceback" not in err
    assert "closed the session before its end" not in err  # one reason, the right one
