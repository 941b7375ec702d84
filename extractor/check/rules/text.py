"""Rules on the HTTP reply itself and on the text/plain reply."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..findings import Finding, failed, first_failure, passed, skipped
from ..probes import JSON_TYPE, TEXT_TYPE, AudioSample, Probe, Reply
from .reading import expected_words, on_text, recall_finding, text_lines, words_of

SPEAKER_PREFIX = re.compile(r"^[^:\s][^:]{0,39}:\s+")  # "Speaker 1: " before an audio line


# -- HTTP ---------------------------------------------------------------------------------


# `extractor check http://host:8000` where this project's server takes uploads at /extract
_NOT_THE_ENDPOINT = " (is URL the address that takes the upload itself, such as .../extract?)"
HINTS = {
    401: " (does the extractor need --secret?)",
    404: _NOT_THE_ENDPOINT,
    405: _NOT_THE_ENDPOINT,
}


def reply_status(probe: Probe) -> Finding:
    for reply in probe.replies:
        if reply.ok or (reply.status == 406 and reply is not probe.platform):
            continue  # 406 to a one-format Accept just means the format is not offered
        hint = HINTS.get(reply.status or 0, "")
        return failed(f"{reply.describe()}: HTTP {reply.status}{hint}: {reply.excerpt()}")
    return passed()


def content_type(probe: Probe) -> Finding:
    for reply in probe.replies:
        if reply.ok and reply.content_type not in (JSON_TYPE, TEXT_TYPE):
            got = reply.content_type or "no Content-Type"
            return failed(
                f"{reply.describe()}: Content-Type {got}; the platform reads only"
                f" {JSON_TYPE} or {TEXT_TYPE}"
            )
    if not any(r.ok for r in probe.replies):
        return skipped(probe.missing_reason(JSON_TYPE))
    return passed()


# -- text/plain ---------------------------------------------------------------------------


def text_decodes(probe: Probe) -> Finding:
    reply = probe.reply_in(TEXT_TYPE)
    if reply is None:
        return skipped(probe.missing_reason(TEXT_TYPE))
    charset = reply.charset or "utf-8"
    try:
        reply.body.decode(charset)
    except LookupError:
        return failed(f"unknown charset {charset!r}")
    except UnicodeDecodeError as exc:
        return failed(
            f"not {charset} at byte {exc.start}: {reply.body[exc.start : exc.start + 8]!r}"
        )
    return passed()


@on_text
def text_no_blank_lines(probe: Probe, reply: Reply) -> Finding:
    def problems() -> Iterator[str]:
        for number, line in enumerate(text_lines(reply), start=1):
            content = line
            if isinstance(probe.sample, AudioSample):
                content = SPEAKER_PREFIX.sub("", line, count=1)
            if not content.strip():
                yield f"line {number} is blank: {line!r}"

    return first_failure(problems())


@on_text
def text_words(probe: Probe, reply: Reply) -> Finding:
    expected, threshold = expected_words(probe)
    got = []
    for line in text_lines(reply):
        if isinstance(probe.sample, AudioSample):
            line = SPEAKER_PREFIX.sub("", line, count=1)
        got.extend(words_of(line))
    return recall_finding(expected, got, threshold)
