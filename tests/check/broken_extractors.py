"""Extractors that break the contract in exactly one way, for the conformance kit's tests.

One small HTTP server on loopback proxies ``POST /<fault>/extract`` to our real app (real
engines, in process) and then corrupts the reply as ``<fault>`` says. Replies are cached by
upload and Accept, so every fault reuses one extraction per sample and the suite stays fast.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import make_server

from extractor.errors import ExtractorError
from extractor.media.sniff import MediaKind, sniff
from extractor.pipeline.negotiate import choose_format


@dataclass(frozen=True)
class Answer:
    """A reply as the real app gave it, before or after a fault is applied."""

    status: int
    content_type: str
    body: bytes
    is_image: bool  # the upload was an image or a PDF (not audio)

    @property
    def json(self) -> dict[str, Any] | None:
        if 200 <= self.status < 300 and self.content_type.startswith("application/json"):
            value: dict[str, Any] = json.loads(self.body)
            return value
        return None

    def with_json(self, doc: dict[str, Any]) -> Answer:
        return replace(self, body=json.dumps(doc).encode())


def _edit_json(edit: Callable[[dict[str, Any]], None]) -> Callable[[Answer], Answer]:
    def fault(answer: Answer) -> Answer:
        doc = answer.json
        if doc is None:
            return answer
        edit(doc)
        return answer.with_json(doc)

    return fault


def _seconds(doc: dict[str, Any]) -> None:
    for label in doc["labels"]:
        if label["type"] == "TIMESTAMP":
            label["startTimestampMillis"] //= 1000
            label["endTimestampMillis"] //= 1000


def _counter_clockwise(doc: dict[str, Any]) -> None:
    for label in doc["labels"]:
        if label["type"] == "BOUNDING_BOX":
            label["x1"], label["y1"], label["x3"], label["y3"] = (
                label["x3"], label["y3"], label["x1"], label["y1"],
            )  # fmt: skip


def _box_on_unlisted_page(doc: dict[str, Any]) -> None:
    if doc["type"] == "BOUNDING_BOX" and doc["labels"]:
        doc["labels"][-1]["pageIndex"] = max(p["pageIndex"] for p in doc["pages"]) + 1


def _label_past_tokens(doc: dict[str, Any]) -> None:
    if doc["labels"]:
        label = doc["labels"][0]
        cell = next(c for c in doc["cells"] if c["line"] == label["endCellLine"])
        label["endTokenIndex"] = len(cell["tokens"])


def _exclusive_end_char(doc: dict[str, Any]) -> None:
    for label in doc["labels"]:
        label["endCharIndex"] += 1


def _boxes_shifted_down(doc: dict[str, Any]) -> None:
    heights = {p["pageIndex"]: p["pageHeight"] for p in doc["pages"]}
    for label in doc["labels"]:
        if label["type"] == "BOUNDING_BOX":
            shift = heights[label["pageIndex"]] // 10  # several lines: off its own word
            for n in range(4):
                label[f"y{n}"] += shift


def _no_label_sets(doc: dict[str, Any]) -> None:
    del doc["labelSets"]


def _wrong_content_type(answer: Answer) -> Answer:
    ok = 200 <= answer.status < 300
    return replace(answer, content_type="text/html; charset=utf-8") if ok else answer


def _blank_lines(answer: Answer) -> Answer:
    if not (200 <= answer.status < 300 and answer.content_type.startswith("text/plain")):
        return answer
    lines = answer.body.decode().splitlines()
    return replace(answer, body=("\n\n".join(lines) + "\n").encode())


def _fails_on_images(answer: Answer) -> Answer:
    if answer.is_image and 200 <= answer.status < 300:
        body = json.dumps({"error": {"code": "internal_error", "message": "boom"}}).encode()
        return Answer(500, "application/json", body, answer.is_image)
    return answer


FAULTS: dict[str, Callable[[Answer], Answer]] = {
    "ok": lambda answer: answer,
    "wrong-content-type": _wrong_content_type,
    "seconds": _edit_json(_seconds),
    "ccw": _edit_json(_counter_clockwise),
    "missing-page": _edit_json(_box_on_unlisted_page),
    "blank-lines": _blank_lines,
    "past-tokens": _edit_json(_label_past_tokens),
    "exclusive-end": _edit_json(_exclusive_end_char),
    "shifted-boxes": _edit_json(_boxes_shifted_down),
    "no-label-sets": _edit_json(_no_label_sets),
    "500": _fails_on_images,
}
TEXT_ONLY = "text-only"  # answers text/plain always, 406 to an Accept without it


def broken_app(real: Flask) -> Flask:
    """The proxy: ``/<fault>/extract`` answers what ``real`` would, then applies the fault."""
    client = real.test_client()
    cache: dict[tuple[str, str], Answer] = {}
    lock = threading.Lock()
    app = Flask("broken_extractors")

    def ask_real(accept: str) -> Answer:
        upload = request.files.get("upload")
        data = upload.read() if upload is not None else b""
        if upload is None or not data:
            # Error cases go through untouched and uncached, with the original form.
            reply = client.post("/extract", data=request.get_data(), headers={
                "Content-Type": request.content_type or "", "Accept": accept})  # fmt: skip
            return Answer(reply.status_code, reply.content_type or "", reply.data, False)
        kind = sniff(data[:2048]).kind
        try:
            # Keyed by the format the real app will pick, so Accepts that agree share a reply.
            chosen = choose_format(accept, None, "json", audio=kind is MediaKind.AUDIO).name
        except ExtractorError:
            chosen = accept
        key = (hashlib.sha256(data).hexdigest(), chosen)
        with lock:
            if key not in cache:
                reply = client.post(
                    "/extract", headers={"Accept": accept}, content_type="multipart/form-data",
                    data={"upload": (io.BytesIO(data), upload.filename or "upload")},
                )  # fmt: skip
                cache[key] = Answer(reply.status_code, reply.content_type or "", reply.data,
                                    kind is not MediaKind.AUDIO)  # fmt: skip
            return cache[key]

    @app.post("/<fault>/extract")
    def extract(fault: str) -> Response:
        accept = request.headers.get("Accept", "")
        if fault == TEXT_ONLY:
            if "text/plain" not in accept:
                return Response('{"error": {"code": "not_acceptable"}}', 406,
                                content_type="application/json")  # fmt: skip
            answer = ask_real("text/plain")
        else:
            answer = FAULTS[fault](ask_real(accept))
        return Response(answer.body, answer.status, content_type=answer.content_type)

    return app


@contextmanager
def serving(app: Flask) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="broken-extractor", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
