"""How the conformance kit judges replies: the platform's rules, one function each.

Each rule looks at one ``Probe`` (a sample and every reply to it) of the kinds it applies to
and returns a ``Finding``: PASS, FAIL with the first offending value, or SKIP with why. The rules cover what the platform relies
on and what ``schemas/importable.schema.json`` cannot say: corner order, boxes inside their
page, label indices inside their cell, inclusive ``endCharIndex``, one TIMESTAMP per line,
milliseconds, and whether the drawn or spoken words come back where they were put.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import jsonschema

from .probes import JSON_TYPE, TEXT_TYPE, AudioSample, EndpointReplies, OcrSample, Probe, Reply

OCR_RECALL = 0.80  # share of drawn words that must come back
SPEECH_RECALL = 0.70  # share of spoken words that must come back (espeak is no orator)
BOX_IOU = 0.30  # a returned box overlaps its drawn word when IoU exceeds this ...
BOX_CONTAINED = 0.90  # ... or when this share of the smaller box lies inside the larger
BOX_SHARE = 0.80  # share of drawn words that need a box on their page that overlaps them
END_TOLERANCE_MS = 500  # encoders pad audio; a segment may end this far past the samples
SECONDS_MIN_AUDIO_MS = 3000  # only audio this long tells seconds from milliseconds
SPEAKER_PREFIX = re.compile(r"^[^:\s][^:]{0,39}:\s+")  # "Speaker 1: " before an audio line


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    WARN = "WARN"  # a "should" rule not met: reported, but the exit status stays 0


@dataclass(frozen=True)
class Finding:
    status: Status
    detail: str = ""


def passed(detail: str = "") -> Finding:
    return Finding(Status.PASS, detail)


def failed(detail: str) -> Finding:
    return Finding(Status.FAIL, detail)


def skipped(detail: str) -> Finding:
    return Finding(Status.SKIP, detail)


@dataclass(frozen=True)
class Rule:
    """One check of the table: an id the tests and users can name, and how to judge it."""

    id: str
    title: str
    kinds: frozenset[str]  # sample kinds it applies to: "ocr", "audio"
    judge: Callable[[Probe], Finding]
    should: bool = False  # a recommendation: failing it is a WARN, not a FAIL


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


Point = tuple[int, int]


def corners(label: dict[str, Any]) -> list[Point]:
    return [(label[f"x{i}"], label[f"y{i}"]) for i in range(4)]


def fmt_points(points: list[Point]) -> str:
    return " ".join(f"({x},{y})" for x, y in points)


Box = tuple[float, float, float, float]  # left, top, right, bottom


def overlap(a: Box, b: Box) -> tuple[float, float]:
    """(IoU, share of the smaller box inside the other) of two axis-aligned boxes."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, width) * max(0.0, height)
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    union = area_a + area_b - inter
    smaller = min(area_a, area_b)
    return (inter / union if union > 0 else 0.0, inter / smaller if smaller > 0 else 0.0)


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


def first_failure(problems: Iterator[str], ok: str = "") -> Finding:
    """FAIL with the first problem ``problems`` yields, else PASS."""
    problem = next(problems, None)
    return passed(ok) if problem is None else failed(problem)


# -- HTTP ---------------------------------------------------------------------------------


def reply_status(probe: Probe) -> Finding:
    for reply in probe.replies:
        if reply.ok or (reply.status == 406 and reply is not probe.platform):
            continue  # 406 to a one-format Accept just means the format is not offered
        hint = " (does the extractor need --secret?)" if reply.status == 401 else ""
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


# -- Importable JSON ----------------------------------------------------------------------


def json_parses(probe: Probe) -> Finding:
    reply = probe.reply_in(JSON_TYPE)
    if reply is None:
        return skipped(probe.missing_reason(JSON_TYPE))
    try:
        document(reply)
    except Unjudgeable as exc:
        return failed(f"{exc}: {reply.excerpt()}")
    return passed()


