"""Pages read at any rotation: a page scanned sideways, upside down or a few degrees askew is
turned upright before its words are kept, and every box is mapped back to the upload's pixels.

How, and why this way (figures in ``bench/rotation.md``): the page is first read as it is, the
normal reading an upright page needs anyway, so an upright page costs nothing more than the
look at its words below. Only when that reading gives it away is more work done:

- its words are mostly low-confidence garbage (an upside-down page, or one turned 90°
  counterclockwise, which Tesseract reads as upside-down vertical text): Tesseract's orientation
  detection (OSD, ``--psm 0``) says which way is up (when it cannot tell, the ink's lines do),
  and the page is turned and read again;
- its lines slope (the page is askew by more than ``SKEW_MIN_DEGREES``): the page is turned
  level and read again (at 5° Tesseract lost 90% of one such page's text, keeping four lines);
- it has next to no words (at 3.5-5° Tesseract took some whole pages for pictures): the
  angle of the ink's lines (a projection profile, ~0.1 s) says how to turn it;
- its words stand on end, read top to bottom (a page turned 90° clockwise, which
  Tesseract reads as vertical text on its own, boxes already in the upload's pixels): nothing
  is read again, the reply only says the page was read turned by 270°.

A page set level is kept unless it reads clearly worse (``KEEP_TURNED``); a page turned by
quarters only when it reads clearly better (``TURN_CONFIDENCE_MARGIN``): the ink's lines say
which way they run, not which way is up, and OSD guesses on a page of few words. A rotation is given
as the degrees a page was turned clockwise to be read upright (Tesseract's OSD calls the same
figure "Rotate"): 90, 180 or 270, and a small signed skew for a page set level.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
from PIL import Image

from extractor.errors import EngineTimeout
from extractor.heap import trim_heap
from extractor.media.images import PageImage, grey
from extractor.ocr.command import (
    TesseractFailed,
    TesseractMissing,
    TesseractTimedOut,
    run_tesseract,
)
from extractor.replies.importable import BoundingBox, Line, Word

# A first reading whose words' mean confidence is below this looks unreadable: ask OSD which
# way is up. Upright prose pages measured 90-97 (96 clean, ~91 with noise, blur and JPEG),
# the same pages upside down or turned 90° clockwise 35-45.
CONFIDENCE_FLOOR = 70.0
MIN_WORDS = 5  # fewer words than this say nothing either way (a blank page, a photo)
# Lines sloping more than this are set level and read again. Tesseract copes with a small skew
# on full pages (CER +0.04 points at 2°, +0.1 at 3.5°) but lost 0.7 points at 5°, all but four
# lines of a page at -5°, and one of the two lines of a 12pt bold page at 1.4°.
SKEW_MIN_DEGREES = 1.0
SKEW_MAX_DEGREES = 15.0  # steeper "slopes" are not skew (a table, a diagram, a rotated stamp)
PROFILE_SIDE = 1000  # pixels: the copy ink_angle measures (~0.1° resolution at 300 dpi)
PROFILE_POINTS = 60_000  # ink pixels sampled for it: enough for a page of text
OSD_MIN_CONFIDENCE = 1.0  # OSD's orientation confidence below which its answer is ignored
# Pages whose shorter side is below this are read as they are, no rotation looked for: a line
# Tesseract can read (x-height ~10 px and up, with ascenders and descenders ~16) does not fit
# across them, so there is nothing to turn, and a strip this thin has no lines to measure.
ROTATE_MIN_SIDE = 16  # pixels
# The turned reading is kept unless its score is below this share of the reading it replaces: a
# sloping page's reading breaks lines into fragments read twice ("inclu", "ding"), which can
# outscore the level reading of the same words (a two-line page at 4°: 26 words against 23).
KEEP_TURNED = 0.9
# A reading turned by quarters is kept only when its words' mean confidence beats the reading
# as the page lay by this many points, and its score beats it too: a page truly on its side or
# upside down gains 45-60 points (35-45 before, 90-97 after), while a chart whose labels run
# at several angles, turned 180° on its ink's lines, lost 20 (59 to 39) and outscored the
# upright reading with garbage (42 to 22), its label words found falling from 26% to 8%.
TURN_CONFIDENCE_MARGIN = 10.0
_WORDLIKE = re.compile(r"\W*[^\W\d_]{2,}\W*")  # two letters or more, punctuation around


@dataclass(frozen=True)
class Turn:
    """How a page was turned before it was read: ``quarter`` clockwise quarter turns, then
    ``skew`` more degrees clockwise (small; positive sets a counterclockwise slope level)."""

    quarter: int = 0
    skew: float = 0.0

    def apply(self, image: Image.Image) -> Image.Image:
        """``image`` turned: quarter turns losslessly, then the skew on a white background."""
        # Pillow's transposes turn counterclockwise: a clockwise quarter turn is its ROTATE_270.
        transposes = {
            1: Image.Transpose.ROTATE_270,
            2: Image.Transpose.ROTATE_180,
            3: Image.Transpose.ROTATE_90,
        }
        turned = image.transpose(transposes[self.quarter % 4]) if self.quarter % 4 else image
        if self.skew:
            white = 255 if turned.mode in ("1", "L") else (255,) * len(turned.getbands())
            turned = turned.rotate(
                -self.skew, resample=Image.Resampling.BILINEAR, expand=True, fillcolor=white
            )
        return turned

    def box_to_upload(
        self, box: BoundingBox, upload: tuple[int, int], turned: tuple[int, int]
    ) -> BoundingBox:
        """A box in the turned image's pixels as the upright box around the same ink in the
        upload's pixels (``upload`` and ``turned`` are (width, height) of the two images)."""
        width, height = upload
        # Undo the skew: about the centres, as Pillow's rotate(expand=True) turned it.
        quarter_size = (height, width) if self.quarter % 2 else (width, height)
        left, top, right, bottom = box.left, box.top, box.right, box.bottom
        if self.skew:
            angle = math.radians(self.skew)
            cos, sin = math.cos(angle), math.sin(angle)
            cx, cy = turned[0] / 2, turned[1] / 2
            qx, qy = quarter_size[0] / 2, quarter_size[1] / 2
            xs, ys = [], []
            for x, y in ((left, top), (right, top), (right, bottom), (left, bottom)):
                dx, dy = x - cx, y - cy
                xs.append(qx + dx * cos + dy * sin)
                ys.append(qy - dx * sin + dy * cos)
            left, top = math.floor(min(xs)), math.floor(min(ys))
            right, bottom = math.ceil(max(xs)), math.ceil(max(ys))
        # Undo the quarter turns (edges as coordinates; right/bottom exclusive).
        quarter = self.quarter % 4
        if quarter == 1:
            left, top, right, bottom = top, height - right, bottom, height - left
        elif quarter == 2:
            left, top, right, bottom = width - right, height - bottom, width - left, height - top
        elif quarter == 3:
            left, top, right, bottom = width - bottom, left, width - top, right
        return BoundingBox(
            max(left, 0), max(top, 0), min(max(right, 1), width), min(max(bottom, 1), height)
        )


