"""``POST /v1/audio/transcriptions`` with ``stream=true``: the transcript as Server-Sent Events,
``transcript.text.delta`` as each segment is decoded, then ``transcript.text.done``, as OpenAI's
API streams a file.

How the events get out while the engine works:

- The extraction runs as any other (the engine gate and its slots, the request timeout,
  ``Extractor.extract``), but on a thread of its own that owns the request's workspace and
  removes it when the extraction ends, however it ends. The engine tells each segment as it
  decodes it (``TranscribeOptions.on_segment``: faster-whisper yields segments as it decodes
  each 30 s of speech) to a :class:`TranscriptFeed`, a queue of at most ``FEED_EVENTS`` events
  that the request thread drains into the reply.
- The request thread waits for the first event before answering: an error found before it
  (an undecodable file, a busy queue, an unknown language, the timeout) is the route's usual
  4xx/5xx JSON reply, not a stream.
- After the first event an error ends the stream with one event in OpenAI's error document,
  ``{"type": "error", "error": {"message", "type", "param", "code"}}`` (a timeout: code
  ``engine_timeout``), and no ``done``; OpenAI's SDKs raise ``APIError`` on it, as they do on
  OpenAI's own failed streams.
- A client that goes away stops the transcription: the request thread looks at the socket while
  it waits for the next event (the peer's close is seen within ``POLL_SECONDS``; a client that
  shuts its sending side after the request counts as gone, as nginx takes it by default), and
  gunicorn closes the event iterator when a write fails; either sets the extraction's
  ``cancel``, the engine stops after the window it is decoding, its slot is free and the
  workspace goes.
- The worker's send deadline (``server.reply_deadline``) counts only the time spent sending, so
  a stream that takes minutes to produce is not cut while its client keeps reading.

The deltas are the transcript's lines in order (the first without a leading space, each next
one with one), made from each segment by the same ``transcript_lines`` as the plain reply's, so
their concatenation is exactly ``done``'s ``text`` and the ``text`` of the same request without
``stream``. With ``speakers`` (``auto`` or ``channels``) the lines are known only once the
whole recording is heard (voices told apart, channels interleaved by time), so their deltas all
come at the end, one per line.
"""

from __future__ import annotations

import json
import logging
import queue
import select
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Response

from extractor import metrics
from extractor.asr import TranscribeOptions, Transcript, TranscriptSegment
from extractor.errors import EngineFailure, EngineTimeout, ExtractorError
from extractor.media.sniff import Sniffed
from extractor.pipeline.extraction import Extractor, Timings
from extractor.pipeline.request import ExtractionRequest
from extractor.pipeline.transcript import transcript_lines
from extractor.replies.importable import Document
from extractor.web.error_replies import Problem, openai

log = logging.getLogger(__name__)

FEED_EVENTS = 256  # events waiting for the client at most; the engine waits past that
POLL_SECONDS = 0.2  # how often a waiting request thread looks whether its client went away
CLIENT_GONE = 499  # the status logged for a client that left before the first event (nginx's)


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Done:
    text: str
    seconds: float


@dataclass(frozen=True)
class Failed:
    error: ExtractorError


FeedEvent = Delta | Done | Failed


class ClientGone(EngineTimeout):
    """Raised in the engine's thread when the client of its stream went away."""


class TranscriptFeed:
    """Transcript events from the extraction's thread to the request thread, in order.

    The extraction's side calls ``segment`` (the engine's ``on_segment``), then ``finish`` or
    ``fail``; the request's side calls ``next`` and, when its client goes away, ``leave``.
    """

    def __init__(self, *, words: bool, progressive: bool) -> None:
        self._queue: queue.Queue[FeedEvent] = queue.Queue(maxsize=FEED_EVENTS)
        self._options = TranscribeOptions(word_timestamps=words)  # as the plain reply's lines
        self.progressive = progressive  # deltas as segments come (False: all at the end)
        self.gone = threading.Event()  # the client went away: nobody reads any more
        self._streamed: list[str] = []  # the deltas' texts so far (extraction's thread only)

    # -- the extraction's thread ----------------------------------------------------------
    def segment(self, segment: TranscriptSegment) -> None:
        """A segment the engine has decoded: its line's text goes out as a delta."""
        for line in transcript_lines(Transcript((segment,), None), 0, None, self._options):
            self._delta(line.content)

    def finish(self, document: Document) -> None:
        """The whole transcript: what no delta has said yet, then ``done``."""
        lines = [line.content for line in document.lines]
        text = " ".join(lines)
        if not self._streamed:
            for line in lines:
                self._delta(line)
        else:
            said = "".join(self._streamed)
            # The deltas are the lines already, so nothing is left; an engine that told only
            # some of its segments gets the rest said here.
            if text.startswith(said):
                if text[len(said) :]:
                    self._put(Delta(text[len(said) :]))
            else:  # a bug: done still says the plain reply's text
                log.error("streamed deltas differ from the transcript", extra={"said": said[:200]})
        self._put(Done(text, (document.duration_ms or 0) / 1000))

    def fail(self, error: ExtractorError) -> None:
        self._put(Failed(error))

    def _delta(self, content: str) -> None:
        text = content if not self._streamed else " " + content
        self._streamed.append(text)
        self._put(Delta(text))

    def _put(self, event: FeedEvent) -> None:
        """Queue ``event``, waiting while the queue is full (a client slower than the engine
        holds its engine back rather than its memory growing); give up once it is gone."""
        while not self.gone.is_set():
            try:
                self._queue.put(event, timeout=POLL_SECONDS)
                return
            except queue.Full:
                continue
        raise ClientGone("the client of the stream went away")

    # -- the request thread ---------------------------------------------------------------
    def next(self, sock: Any) -> FeedEvent | None:
        """The next event, or None once the client on ``sock`` (if known) has gone away."""
        while True:
            try:
                return self._queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if sock is not None and client_gone(sock):
                    return None

    def leave(self, cancel: threading.Event) -> None:
        """The client went away: stop the extraction and let its thread end."""
        self.gone.set()
        cancel.set()


