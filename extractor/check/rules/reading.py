"""Reading a reply the way the rules need it: its text lines, its Importable document, its
words compared with the drawn or spoken ones; and the wrappers that hand a rule the reply it
judges (SKIP when there is none)."""

from __future__ import annotations

import functools
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import jsonschema

from ..findings import Finding, failed, passed, skipped
from ..probes import JSON_TYPE, TEXT_TYPE, OcrSample, Probe, Reply

OCR_RECALL = 0.80  # share of drawn words that must come back
SPEECH_RECALL = 0.70  # share of spoken words that must come back (espeak is no orator)


class Unjudgeable(Exception):
    """A reply too malformed for a rule to read; the schema rule reports why."""


# -- reading a reply ----------------------------------------------------------------------


def normalise(token: str) -> str:
    """Casefolded, without punctuation or symbols: how drawn and returned words are compared."""
    return "".join(
        ch for ch in token.casefold() if not unicodedata.category(ch).startswith(("P", "S"))
    )


def words_of(text: str) -> list[str]:
    return [w for w in (normalise(t) for t in text.split()) if w]


def text_lines(reply: Reply) -> list[str]:
    """The lines of a text/plain reply, without the single newline that may end the body."""
    body = reply.body.decode(reply.charset or "utf-8")
    lines = body.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


@functools.lru_cache(maxsize=64)
def parse_json(reply: Reply) -> Any:
    """The reply's JSON value; raises ``ValueError`` (incl. decode errors) when it has none."""
    return json.loads(reply.body.decode(reply.charset or "utf-8"))


def document(reply: Reply) -> dict[str, Any]:
    """The reply as an Importable object, or ``Unjudgeable``."""
    try:
        value = parse_json(reply)
    except ValueError as exc:
        raise Unjudgeable(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Unjudgeable("not a JSON object")
    return value


@functools.cache
def importable_validator() -> jsonschema.Draft202012Validator:
    """python-jsonschema rather than the server's compiled validator: its ``best_match`` picks
    the most telling error to show, and the kit's replies are small."""
    from extractor.replies.schemas import importable_schema

    return jsonschema.Draft202012Validator(importable_schema())


def json_path(parts: Iterable[Any]) -> str:
    """``labels[3].x0`` from a jsonschema error path."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the document)"


def cells_by_place(doc: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(c["line"], c["index"]): c for c in doc["cells"]}


def label_token(
    label: dict[str, Any], cells: dict[tuple[int, int], dict[str, Any]], end: str = "start"
) -> str | None:
    """The token a label's start (or end) points at, or None when it points nowhere."""
    cell = cells.get((label[f"{end}CellLine"], label[f"{end}CellIndex"]))
    k = label[f"{end}TokenIndex"]
    if cell is None or not 0 <= k < len(cell["tokens"]):
        return None
    token: str = cell["tokens"][k]
    return token


def recall(expected: list[str], got: list[str]) -> tuple[int, list[str]]:
    """How many ``expected`` words (with repeats) appear in ``got``, and the missing ones."""
    have = Counter(got)
    missing = []
    found = 0
    for word in expected:
        if have[word] > 0:
            have[word] -= 1
            found += 1
        else:
            missing.append(word)
    return found, missing


def recall_finding(expected: list[str], got: list[str], threshold: float) -> Finding:
    found, missing = recall(expected, got)
    share = found / len(expected) if expected else 1.0
    summary = f"{found}/{len(expected)} words"
    if share >= threshold:
        return passed(f"{summary} ({share:.0%} >= {threshold:.0%})")
    shown = ", ".join(repr(w) for w in missing[:5]) + (", ..." if len(missing) > 5 else "")
    return failed(f"only {summary} came back ({share:.0%} < {threshold:.0%}); missing {shown}")


def expected_words(probe: Probe) -> tuple[list[str], float]:
    sample = probe.sample
    if isinstance(sample, OcrSample):
        return [w for p in sample.pages for w in words_of(" ".join(x.text for x in p.words))], (
            OCR_RECALL
        )
    return words_of(sample.text), SPEECH_RECALL


def what_came_back(probe: Probe) -> str:
    """A one-line summary of the text found in ``probe``'s replies, for people trying the kit."""
    lines: list[str] = []
    try:
        if (reply := probe.reply_in(TEXT_TYPE)) is not None:
            lines = text_lines(reply)
        elif (reply := probe.reply_in(JSON_TYPE)) is not None:
            lines = [" ".join(cell["tokens"]) for cell in document(reply)["cells"]]
        else:
            return "nothing (no usable reply)"
    except (Unjudgeable, UnicodeDecodeError, LookupError, KeyError, TypeError):
        return "unreadable reply"
    count = f"{len(lines)} line" + ("" if len(lines) == 1 else "s")
    return f"{count}: " + " / ".join(lines[:3]) + (" / ..." if len(lines) > 3 else "")


# -- rule helpers -------------------------------------------------------------------------


def on_json(check: Callable[[Probe, dict[str, Any]], Finding]) -> Callable[[Probe], Finding]:
    """Run ``check`` on the probe's JSON reply; SKIP when there is none or it is unreadable."""

    @functools.wraps(check)
    def judge(probe: Probe) -> Finding:
        reply = probe.reply_in(JSON_TYPE)
        if reply is None:
            return skipped(probe.missing_reason(JSON_TYPE))
        try:
            return check(probe, document(reply))
        except Unjudgeable as exc:
            return skipped(f"cannot read the reply: {exc}")
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            # Untrusted input: a shape the schema rejects is reported there, not as a crash.
            return skipped(f"reply does not have the Importable shape ({exc!r}); see json.schema")

    return judge


def on_text(check: Callable[[Probe, Reply], Finding]) -> Callable[[Probe], Finding]:
    """Run ``check`` on the probe's text/plain reply; SKIP when there is none."""

    @functools.wraps(check)
    def judge(probe: Probe) -> Finding:
        reply = probe.reply_in(TEXT_TYPE)
        if reply is None:
            return skipped(probe.missing_reason(TEXT_TYPE))
        try:
            return check(probe, reply)
        except (UnicodeDecodeError, LookupError) as exc:
            return skipped(f"cannot decode the text: {exc}; see text.decodes")

    return judge
