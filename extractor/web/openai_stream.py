"""``POST /v1/audio/transcriptions`` with ``stream=true``: the transcript as Server-Sent Events,
``transcript.text.delta`` then ``transcript.text.done``, as OpenAI's API streams a file.

The deltas are the transcript's segments in order (the first without a leading space, each
next one with one), so their concatenation is exactly ``done``'s ``text``, and that is exactly
the ``text`` of the same request without ``stream``. They are sent once the file is
transcribed: the pipeline hands back a whole document, so a client gets every segment at once
rather than as each 30 s window is decoded (live audio has ``WS /v1/realtime`` for that).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flask import Response


def sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


def transcript_events(segments: list[str], seconds: float) -> Iterator[str]:
    """The event stream of a transcript made of ``segments`` (texts, in order)."""
    for index, text in enumerate(segments):
        delta = text if index == 0 else " " + text
        yield sse({"type": "transcript.text.delta", "delta": delta, "logprobs": None})
    yield sse(
        {
            "type": "transcript.text.done",
            "text": " ".join(segments),
            "logprobs": None,
            "usage": {"type": "duration", "seconds": round(seconds, 3)},
        }
    )


def stream_reply(segments: list[str], seconds: float) -> Response:
    response = Response(transcript_events(segments, seconds), content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    return response
