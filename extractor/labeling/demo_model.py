"""A toy prediction API for demos and tests: labels capitalized words ``ENTITY`` and numbers
``NUMBER``, speaking the wire format of REFERENCE §2 and checking the request's signature.

    python -m extractor.labeling.demo_model --bind 127.0.0.1:8200 --secret demo-key
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import re
import sys
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

WORD = re.compile(r"\S+")
MAX_BODY = 16 * 1024 * 1024  # bytes; a demo has no business receiving more


def predict(request: dict[str, Any]) -> dict[str, Any]:
    """The model's answer to one request: entities per sentence, end offsets exclusive."""
    documents = []
    for document in request.get("documents", []):
        labels = []
        for sentence in document.get("sentences", []):
            entities = []
            for match in WORD.finditer(sentence.get("text", "")):
                word = match.group().strip(".,;:!?\"'()")
                if not word:
                    continue
                start = match.start() + match.group().index(word)
                kind = "NUMBER" if word.isdigit() else "ENTITY" if word[0].isupper() else None
                if kind:
                    entities.append(
                        {
                            "label": kind,
                            "start_char": start,
                            "end_char": start + len(word),
                            "layer": 0,
                        }
                    )
            labels.append({"id": sentence["id"], "entities": entities})
        documents.append({"id": document["id"], "labels": labels})
    return {"id": request.get("id"), "documents": documents}


def signed_correctly(secret: str, body: bytes, authorization: str, signature: str) -> bool:
    """Whether the bearer token is the secret and X-Signature the HMAC-SHA256 of the body."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(authorization, f"Bearer {secret}") and hmac.compare_digest(
        signature, expected
    )


def make_handler(secret: str | None) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``secret`` (None: no check)."""

    class PredictionHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, {"error": "too large"})
                return
            body = self.rfile.read(length)
            if secret is not None and not signed_correctly(
                secret,
                body,
                self.headers.get("Authorization", ""),
                self.headers.get("X-Signature", ""),
            ):
                self._answer(401, {"error": "bad token or signature"})
                return
            try:
                self._answer(200, predict(json.loads(body)))
            except (ValueError, KeyError, TypeError, AttributeError):
                self._answer(400, {"error": "not a prediction request"})

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            log.info("%s %s", self.address_string(), format % args)

    return PredictionHandler


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the toy model until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m extractor.labeling.demo_model")
    parser.add_argument("--bind", default="127.0.0.1:8200", help="HOST:PORT")
    parser.add_argument("--secret", default=None, help="expected secretKey (checked if given)")
    args = parser.parse_args(argv)
    host, _, port = args.bind.rpartition(":")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), make_handler(args.secret))
    log.info("demo prediction API on http://%s/", args.bind)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