@dataclass(frozen=True)
class Reading:
    """One reading of a page: its lines (boxes in the upload's pixels) and how it was turned."""

    lines: list[Line]
    turn: Turn = Turn()
    # A turned reading kept: the points of mean word confidence it gained over the reading it
    # replaced (the page as it lay), which the reply reports as the turn's confidence.
    gain: float | None = None

    @property
    def words(self) -> list[Word]:
        return [w for line in self.lines for w in line.words]

    @property
    def confidence(self) -> float:
        """Mean confidence of the words (0-100); 0 for a page without words."""
        confidences = [w.confidence for w in self.words if w.confidence is not None]
        return statistics.fmean(confidences) if confidences else 0.0

    @property
    def score(self) -> float:
        """Which of two readings of one page to keep: the letters of words that look like
        words, each weighted by its word's confidence. Letters rather than words, so a word
        broken in two across a sloping line does not count twice."""
        return sum(
            (w.confidence or 0) / 100 * len(w.text)
            for w in self.words
            if _WORDLIKE.fullmatch(w.text)
        )

    def unreadable(self) -> bool:
        return len(self.words) >= MIN_WORDS and self.confidence < CONFIDENCE_FLOOR


def slope_degrees(lines: list[Line]) -> float | None:
    """How far the text lines slope, in degrees clockwise to set them level (positive: they
    rise to the right); None when too few lines show it. The median of each line's slope,
    fitted through its words' box centres."""
    slopes = []
    for line in lines:
        boxes = [w.box for w in line.words if w.box is not None]
        if len(boxes) < 3:
            continue
        xs = [(b.left + b.right) / 2 for b in boxes]
        ys = [(b.top + b.bottom) / 2 for b in boxes]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        if spread <= 0:
            continue
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        slopes.append(-math.degrees(math.atan(slope)))
    # One line is enough when it is all there is (a two-line page skewed 4° read as one line).
    if not slopes or (len(slopes) == 1 and len(lines) > 2):
        return None
    return statistics.median(slopes)


