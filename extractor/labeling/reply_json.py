"""JSON replies of customers' APIs, measured on their raw text before they are parsed.

A reply is at most ``OUTBOUND_MAX_REPLY_BYTES`` long, but bytes say little about what parsing
costs: 30 MB of ``[],`` are 10 million lists (+805 MB once parsed), 100,000 ``[`` make
``json.loads`` raise RecursionError, and a schema validator that lists every error of 300,000
empty entities holds them all (+3.1 GB). So one pass over the text counts what parsing would
build (nesting, values, string and number lengths) and refuses the reply at the first thing over
a limit, naming it, the limit's variable and the JSON path where it was crossed; only a reply
that passes is handed to ``json.loads``, whose memory is then bounded by the counts. The same
pass refuses what ``json.loads`` would accept silently but the rest of the service cannot use:
duplicate keys (the last would win unseen) and lone UTF-16 surrogates (no database can store
them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from extractor.config import LabelingSettings
from extractor.labeling.errors import JobFailure

# One JSON token after optional whitespace. A string is one match whatever its length (its
# escapes are checked apart), so the Python loop runs once per token, never per character.
_TOKEN = re.compile(
    r"""[ \t\n\r]*(?:
        (?P<open>[\[{])
      | (?P<close>[\]}])
      | (?P<comma>,)
      | (?P<colon>:)
      | "(?P<string>[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*)"
      | (?P<number>-?[0-9][0-9.eE+-]*)
      | (?P<literal>true|false|null)
    )""",
    re.VERBOSE,
)
_TRAILING_SPACE = re.compile(r"[ \t\n\r]*\Z")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


@dataclass(frozen=True)
class ReplyLimits:
    """What one JSON reply may hold; each field is the value of the setting named beside it."""

    max_depth: int  # max_api_reply_depth
    max_values: int  # max_{extraction,prediction}_reply_values
    max_string_chars: int  # max_prediction_string_chars, or the reply's size for extractors
    max_number_chars: int  # max_api_reply_number_chars
    values_setting: str  # which setting max_values comes from
    string_setting: str | None  # which setting max_string_chars comes from, if any


def prediction_limits(settings: LabelingSettings) -> ReplyLimits:
    """What a prediction API's reply may hold under ``settings``."""
    return ReplyLimits(
        max_depth=settings.max_api_reply_depth,
        max_values=settings.max_prediction_reply_values,
        max_string_chars=settings.max_prediction_string_chars,
        max_number_chars=settings.max_api_reply_number_chars,
        values_setting="max_prediction_reply_values",
        string_setting="max_prediction_string_chars",
    )


def extraction_limits(settings: LabelingSettings) -> ReplyLimits:
    """What a custom extraction API's JSON reply (an Importable document) may hold: a string
    (a line's content) no longer than a whole text document may be."""
    return ReplyLimits(
        max_depth=settings.max_api_reply_depth,
        max_values=settings.max_extraction_reply_values,
        max_string_chars=settings.max_document_bytes,
        max_number_chars=settings.max_api_reply_number_chars,
        values_setting="max_extraction_reply_values",
        string_setting="max_document_bytes",
    )


class ReplyRefused(JobFailure):
    """A reply over a limit or unusable as JSON: says what, where, and which limit."""

    def __init__(
        self,
        what: str,
        problem: str,
        path: str,
        *,
        setting: str | None = None,
        maximum: int | None = None,
        **details: Any,
    ) -> None:
        facts: dict[str, Any] = {"path": path, **details}
        message = f"{what} replied {problem} at {path}"
        if setting is not None:
            facts.update(limit=LabelingSettings.variable(setting), maximum=maximum)
            message += f" (limit {maximum}, {LabelingSettings.variable(setting)})"
        super().__init__(message, **facts)


class _Frame:
    """An array or object being read: its kind, the index or key in it, its keys so far."""

    __slots__ = ("expect", "index", "is_object", "key", "keys")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.index = 0
        self.key: str | None = None
        self.keys: set[str] = set()
        # What comes next: "value", "key", "colon", "comma" (or the close).
        self.expect = "key" if is_object else "value"


def json_path(stack: list[_Frame]) -> str:
    """Where the scan is, as ``documents/0/labels/3`` (``(root)`` at the top)."""
    parts = []
    for frame in stack:
        if frame.is_object:
            if frame.key is not None:
                parts.append(frame.key)
        else:
            parts.append(str(frame.index))
    return "/".join(parts) or "(root)"


def _decoded_key(raw: str) -> str:
    """A key's text with its escapes undone (``"a"`` and ``"\\u0061"`` are the same key)."""
    if "\\" not in raw:
        return raw
    return str(json.loads(f'"{raw}"'))


def _check_surrogates(raw: str) -> bool:
    """Whether every UTF-16 surrogate escape in a string's raw text is one half of a pair."""
    escapes = [(m.start(), m.group()) for m in _ESCAPE.finditer(raw) if m.group()[1] == "u"]
    pending_high: int | None = None
    for start, escape in escapes:
        code = int(escape[2:], 16)
        if 0xDC00 <= code <= 0xDFFF:
            if pending_high is None or pending_high != start:
                return False
            pending_high = None
        elif pending_high is not None:
            return False
        if 0xD800 <= code <= 0xDBFF:
            pending_high = start + 6  # where its low half must begin
    return pending_high is None


