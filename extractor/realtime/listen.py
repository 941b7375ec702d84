"""``extractor listen [FILE|-]``: stream audio to a server's live transcription and print the
words as they come.

FILE is any audio PyAV decodes (wav, mp3, flac, ogg, m4a, webm...), sent at the pace it plays
(``--fast``: as fast as the server reads it); ``-`` reads raw PCM16 mono little-endian from
standard input (``--rate``, 24000 by default), as a microphone pipe gives it::

    arecord -q -f S16_LE -r 24000 -c 1 | extractor listen -

Each turn's words are printed as their deltas arrive and the line ends when the turn is
completed; on a terminal, the words the server hears after them but has not confirmed yet
follow, dimmed, redrawn as they change (``terminal``). The client is wsproto over a socket
(TLS for https:// and wss:// URLs), as the server is: no other dependency.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from extractor.cli_errors import (
    FAILED,
    INTERRUPTED,
    USAGE,
    CommandFailed,
    refusal,
    server_url,
)

from .terminal import TurnWriter

CHUNK_MS = 40


def pcm_chunks(source: str, rate: int) -> Iterator[bytes]:
    """The audio as 40 ms pieces of PCM16 mono at 24 kHz (stdin: at ``rate``, as given)."""
    if source == "-":
        size = rate * 2 * CHUNK_MS // 1000
        while chunk := sys.stdin.buffer.read(size):
            yield chunk
        return
    import av

    size = 24_000 * 2 * CHUNK_MS // 1000
    pending = b""
    with av.open(source) as container:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=24_000)
        if not container.streams.audio:
            raise ValueError("no audio in it")
        stream = container.streams.audio[0]
        for frame in [*container.decode(stream), None]:
            for out in resampler.resample(frame):
                pending += bytes(out.planes[0])[: out.samples * 2]
                while len(pending) >= size:
                    yield pending[:size]
                    pending = pending[size:]
    if pending:
        yield pending


class LiveClient:
    """A blocking WebSocket client for /v1/realtime (wsproto over a socket)."""

    def __init__(self, url: str, secret: str | None, timeout: float = 30.0) -> None:
        parts = urlsplit(server_url(url, ("http", "ws", "https", "wss")))
        secure = parts.scheme in ("https", "wss")  # TLS, as a proxy in front of the server ends it
        host, port = parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            if secure:  # the system's CA certificates (SSL_CERT_FILE, SSL_CERT_DIR honoured)
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except OSError as exc:  # refused, unresolvable, or a certificate not trusted
            raise CommandFailed(f"cannot connect to {url}: {exc}") from None
        self.sock = sock
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.lock = threading.Lock()
        headers = [(b"authorization", f"Bearer {secret}".encode())] if secret else []
        target = parts.path.rstrip("/") + "/v1/realtime?intent=transcription"
        self._send(Request(host=f"{host}:{port}", target=target, extra_headers=headers))
        while True:
            event = self._next_event()
            if isinstance(event, AcceptConnection):
                return
            if isinstance(event, RejectConnection):
                status, body = event.status_code, b""
                while event.has_body if isinstance(event, RejectConnection) else True:
                    event = self._next_event()
                    if isinstance(event, RejectData):
                        body += event.data
                        if event.body_finished:
                            break
                    elif isinstance(event, CloseConnection):
                        break
                raise CommandFailed(f"refused with {refusal(status, body)}")

    def _send(self, event: Any) -> None:
        with self.lock:
            self.sock.sendall(self.ws.send(event))

    def _next_event(self) -> Any:
        while True:
            for event in self.ws.events():
                return event
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            if not data:
                return CloseConnection(code=1006)

    def send_json(self, event: dict[str, Any]) -> None:
        self._send(Message(data=json.dumps(event)))

    def events(self) -> Iterator[dict[str, Any]]:
        """Server events until the connection closes."""
        parts: list[str] = []
        self.sock.settimeout(None)
        while True:
            event = self._next_event()
            if isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    yield json.loads("".join(parts))
                    parts = []
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                return

    def close(self) -> None:
        with contextlib.suppress(OSError, LocalProtocolError):  # already closed
            self._send(CloseConnection(code=1000))
        self.sock.close()


def listen(
    url: str, source: str, *, secret: str | None, rate: int, fast: bool, out: IO[str]
) -> int:
    """Stream ``source``; print each turn's words as they arrive, one line per turn. The exit
    status: 0 every turn printed, 1 a failure (said on standard error), 130 after Ctrl-C (the
    audio sent is still transcribed and printed; a second Ctrl-C ends at once)."""
    chunks = pcm_chunks(source, rate)
    try:  # a missing or undecodable file says so before any connection
        first = next(chunks, b"")
    except (OSError, ValueError) as exc:  # PyAV's errors are these too
        missing = isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError)
        raise CommandFailed(f"cannot read {source}: {exc}", USAGE if missing else FAILED) from None
    client = LiveClient(url, secret)
    writer = TurnWriter.to(out)  # on a terminal, each turn's revisable tail too
    failures: list[str] = []
    # The server handles a session's messages in order, so its reply to a no-op update sent
    # after the last commit comes once every turn of the audio is committed; the stream ends
    # when each committed turn is then done (completed or failed). Ending at the first turn
    # done after the last append would drop the rest with --fast, whose audio is all on the
    # server before its first turn completes.
    updates = {"sent": 0, "answered": 0}
    open_items: set[str] = set()
    ended = threading.Event()  # the audio and the closing update are sent
    complete = threading.Event()  # every turn of it done: the stream ended as it should
    if source == "-" and rate != 24_000:
        kind = {"type": "audio/pcm", "rate": rate}
        client.send_json(
            {"type": "session.update", "session": {"audio": {"input": {"format": kind}}}}
        )
        updates["sent"] += 1

    def show() -> None:
        try:
            follow()
        except OSError:  # the connection broke: the main thread says so
            pass
        except (KeyError, TypeError, AttributeError) as exc:  # a server not speaking it
            failures.append(f"the server sent an event not in the protocol's shape ({exc!r})")
            writer.say(f"extractor listen: {failures[-1]}")
            client.close()

    def follow() -> None:
        for event in client.events():
            kind = event["type"]
            if kind.endswith("transcription.delta"):
                writer.delta(event["delta"])
            elif kind.endswith("transcription.tentative"):
                writer.tail(event["text"])
            elif kind.endswith("transcription.completed"):
                writer.end_turn()
            elif kind == "error":
                if event["error"].get("code") == "input_audio_buffer_commit_empty":
                    continue  # the last turn was already committed when the audio ran out
                failures.append(event["error"]["message"])
                writer.say(f"extractor listen: {event['error']['message']}")
            elif kind == "input_audio_buffer.committed":
                open_items.add(event["item_id"])
            elif kind == "conversation.item.done":
                open_items.discard(event["item"]["id"])
            elif kind.endswith("transcription.failed"):
                writer.end_turn()  # its words (withdrawn) keep their line, the next turn its own
                reason = (event.get("error") or {}).get("message", "no reason given")
                writer.say(f"extractor listen: a turn failed: {reason}")
                open_items.discard(event["item_id"])
            elif kind == "session.updated":
                updates["answered"] += 1
            if ended.is_set() and updates["answered"] == updates["sent"] and not open_items:
                complete.set()
                client.close()
                return

    reader = threading.Thread(target=show, daemon=True)
    reader.start()
    started = time.monotonic()
    unreadable = ""
    interrupted = False
    try:
        for index, chunk in enumerate(itertools.chain([first] if first else [], chunks)):
            if not reader.is_alive():  # the server ended the session (its error is printed)
                break
            if not fast and source != "-":  # a pipe is paced by whoever writes it
                time.sleep(max(0.0, started + index * CHUNK_MS / 1000 - time.monotonic()))
            client.send_json(
                {"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}
            )
    except KeyboardInterrupt:  # Ctrl-C: what was sent is still transcribed and printed
        interrupted = True
        writer.say("extractor listen: stopped; finishing the last turn")
    except (OSError, LocalProtocolError) as exc:
        _lost(failures, exc, writer)
    except ValueError as exc:  # the file's audio broke off: what came before is still shown
        unreadable = f"cannot read all of {source}: {exc}"
        writer.say(f"extractor listen: {unreadable}")
    if reader.is_alive() and not failures:
        try:
            client.send_json({"type": "input_audio_buffer.commit"})
            updates["sent"] += 1
            ended.set()
            client.send_json({"type": "session.update", "session": {"type": "transcription"}})
        except (OSError, LocalProtocolError) as exc:
            _lost(failures, exc, writer)
    if failures:
        client.close()  # nothing more will come: the reader stops on the closed socket
    reader.join(timeout=120)
    client.close()
    if reader.is_alive():
        writer.say("extractor listen: no answer from the server for 120 s")
    elif not complete.is_set() and not failures:
        writer.say("extractor listen: the server closed the session before its end")
    if interrupted:
        writer.end_turn()  # a turn cut short keeps its words on a line of their own
    writer.close()
    if interrupted:
        return INTERRUPTED
    return 0 if complete.is_set() and not failures and not unreadable else 1


def _lost(failures: list[str], exc: Exception, writer: TurnWriter) -> None:
    """A send failed: the server closed the connection (its reason, an ``error`` event, is
    printed already when it sent one: wsproto then refuses to send more) or it broke."""
    if not failures:
        failures.append(f"connection lost: {exc}")
        writer.say(f"extractor listen: {failures[-1]}")
