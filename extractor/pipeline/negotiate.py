"""Choose the reply format from the Accept header (with q-values) and ``?format=``.

The formats themselves, and which documents each fits, are defined in ``formats.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from extractor.errors import InvalidParameter, NotAcceptable
from extractor.replies.formats import FORMATS, ReplyFormat, formats_for
from extractor.replies.importable import DocumentKind


@dataclass(frozen=True)
class MediaRange:
    type: str
    subtype: str
    q: float
    position: int  # order in the header, for ties between equally specific ranges

    def matches(self, media_type: str) -> int:
        """How specifically this range names ``media_type``: 2 exact, 1 type/*, 0 */*, -1 no."""
        kind, _, sub = media_type.split(";")[0].partition("/")
        if self.type == "*" and self.subtype == "*":
            return 0
        if self.type != kind:
            return -1
        if self.subtype == "*":
            return 1
        return 2 if self.subtype == sub else -1


def parse_accept(header: str) -> list[MediaRange]:
    """Parse an Accept header; malformed ranges are skipped, malformed q-values count as 1."""
    ranges = []
    for position, part in enumerate(header.split(",")):
        pieces = [p.strip() for p in part.split(";")]
        kind, slash, sub = pieces[0].lower().partition("/")
        if not slash or not kind or not sub:
            continue
        q = 1.0
        for param in pieces[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 1.0
                q = min(max(q, 0.0), 1.0) if math.isfinite(q) else 1.0  # nan, inf: malformed
        ranges.append(MediaRange(kind.strip(), sub.strip(), q, position))
    return ranges


def quality(ranges: Sequence[MediaRange], media_type: str) -> tuple[float, int]:
    """The q the most specific matching range gives ``media_type``, and that range's position."""
    best: tuple[int, float, int] | None = None
    for r in ranges:
        specificity = r.matches(media_type)
        if specificity >= 0 and (best is None or specificity > best[0]):
            best = (specificity, r.q, r.position)
    return (0.0, 1 << 30) if best is None else (best[1], best[2])


def choose_format(
    accept: str | None, format_param: str | None, default: str, *, audio: bool
) -> ReplyFormat:
    """Pick the reply format: ``?format=`` wins, then Accept; ties go to ``default``.

    Only the formats that fit the document are offered: a format that does not is a 400 when
    named by ``?format=`` and never chosen from Accept (406 when nothing else is allowed).
    """
    offered = formats_for(DocumentKind.AUDIO if audio else DocumentKind.OCR)
    if format_param:
        chosen = FORMATS.get(format_param.lower())
        if chosen is None or chosen not in offered:
            names = ", ".join(f.name for f in offered)
            kind = "audio" if audio else "an image or a PDF"
            fits = f" (the upload is {kind})" if chosen is not None else ""
            raise InvalidParameter(
                f"format must be one of {names}, not {format_param!r}{fits}", param="format"
            )
        return chosen
    ranges = parse_accept(accept or "")
    if not accept or not accept.strip() or not ranges:
        return FORMATS[default]
    scored = [(quality(ranges, f.essence), f) for f in offered]
    top = max(q for (q, _pos), _f in scored)
    if top <= 0:
        names = ", ".join(f.essence for f in offered)
        raise NotAcceptable(
            f"cannot answer with any type the Accept header allows; offered: {names}"
        )
    tied = [(pos, f) for (q, pos), f in scored if q == top]
    for _pos, f in tied:
        if f.name == default:
            return f
    return min(tied, key=lambda item: item[0])[1]
