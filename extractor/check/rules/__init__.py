"""How the conformance kit judges replies: the platform's rules, one function each, and the
table of them.

Each rule looks at one ``Probe`` (a sample and every reply to it) of the kinds it applies to
and returns a ``Finding``: PASS, FAIL with the first offending value, or SKIP with why. The
rules cover what the platform relies on and what ``schemas/importable.schema.json`` cannot
say: corner order, boxes inside their page, label indices inside their cell, inclusive
``endCharIndex``, one TIMESTAMP per line, milliseconds, and whether the drawn or spoken words
come back where they were put. They live by what they judge: the HTTP and text/plain reply
(``text.py``), the JSON document (``document.py``), its boxes (``boxes.py``) and its timestamps
(``timestamps.py``), all reading replies through ``reading.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..findings import Finding, failed, passed, skipped
from ..probes import EndpointReplies, Probe, Reply
from .boxes import (
    BOX_IOU,
    BOX_SHARE,
    json_box_in_page,
    json_boxes_overlap,
    json_corners,
    json_pages,
)
from .document import (
    json_content,
    json_label_chars,
    json_label_tokens,
    json_parses,
    json_schema,
    json_type,
    json_words,
)
from .reading import OCR_RECALL, SPEECH_RECALL
from .text import content_type, reply_status, text_decodes, text_no_blank_lines, text_words
from .timestamps import (
    END_TOLERANCE_MS,
    json_timestamp_per_line,
    json_timestamps_in_audio,
    json_timestamps_ms,
    json_timestamps_order,
)


@dataclass(frozen=True)
class Rule:
    """One check of the table: an id the tests and users can name, and how to judge it."""

    id: str
    title: str
    kinds: frozenset[str]  # sample kinds it applies to: "ocr", "audio"
    judge: Callable[[Probe], Finding]
    should: bool = False  # a recommendation: failing it is a WARN, not a FAIL


# -- the endpoint's error behaviour -------------------------------------------------------


def refused_with_4xx(reply: Reply) -> Finding:
    if reply.error:
        return failed(f"{reply.describe()}: {reply.error}")
    if reply.status is not None and 400 <= reply.status < 500:
        return passed(f"HTTP {reply.status}")
    return failed(f"{reply.sample}: HTTP {reply.status}, expected a 4xx: {reply.excerpt()}")


def secret_enforced(endpoint: EndpointReplies) -> Finding:
    if endpoint.no_secret is None or endpoint.wrong_secret is None:
        return skipped("no --secret given")
    for reply in (endpoint.no_secret, endpoint.wrong_secret):
        if reply.error:
            return failed(f"{reply.describe()}: {reply.error}")
        if reply.status != 401:
            return failed(f"{reply.sample}: HTTP {reply.status}, expected 401: {reply.excerpt()}")
    return passed("401 without the secret and with a wrong one")


@dataclass(frozen=True)
class EndpointRule:
    id: str
    title: str
    judge: Callable[[EndpointReplies], Finding]
    should: bool = False


OCR, AUDIO = frozenset({"ocr"}), frozenset({"audio"})
BOTH = OCR | AUDIO

RULES: tuple[Rule, ...] = (
    Rule("http.status", "every valid upload gets a 2xx reply", BOTH, reply_status),
    Rule("http.content-type", "replies are application/json or text/plain", BOTH, content_type),
    Rule("text.decodes", "text/plain decodes in its charset (UTF-8 by default)", BOTH,
         text_decodes),
    Rule("text.no-blank-lines", "text/plain has one non-blank line per text line", BOTH,
         text_no_blank_lines),
    Rule("text.words", f"text/plain has the drawn (>= {OCR_RECALL:.0%}) or spoken"
         f" (>= {SPEECH_RECALL:.0%}) words", BOTH, text_words),
    Rule("json.parses", "application/json is a JSON object", BOTH, json_parses),
    Rule("json.schema", "JSON matches schemas/importable.schema.json", BOTH, json_schema),
    Rule("json.type", "type is BOUNDING_BOX for images and PDFs, TIMESTAMP for audio", BOTH,
         json_type),
    Rule("json.content", "each cell's content is its tokens joined by single spaces", BOTH,
         json_content),
    Rule("json.label-tokens", "each label's cells and token indices exist", BOTH,
         json_label_tokens),
    Rule("json.label-chars", "char indices lie inside their token; endCharIndex is inclusive",
         BOTH, json_label_chars),
    Rule("json.words", f"cells hold the drawn (>= {OCR_RECALL:.0%}) or spoken"
         f" (>= {SPEECH_RECALL:.0%}) words", BOTH, json_words),
    Rule("json.corners", "box corners run clockwise from the top-left", OCR, json_corners),
    Rule("json.pages", "pages has one entry for every pageIndex labels use", OCR, json_pages),
    Rule("json.box-in-page", "every corner lies inside its page", OCR, json_box_in_page),
    Rule("json.boxes", f"boxes overlap the drawn words (IoU > {BOX_IOU} or contained) for"
         f" >= {BOX_SHARE:.0%} of them", OCR, json_boxes_overlap),
    Rule("json.timestamp-per-line", "one TIMESTAMP label per line, within that line", AUDIO,
         json_timestamp_per_line),
    Rule("json.timestamps-ms", "timestamps are milliseconds, not seconds", AUDIO,
         json_timestamps_ms),
    Rule("json.timestamps-order", "start <= end, starts non-decreasing from line to line", AUDIO,
         json_timestamps_order),
    Rule("json.timestamps-in-audio", f"timestamps lie inside the audio (+{END_TOLERANCE_MS} ms)",
         AUDIO, json_timestamps_in_audio),
)  # fmt: skip

ENDPOINT_RULES: tuple[EndpointRule, ...] = (
    EndpointRule("errors.missing-upload", "a form without 'upload' gets a 4xx (should)",
                 lambda e: refused_with_4xx(e.missing_upload), should=True),
    EndpointRule("errors.empty-upload", "an empty 'upload' gets a 4xx (should)",
                 lambda e: refused_with_4xx(e.empty_upload), should=True),
    EndpointRule("auth.secret", "with --secret: no or a wrong Bearer secret gets 401",
                 secret_enforced),
)  # fmt: skip