def count(document: Document, timings: Timings) -> None:
    """The metrics a plain reply's request counts once answered (``metrics_view``), counted
    when a stream's transcription ends: its reply was answered before the engine started."""
    if "engine" in timings.stages:
        metrics.ENGINE_SECONDS.labels("audio").observe(timings.stages["engine"])
    if document.duration_ms:
        metrics.AUDIO_SECONDS.inc(document.duration_ms / 1000)


def client_gone(sock: Any) -> bool:
    """Whether the peer of ``sock`` closed the connection (or reset it). The request's body was
    read whole before the app ran, so a readable socket with nothing to read means the end."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, 0x02) == b""  # MSG_PEEK: a pipelined request stays for its turn
    except (OSError, ValueError):
        return True


def sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


def event_text(event: FeedEvent) -> str:
    """``event`` as OpenAI writes it on the wire."""
    if isinstance(event, Delta):
        return sse({"type": "transcript.text.delta", "delta": event.text, "logprobs": None})
    if isinstance(event, Done):
        usage = {"type": "duration", "seconds": round(event.seconds, 3)}
        return sse({"type": "transcript.text.done", "text": event.text, "logprobs": None,
                    "usage": usage})  # fmt: skip
    return sse({"type": "error", **openai(Problem.of(event.error))})


@dataclass
class TranscriptionStream:
    """One streamed transcription: the extraction on its thread, and what it was asked."""

    extractor: Extractor
    path: Path
    name: str
    sniffed: Sniffed
    workdir: Path
    request: ExtractionRequest
    request_id: str
    sock: Any  # the client's socket, where the server says (gunicorn); None elsewhere

    def __post_init__(self) -> None:
        self.cancel = threading.Event()
        self.feed = TranscriptFeed(words=self.request.words,
                                   progressive=self.request.speakers is None)  # fmt: skip
        self.timings = Timings()
        self.started = time.monotonic()

    def reply(self, cleanup: ExitStack) -> Response:
        """Start the extraction (its thread then owns ``cleanup``: the workspace) and answer
        once the first event is there: an error then is raised as the plain reply's would be."""
        worker = threading.Thread(target=self._extract, args=(cleanup,), name="transcript-stream",
                                  daemon=True)  # fmt: skip
        try:
            worker.start()
        except BaseException:  # no thread (RuntimeError: can't start new thread): nobody owns it
            cleanup.close()
            raise
        first = self.feed.next(self.sock)
        if first is None or isinstance(first, Failed):
            self.feed.leave(self.cancel)
            if first is None:
                self._log("client gone", 0)
                return Response(status=CLIENT_GONE)
            raise first.error
        response = Response(self._events(first), content_type="text/event-stream")
        # However the reply ends (done, an error, the client gone, a write failing), the
        # extraction stops and its thread ends: nobody will read its events any more.
        response.call_on_close(lambda: self.feed.leave(self.cancel))
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response

    def _extract(self, cleanup: ExitStack) -> None:
        outcome = "finished"
        with cleanup:  # the workspace goes once the engine is done with it
            try:
                on_segment = self.feed.segment if self.feed.progressive else None
                document = self.extractor.extract(
                    self.path, self.name, self.sniffed, self.workdir, self.request,
                    self.timings, cancel=self.cancel, on_segment=on_segment,
                )  # fmt: skip
                count(document, self.timings)
                self.feed.finish(document)
            except ExtractorError as error:
                outcome = error.code
                self._fail(error)
            except Exception:
                outcome = "failed"
                log.exception(
                    "streamed transcription failed", extra={"request_id": self.request_id}
                )
                self._fail(EngineFailure("the transcription failed; see the server log"))
        if self.feed.gone.is_set() and outcome != "finished":
            outcome = "stopped: client gone"
        log.info(
            "streamed transcription ended",
            extra={"request_id": self.request_id, "outcome": outcome,
                   "total_s": round(time.monotonic() - self.started, 3)},
        )  # fmt: skip

    def _fail(self, error: ExtractorError) -> None:
        with suppress(ClientGone):
            self.feed.fail(error)

    def _events(self, first: FeedEvent) -> Iterator[str]:
        """The reply's body: events as they come until ``done`` or an error. Closed early
        (gunicorn does when a write fails), it stops the extraction."""
        event: FeedEvent | None = first
        sent, outcome = 0, "client gone"
        try:
            while event is not None:
                yield event_text(event)
                sent += 1
                if isinstance(event, Done):
                    outcome = "done"
                    return
                if isinstance(event, Failed):
                    outcome = event.error.code
                    return
                event = self.feed.next(self.sock)
        finally:
            self.feed.leave(self.cancel)
            self._log(outcome, sent)

    def _log(self, outcome: str, events: int) -> None:
        log.info(
            "transcription stream ended",
            extra={
                "request_id": self.request_id,
                "outcome": outcome,
                "events": events,
                "total_s": round(time.monotonic() - self.started, 3),
                "stages": self.timings.stages,
            },
        )