@on_json
def json_schema(probe: Probe, doc: dict[str, Any]) -> Finding:
    errors = sorted(importable_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return passed()
    best = jsonschema.exceptions.best_match(errors)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return failed(f"{json_path(best.absolute_path)}: {best.message}{more}")


@on_json
def json_type(probe: Probe, doc: dict[str, Any]) -> Finding:
    expected = "BOUNDING_BOX" if isinstance(probe.sample, OcrSample) else "TIMESTAMP"
    if doc.get("type") != expected:
        return failed(f"type is {doc.get('type')!r}; a {probe.sample.kind} reply is {expected!r}")
    return passed()


@on_json
def json_content(probe: Probe, doc: dict[str, Any]) -> Finding:
    def problems() -> Iterator[str]:
        for i, cell in enumerate(doc["cells"]):
            joined = " ".join(cell["tokens"])
            if cell["content"] != joined:
                yield f"cells[{i}].content {cell['content']!r} != tokens joined {joined!r}"

    return first_failure(problems())


@on_json
def json_label_tokens(probe: Probe, doc: dict[str, Any]) -> Finding:
    cells = cells_by_place(doc)

    def problems() -> Iterator[str]:
        for i, label in enumerate(doc["labels"]):
            for end in ("start", "end"):
                place = (label[f"{end}CellLine"], label[f"{end}CellIndex"])
                cell = cells.get(place)
                if cell is None:
                    yield f"labels[{i}]: no cell at line {place[0]}, index {place[1]}"
                    break
                k = label[f"{end}TokenIndex"]
                if not 0 <= k < len(cell["tokens"]):
                    yield (
                        f"labels[{i}]: {end}TokenIndex {k} is past the tokens of cell line"
                        f" {place[0]} (it has {len(cell['tokens'])}: 0..{len(cell['tokens']) - 1})"
                    )
                    break
            else:
                start = (label["startCellLine"], label["startTokenIndex"])
                stop = (label["endCellLine"], label["endTokenIndex"])
                if start > stop:
                    yield f"labels[{i}]: starts at (line, token) {start}, after its end {stop}"

    return first_failure(problems())


@on_json
def json_label_chars(probe: Probe, doc: dict[str, Any]) -> Finding:
    cells = cells_by_place(doc)

    def problems() -> Iterator[str]:
        for i, label in enumerate(doc["labels"]):
            first, last = label_token(label, cells, "start"), label_token(label, cells, "end")
            if first is None or last is None:
                continue  # json.label-tokens reports it
            start, end = label["startCharIndex"], label["endCharIndex"]
            if start >= len(first):
                yield f"labels[{i}]: startCharIndex {start} is past {first!r}"
            elif end == len(last):
                yield (
                    f"labels[{i}]: endCharIndex {end} points past {last!r}; it is inclusive,"
                    f" so the last character is {len(last) - 1}"
                )
            elif end > len(last):
                yield f"labels[{i}]: endCharIndex {end} is past {last!r} (last is {len(last) - 1})"
            elif (label["startCellLine"], label["startTokenIndex"]) == (
                label["endCellLine"], label["endTokenIndex"],
            ) and start > end:  # fmt: skip
                yield f"labels[{i}]: startCharIndex {start} > endCharIndex {end} in one token"

    return first_failure(problems())


# -- bounding boxes -----------------------------------------------------------------------


def box_labels(doc: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    return ((i, lab) for i, lab in enumerate(doc["labels"]) if lab.get("type") == "BOUNDING_BOX")


@on_json
def json_corners(probe: Probe, doc: dict[str, Any]) -> Finding:
    def problems() -> Iterator[str]:
        for i, label in box_labels(doc):
            points = corners(label)
            # Shoelace sum with y pointing down: positive when the corners run clockwise on
            # screen, zero for a degenerate box (nothing to say about its order).
            following = points[1:] + points[:1]
            twice_area = sum(
                x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(points, following, strict=True)
            )
            if twice_area < 0:
                yield (
                    f"labels[{i}]: corners run counter-clockwise: {fmt_points(points)}"
                    " (expected top-left, top-right, bottom-right, bottom-left)"
                )
                continue
            lowest = min(x + y for x, y in points)
            if sum(points[0]) != lowest:
                top_left = min(points, key=sum)
                yield (
                    f"labels[{i}]: the first corner {points[0]} is not the top-left one"
                    f" {top_left}: {fmt_points(points)}"
                )

    return first_failure(problems())


@on_json
def json_pages(probe: Probe, doc: dict[str, Any]) -> Finding:
    def problems() -> Iterator[str]:
        listed = Counter(p["pageIndex"] for p in doc.get("pages", []))
        for index, count in sorted(listed.items()):
            if count > 1:
                yield f"pages lists pageIndex {index} {count} times"
        for i, label in box_labels(doc):
            if label["pageIndex"] not in listed:
                yield (
                    f"labels[{i}]: pageIndex {label['pageIndex']} has no entry in pages"
                    f" (pages lists {sorted(listed) or 'none'})"
                )

    return first_failure(problems())


@on_json
def json_box_in_page(probe: Probe, doc: dict[str, Any]) -> Finding:
    pages = {p["pageIndex"]: p for p in doc.get("pages", [])}

    def problems() -> Iterator[str]:
        for i, label in box_labels(doc):
            page = pages.get(label["pageIndex"])
            if page is None:
                continue  # json.pages reports it
            width, height = page["pageWidth"], page["pageHeight"]
            for n, (x, y) in enumerate(corners(label)):
                if not (0 <= x <= width and 0 <= y <= height):
                    yield (
                        f"labels[{i}]: (x{n},y{n}) = ({x},{y}) lies outside page"
                        f" {label['pageIndex']} ({width}x{height})"
                    )
                    break

    return first_failure(problems())


@on_json
def json_boxes_overlap(probe: Probe, doc: dict[str, Any]) -> Finding:
    sample = probe.sample
    assert isinstance(sample, OcrSample)
    cells = cells_by_place(doc)
    pages = {p["pageIndex"]: p for p in doc.get("pages", [])}
    # Returned boxes in the pixels of the image the kit drew (a PDF may be rendered at any dpi).
    returned: dict[tuple[int, str], list[Box]] = {}
    for _i, label in box_labels(doc):
        token, page = label_token(label, cells), pages.get(label["pageIndex"])
        if token is None or page is None or label["pageIndex"] >= len(sample.pages):
            continue
        drawn = sample.pages[label["pageIndex"]].image
        sx, sy = drawn.width / page["pageWidth"], drawn.height / page["pageHeight"]
        xs = [x * sx for x, _y in corners(label)]
        ys = [y * sy for _x, y in corners(label)]
        returned.setdefault((label["pageIndex"], normalise(token)), []).append(
            (min(xs), min(ys), max(xs), max(ys))
        )
    total = matched = overlapping = 0
    first_miss = ""
    for page in sample.pages:
        for word in page.words:
            total += 1
            candidates = returned.get((word.page, normalise(word.text)), [])
            if not candidates:
                continue
            matched += 1
            drawn_box: Box = (word.left, word.top, word.right, word.bottom)
            scored = [(overlap(drawn_box, box), box) for box in candidates]
            (iou, contained), best = max(scored, key=lambda s: s[0])
            if iou > BOX_IOU or contained >= BOX_CONTAINED:
                overlapping += 1
            elif not first_miss:
                first_miss = (
                    f"{word.text!r} on page {word.page} drawn at ({word.left},{word.top})-"
                    f"({word.right},{word.bottom}), returned at ({best[0]:.0f},{best[1]:.0f})-"
                    f"({best[2]:.0f},{best[3]:.0f}) in drawn pixels (IoU {iou:.2f})"
                )
    if total == 0:
        return skipped("no words drawn")
    summary = f"{overlapping}/{total} words in place"
    if matched < BOX_SHARE * total:
        return failed(
            f"only {matched}/{total} drawn words have a box with their text on their page"
            f" (< {BOX_SHARE:.0%})"
        )
    if overlapping < BOX_SHARE * matched:
        return failed(
            f"only {overlapping}/{matched} returned boxes overlap their drawn word"
            f" (< {BOX_SHARE:.0%}); first: {first_miss}"
        )
    return passed(f"{summary} ({overlapping / matched:.0%} >= {BOX_SHARE:.0%})")


@on_json
def json_words(probe: Probe, doc: dict[str, Any]) -> Finding:
    expected, threshold = expected_words(probe)
    got = [w for cell in doc["cells"] for w in words_of(" ".join(cell["tokens"]))]
    return recall_finding(expected, got, threshold)


# -- timestamps ---------------------------------------------------------------------------


def timestamp_labels(doc: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, lab) for i, lab in enumerate(doc["labels"]) if lab.get("type") == "TIMESTAMP"]


@on_json
def json_timestamp_per_line(probe: Probe, doc: dict[str, Any]) -> Finding:
    labels = timestamp_labels(doc)

    def problems() -> Iterator[str]:
        for i, label in labels:
            if label["startCellLine"] != label["endCellLine"]:
                yield (
                    f"labels[{i}]: spans lines {label['startCellLine']}..{label['endCellLine']};"
                    " a TIMESTAMP covers one line"
                )
        per_line = Counter(label["startCellLine"] for _i, label in labels)
        for cell in doc["cells"]:
            if per_line[cell["line"]] != 1:
                yield f"cell line {cell['line']} has {per_line[cell['line']]} TIMESTAMP labels"

    return first_failure(problems())


@on_json
def json_timestamps_ms(probe: Probe, doc: dict[str, Any]) -> Finding:
    sample = probe.sample
    assert isinstance(sample, AudioSample)
    ends = [label["endTimestampMillis"] for _i, label in timestamp_labels(doc)]
    if not ends:
        return skipped("no TIMESTAMP labels to judge")
    last, duration = max(ends), sample.duration_ms
    if duration < SECONDS_MIN_AUDIO_MS:
        return skipped(f"the audio ({duration} ms) is too short to tell the unit")
    if last <= duration / 1000 + 1:
        return failed(
            f"timestamps look like seconds, not milliseconds: the last end is {last} for"
            f" {duration} ms of speech (expected about {duration})"
        )
    if last < duration / 2:
        return failed(
            f"timestamps end at {last} ms but the speech lasts {duration} ms: not milliseconds?"
        )
    return passed(f"ends {last}/{duration} ms")


@on_json
def json_timestamps_order(probe: Probe, doc: dict[str, Any]) -> Finding:
    labels = sorted(timestamp_labels(doc), key=lambda item: item[1]["startCellLine"])

    def problems() -> Iterator[str]:
        previous: tuple[int, int] | None = None
        for i, label in labels:
            start, end = label["startTimestampMillis"], label["endTimestampMillis"]
            if start > end:
                yield f"labels[{i}]: starts at {start} ms, after its end {end} ms"
            if previous is not None and start < previous[1]:
                yield (
                    f"labels[{i}]: starts at {start} ms, before labels[{previous[0]}]"
                    f" (an earlier line) at {previous[1]} ms"
                )
            previous = (i, start)

    return first_failure(problems())


@on_json
def json_timestamps_in_audio(probe: Probe, doc: dict[str, Any]) -> Finding:
    sample = probe.sample
    assert isinstance(sample, AudioSample)
    limit = sample.duration_ms + END_TOLERANCE_MS

    def problems() -> Iterator[str]:
        for i, label in timestamp_labels(doc):
            for key in ("startTimestampMillis", "endTimestampMillis"):
                if not 0 <= label[key] <= limit:
                    yield (
                        f"labels[{i}].{key} = {label[key]} lies outside the audio"
                        f" (0..{sample.duration_ms} ms, +{END_TOLERANCE_MS} ms allowed)"
                    )

    return first_failure(problems())


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