def measure(text: str, limits: ReplyLimits, what: str) -> None:
    """Scan ``text`` once, raising :class:`ReplyRefused` at the first thing over ``limits``.

    Counts are kept per token, so the scan stops at the value that crosses a limit and costs
    nothing that grows with the reply (a key set per open object, bounded by the values
    limit). Malformed JSON is reported as such; the grammar is otherwise left to ``json.loads``.
    """
    stack: list[_Frame] = []
    values = 0
    position = 0
    done = False  # the top-level value is complete

    def refuse(problem: str, setting: str | None = None, maximum: int | None = None) -> None:
        raise ReplyRefused(what, problem, json_path(stack), setting=setting, maximum=maximum)

    def not_json() -> None:
        refuse(f"invalid JSON (character {position})")

    while True:
        match = _TOKEN.match(text, position)
        if match is None:
            if _TRAILING_SPACE.match(text, position) and done:
                return
            not_json()
            return  # unreachable: refuse raised
        position = match.end()
        kind = match.lastgroup
        frame = stack[-1] if stack else None
        if done:
            not_json()
        if frame is not None and frame.expect == "comma":
            if kind == "comma":
                frame.expect = "key" if frame.is_object else "value"
                if not frame.is_object:
                    frame.index += 1
                continue
            if kind != "close":
                not_json()
        if kind == "close":
            if frame is None or (frame.expect not in ("comma",) and not _closes_empty(frame)):
                not_json()
            assert frame is not None
            if (match.group("close") == "}") != frame.is_object:
                not_json()
            stack.pop()
            if stack:
                stack[-1].expect = "comma"
            else:
                done = True
            continue
        if frame is not None and frame.expect == "colon":
            if kind != "colon":
                not_json()
            frame.expect = "value"
            continue
        if frame is not None and frame.expect == "key":
            if kind != "string":
                not_json()
            values += 1
            if values > limits.max_values:
                refuse("JSON with too many values", limits.values_setting, limits.max_values)
            if match.end("string") - match.start("string") > limits.max_string_chars:
                refuse(
                    "JSON with a key too long",
                    limits.string_setting,
                    limits.max_string_chars,
                )
            raw = match.group("string")
            if "\\u" in raw and _SURROGATE_ESCAPE.search(raw) and not _check_surrogates(raw):
                refuse("a key with an unpaired UTF-16 surrogate")
            key = _decoded_key(raw)
            if key in frame.keys:
                frame.key = key
                refuse("JSON repeating a key")
            frame.keys.add(key)
            frame.key = key
            frame.expect = "colon"
            continue
        # A value is expected here (at the top, after a colon, in an array).
        if kind in ("comma", "colon"):
            not_json()
        values += 1
        if values > limits.max_values:
            refuse("JSON with too many values", limits.values_setting, limits.max_values)
        if kind == "open":
            if len(stack) >= limits.max_depth:
                refuse("JSON nested too deeply", "max_api_reply_depth", limits.max_depth)
            stack.append(_Frame(match.group("open") == "{"))
            continue
        if kind == "string":
            if match.end("string") - match.start("string") > limits.max_string_chars:
                refuse("a string too long", limits.string_setting, limits.max_string_chars)
            raw = match.group("string")
            if "\\u" in raw and _SURROGATE_ESCAPE.search(raw) and not _check_surrogates(raw):
                refuse("a string with an unpaired UTF-16 surrogate")
        elif kind == "number" and len(match.group("number")) > limits.max_number_chars:
            refuse("a number too long", "max_api_reply_number_chars", limits.max_number_chars)
        if frame is None:
            done = True
        else:
            frame.expect = "comma"


def _closes_empty(frame: _Frame) -> bool:
    """Whether a close bracket may come now: right after the open, in an empty container."""
    if frame.is_object:
        return frame.expect == "key" and not frame.keys
    return frame.expect == "value" and frame.index == 0


def parse_reply_json(content: bytes, limits: ReplyLimits, what: str) -> Any:
    """The reply's JSON value, measured first (see :func:`measure`); refusals are
    :class:`ReplyRefused`, so a job fails saying what was wrong, never "internal error"."""
    try:
        text = content.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ReplyRefused(what, f"a body that is not UTF-8 (byte {exc.start})", "(root)") from exc
    measure(text, limits, what)
    try:
        return json.loads(text)
    except ValueError as exc:  # what the scan leaves to the parser: numbers' and escapes' syntax
        raise ReplyRefused(what, f"invalid JSON ({exc})", "(root)") from exc
    except (RecursionError, MemoryError) as exc:  # cannot happen within the limits; still ours
        raise ReplyRefused(
            what, f"JSON that cannot be parsed ({type(exc).__name__})", "(root)"
        ) from exc
