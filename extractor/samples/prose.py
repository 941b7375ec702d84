"""Pages of prose nobody wrote for this project, turned and skewed as scanners leave them.

What the rotation tests and ``bench/rotation.py`` read: text set on an A4 page with each word's
ink box recorded, then the page turned by any angle the way a user's scan comes, with the
boxes carried along into the turned image's pixels; and the character error rate of a reading.

The text is from section 1 of the Apache License 2.0 (as Debian ships it in
``/usr/share/common-licenses/Apache-2.0``): ordinary legal English with punctuation, quotes
and parentheses, written long before this project and not tuned on.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from extractor.samples import DrawnWord, TextPage, font

APACHE_DEFINITIONS = (
    '"Legal Entity" shall mean the union of the acting entity and all other entities that'
    " control, are controlled by, or are under common control with that entity. For the"
    ' purposes of this definition, "control" means (i) the power, direct or indirect, to'
    " cause the direction or management of such entity, whether by contract or otherwise, or"
    " (ii) ownership of fifty percent (50%) or more of the outstanding shares, or (iii)"
    " beneficial ownership of such entity.\n"
    '"Source" form shall mean the preferred form for making modifications, including but not'
    " limited to software source code, documentation source, and configuration files.\n"
    '"Object" form shall mean any form resulting from mechanical transformation or'
    " translation of a Source form, including but not limited to compiled object code,"
    " generated documentation, and conversions to other media types.\n"
    '"Work" shall mean the work of authorship, whether in Source or Object form, made'
    " available under the License, as indicated by a copyright notice that is included in or"
    " attached to the work (an example is provided in the Appendix below).\n"
    '"Derivative Works" shall mean any work, whether in Source or Object form, that is based'
    " on (or derived from) the Work and for which the editorial revisions, annotations,"
    " elaborations, or other modifications represent, as a whole, an original work of"
    " authorship."
)


def prose_page(
    text: str = APACHE_DEFINITIONS,
    *,
    dpi: int = 150,
    points: float = 11,
    page: int = 0,
    typeface: str | None = None,
) -> tuple[TextPage, str]:
    """``text`` wrapped onto an A4 page at ``dpi`` in a ``points``-sized font (``typeface``: a
    TrueType file; default a sans-serif one); the page and the text as drawn (one line per
    printed line), for scoring a reading against."""
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    size = round(points * dpi / 72)
    face = ImageFont.truetype(typeface, size) if typeface else font(size)
    margin, step = round(0.9 * dpi), round(points * dpi / 72 * 1.5)
    space = draw.textlength(" ", font=face)
    words: list[DrawnWord] = []
    printed: list[str] = []
    y = margin
    for paragraph in text.split("\n"):
        line: list[str] = []
        for word in [*paragraph.split(), None]:
            fits = word is not None and (
                draw.textlength(" ".join([*line, word]), font=face) <= width - 2 * margin
            )
            if fits or (word is not None and not line):
                line.append(word)  # type: ignore[arg-type]
                continue
            if y + step > height - margin:
                return TextPage(image, tuple(words)), "\n".join(printed)
            x = float(margin)
            for drawn in line:
                left, top, right, bottom = draw.textbbox((x, y), drawn, font=face)
                draw.text((x, y), drawn, font=face, fill=0)
                words.append(DrawnWord(drawn, page, int(left), int(top), int(right), int(bottom)))
                x += draw.textlength(drawn, font=face) + space
            printed.append(" ".join(line))
            y += step
            line = [word] if word is not None else []
        y += step // 2  # a little space between paragraphs
    return TextPage(image, tuple(words)), "\n".join(printed)


def turned(page: TextPage, degrees: float) -> TextPage:
    """``page`` turned ``degrees`` counterclockwise as a scan comes out (Pillow's
    ``rotate(expand=True)``, white around), each word's box the upright box around its ink in
    the turned image's pixels."""
    image = page.image.rotate(
        degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255
    )
    angle = math.radians(degrees)
    cos, sin = math.cos(angle), math.sin(angle)
    (w, h), (tw, th) = page.image.size, image.size

    def moved(word: DrawnWord) -> DrawnWord:
        xs, ys = [], []
        for x, y in ((word.left, word.top), (word.right, word.top),
                     (word.right, word.bottom), (word.left, word.bottom)):  # fmt: skip
            dx, dy = x - w / 2, y - h / 2
            xs.append(tw / 2 + dx * cos + dy * sin)  # counterclockwise on a y-down page
            ys.append(th / 2 - dx * sin + dy * cos)
        return replace(
            word, left=round(min(xs)), top=round(min(ys)),
            right=round(max(xs)), bottom=round(max(ys)),
        )  # fmt: skip

    return TextPage(image, tuple(moved(word) for word in page.words))


def scanned(image: Image.Image, *, seed: int = 0, quality: int = 60) -> bytes:
    """``image`` as a cheap scanner leaves it: slightly blurred, grainy, saved as a JPEG."""
    blurred = image.convert("L").filter(ImageFilter.GaussianBlur(0.8))
    grain = np.random.default_rng(seed).normal(0, 12, (blurred.height, blurred.width))
    noisy = np.clip(np.asarray(blurred, np.float32) + grain, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noisy).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance of two strings, a row of the table at a time in numpy."""
    if not a or not b:
        return len(a) or len(b)
    target = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    columns = np.arange(len(b) + 1)
    previous = columns.copy()
    for i, char in enumerate(a, start=1):
        candidate = np.empty(len(b) + 1, np.int64)
        candidate[0] = i
        candidate[1:] = np.minimum(previous[1:] + 1, previous[:-1] + (target != ord(char)))
        # An insertion chains along the row: new[j] = min(candidate[j], new[j-1] + 1).
        previous = np.minimum.accumulate(candidate - columns) + columns
    return int(previous[-1])


def cer(truth: str, reading: str) -> float:
    """Character error rate in percent, whitespace runs counted as one space."""
    expected, got = " ".join(truth.split()), " ".join(reading.split())
    return 100 * edit_distance(expected, got) / max(len(expected), 1)