def read_sideways(lines: list[Line]) -> int:
    """0, or the clockwise turn Tesseract read the page at by itself: its words stand on end
    (taller than wide) and follow each other top to bottom (270) or bottom to top (90)."""
    standing = lying = down = up = 0
    for line in lines:
        boxes = [w.box for w in line.words if w.box is not None and len(w.text) >= 3]
        for box in boxes:
            tall = box.bottom - box.top > box.right - box.left
            standing, lying = standing + tall, lying + (not tall)
        for first, second in pairwise(boxes):
            down, up = down + (second.top > first.top), up + (second.top < first.top)
    if standing <= 2 * lying or standing < MIN_WORDS:
        return 0
    return 270 if down >= up else 90


def ink_angle(page: PageImage) -> float | None:
    """The angle of the page's text lines from its ink alone, in degrees clockwise to set them
    level, [-90, 90); None for a page without ink. For a page whose first reading found next
    to nothing: at 3.5-5° of skew Tesseract read some whole pages as pictures, no words at all.

    The projection profile: the ink's rows are summed along each candidate angle, and where
    the lines lie level the sums are sharpest (largest sum of squares). On a copy at most
    ``PROFILE_SIDE`` pixels long: ~0.1 s for a 300 dpi page.
    """
    with Image.open(page.path) as image:
        if getattr(image, "n_frames", 1) > 1:
            image.seek(page.index)
        # JPEG: decode a quarter (never asking for 0 pixels: Pillow divides by the size).
        image.draft("L", (max(1, image.width // 4), max(1, image.height // 4)))
        shade = grey(image)
        factor = max(1, round(max(shade.size) / PROFILE_SIDE))
        pixels = np.asarray(shade.reduce(factor) if factor > 1 else shade)
    ys, xs = np.nonzero(pixels < 128)
    if len(xs) < 100:
        return None
    if len(xs) > PROFILE_POINTS:
        picked = np.random.default_rng(0).choice(len(xs), PROFILE_POINTS, replace=False)
        ys, xs = ys[picked], xs[picked]
    xs, ys = xs - xs.mean(), ys - ys.mean()

    def sharpness(degrees: float) -> float:
        angle = math.radians(degrees)
        rows = ys * math.cos(angle) - xs * math.sin(angle)
        counts = np.bincount((rows - rows.min()).astype(np.int64))
        return float(np.square(counts, dtype=np.float64).sum())

    coarse = [*np.arange(-SKEW_MAX_DEGREES, SKEW_MAX_DEGREES + 0.1, 0.5),
              *np.arange(90 - SKEW_MAX_DEGREES, 90 + SKEW_MAX_DEGREES + 0.1, 0.5)]  # fmt: skip
    best = max(coarse, key=sharpness)
    best = max(np.arange(best - 0.5, best + 0.51, 0.1), key=sharpness)
    # A line turned clockwise slopes down to the right; turning it back is counterclockwise.
    level = -float(best)
    return round((level + 90) % 180 - 90, 1)


def osd_quarter(path: Path, deadline: float) -> int:
    """Clockwise quarter turns Tesseract's OSD says the page at ``path`` needs (0 when it is
    unsure or cannot tell). Run through the CLI (``--psm 0``): only for pages that read badly."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise EngineTimeout("the request timed out before the page's orientation was found")
    try:
        osd = run_tesseract(path, ["--psm", "0"], remaining)
    except (TesseractFailed, TesseractMissing, OSError):
        return 0  # too little text to tell ("Too few characters"), or no CLI: keep as read
    except TesseractTimedOut as exc:
        raise EngineTimeout("finding the page's orientation took too long") from exc
    fields = dict(
        (key.strip(), value.strip())
        for key, _, value in (row.partition(":") for row in osd.splitlines())
    )
    try:
        rotate, confidence = int(fields["Rotate"]), float(fields["Orientation confidence"])
    except (KeyError, ValueError):
        return 0
    return rotate // 90 % 4 if confidence >= OSD_MIN_CONFIDENCE else 0


Reader = Callable[[PageImage], list[Line]]


def read_upright(read: Reader, page: PageImage, deadline: float) -> Reading:
    """Read ``page`` with ``read`` as it is, then turned if that reading shows it was not
    upright (see the module's docstring); boxes always in the upload's pixels. At most three
    readings: as it is, turned, and (when turned a quarter and still askew) set level."""
    first = Reading(read(page))
    kept = first  # what a turn must beat (keeps_turn)
    turn: Turn | None = None
    if min(page.width, page.height) < ROTATE_MIN_SIDE:
        return first
    if len(first.words) < MIN_WORDS:
        turn = turn_from_ink(page, deadline, upside_down=False)
    elif first.unreadable():
        quarter = osd_quarter(page.path, deadline)
        # OSD unsure (it missed a 3°-skewed italic page turned 183°): the ink's lines decide.
        # Sure, the ink still gives the skew to take out in the same turn (~0.1 s): read turned
        # but askew, a two-line page lost one of its lines.
        turn = turn_from_ink(page, deadline, upside_down=True, quarter=quarter or None)
    else:
        sideways = read_sideways(first.lines)
        if sideways:
            # Read by Tesseract on its own; set level first if its lines slope as they stand.
            quarter = sideways // 90
            slope = slope_degrees(_turned_lines(first.lines, quarter, (page.width, page.height)))
            kept = Reading(first.lines, Turn(quarter))
            if slope is None or not SKEW_MIN_DEGREES <= abs(slope) <= SKEW_MAX_DEGREES:
                return kept
            turn = Turn(quarter, round(slope, 1))
        else:
            slope = slope_degrees(first.lines)
            if slope is not None and SKEW_MIN_DEGREES <= abs(slope) <= SKEW_MAX_DEGREES:
                turn = Turn(0, round(slope, 1))
    if turn is None:
        return first
    second = read_turned(read, page, turn)
    if turn.quarter and not turn.skew and not second.unreadable():
        # Turned upright, the page may still be askew: set it level too, once.
        slope = slope_degrees(second.lines)
        if slope is not None and SKEW_MIN_DEGREES <= abs(slope) <= SKEW_MAX_DEGREES:
            level = read_turned(read, page, replace(turn, skew=round(slope, 1)))
            second = level if level.score >= KEEP_TURNED * second.score else second
    if not keeps_turn(kept, second):
        return kept
    return replace(second, gain=round(second.confidence - kept.confidence, 1))


def keeps_turn(first: Reading, turned: Reading) -> bool:
    """Whether ``turned`` should replace ``first``, the reading of the page as it lay (or as
    Tesseract read it on its own): turned by other quarters only when it reads clearly better
    (``TURN_CONFIDENCE_MARGIN``), only set level unless it reads clearly worse
    (``KEEP_TURNED``)."""
    if (turned.turn.quarter - first.turn.quarter) % 4:
        return (
            turned.confidence >= first.confidence + TURN_CONFIDENCE_MARGIN
            and turned.score > first.score
        )
    return turned.score >= KEEP_TURNED * first.score


def _turned_lines(lines: list[Line], quarter: int, upload: tuple[int, int]) -> list[Line]:
    """``lines`` with their boxes as they lie once the page is turned ``quarter`` clockwise
    quarter turns (the inverse of ``Turn.box_to_upload`` without skew)."""
    width, height = upload

    def forward(box: BoundingBox) -> BoundingBox:
        if quarter == 1:
            return BoundingBox(height - box.bottom, box.left, height - box.top, box.right)
        if quarter == 3:
            return BoundingBox(box.top, width - box.right, box.bottom, width - box.left)
        return BoundingBox(
            width - box.right, height - box.bottom, width - box.left, height - box.top
        )

    return [
        replace(
            line, words=tuple(replace(w, box=forward(w.box)) if w.box else w for w in line.words)
        )
        for line in lines
    ]


def turn_from_ink(
    page: PageImage, deadline: float, *, upside_down: bool, quarter: int | None = None
) -> Turn | None:
    """How to turn a page from its ink's lines when its words cannot say (too few of them, or
    garbage OSD could not place): lines up and down the page are turned a quarter (the way
    OSD says, else clockwise), level ones half a turn when ``upside_down``; and any skew
    worth it set level in the same turn. ``quarter``: OSD's answer, already known."""
    angle = ink_angle(page)
    if angle is None:
        return Turn(quarter) if quarter else None
    if quarter is not None:
        skew = (angle + 45) % 90 - 45  # what is left once turned by whole quarters
    elif abs(angle) > 45:  # the lines run up and down the page
        quarter = osd_quarter(page.path, deadline)
        skew = angle % 180 - 90  # what is left once turned a quarter either way
        quarter = quarter if quarter % 2 else 1
    else:
        quarter, skew = (2 if upside_down else 0), angle
    skew = round(skew, 1) if abs(skew) >= SKEW_MIN_DEGREES else 0.0
    return Turn(quarter, skew) if quarter or skew else None


def read_turned(read: Reader, page: PageImage, turn: Turn) -> Reading:
    """Read ``page`` turned by ``turn`` from a file written beside it, deleted afterwards.

    The turned copy is grey (Tesseract reads a page in grey anyway): a 300 dpi colour page
    turned and set level would otherwise hold ~80 MB of pixels at once, in grey ~27 MB.
    """
    target = page.path.with_name(f"page-{page.index}-turned.pnm")
    with Image.open(page.path) as image:
        if getattr(image, "n_frames", 1) > 1:
            image.seek(page.index)
        upright = turn.apply(image if image.mode in ("1", "L") else grey(image))
    try:
        upright.save(target, format="PPM")
        size = upright.size
        del upright
        trim_heap()  # the pixels just freed, before Tesseract's own peak stands on them
        lines = read(PageImage(page.index, target, size[0], size[1], derived=True, dpi=page.dpi))
    finally:
        target.unlink(missing_ok=True)
    upload = (page.width, page.height)
    return Reading([_boxes_to_upload(line, turn, upload, size) for line in lines], turn)


def _boxes_to_upload(
    line: Line, turn: Turn, upload: tuple[int, int], turned: tuple[int, int]
) -> Line:
    words = tuple(
        replace(w, box=turn.box_to_upload(w.box, upload, turned)) if w.box else w
        for w in line.words
    )
    return replace(line, words=words)


def in_upload_pixels(lines: list[Line], page: PageImage) -> list[Line]:
    """``lines`` read on ``page``, their boxes in the upload's pixels (``page`` decoded or
    drawn scaled down past EXTRACTOR_OCR_MAX_PIXELS: ``media.images``, ``media.pdfrender``)."""
    width, height = page.shown_size
    if (width, height) == (page.width, page.height):
        return lines
    across, down = width / page.width, height / page.height

    def box(b: BoundingBox) -> BoundingBox:
        return BoundingBox(
            left=int(b.left * across), top=int(b.top * down),
            right=min(math.ceil(b.right * across), width),
            bottom=min(math.ceil(b.bottom * down), height),
        )  # fmt: skip

    return [
        replace(line, words=tuple(replace(w, box=box(w.box)) if w.box else w for w in line.words))
        for line in lines
    ]
