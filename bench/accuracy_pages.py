"""Pages to read, rendered from prose nobody wrote for this: the license texts every Debian
system ships in ``/usr/share/common-licenses`` (package base-files: GPL-3, Apache-2.0,
MPL-2.0), checked by sha256 so a figure always means the same words.

Each page is a few paragraphs set in one font and size at one resolution, then scanned the way
real scans come back: turned 90/180/270 degrees or skewed a few degrees, slightly blurred,
speckled with noise and/or saved as JPEG. The fonts are Debian's DejaVu (fonts-dejavu-core) and
Liberation (fonts-liberation2: metric twins of Times and Arial), both in ``make install-dev``.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

LICENSES = Path("/usr/share/common-licenses")
LICENSE_SHA256 = {
    "GPL-3": "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    "Apache-2.0": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "MPL-2.0": "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85",
}
FONTS = {
    "DejaVu Serif": "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    "DejaVu Sans": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "DejaVu Sans Mono": "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
    "DejaVu Serif Condensed": "/usr/share/fonts/truetype/dejavu/DejaVuSerifCondensed.ttf",
    "Liberation Serif": "/usr/share/fonts/truetype/liberation2/LiberationSerif-Regular.ttf",
    "Liberation Sans": "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
}
PAGE_WIDTH = 8.27  # inches (A4)
MARGIN = 1.0  # inches on every side
PAGE_CHARACTERS = 650  # prose per page: whole paragraphs until at least this many characters


@dataclass(frozen=True)
class PageStyle:
    """How one page is set and scanned."""

    name: str
    source: str  # a file in LICENSES
    paragraph: int  # the first paragraph (of those long enough to be prose) on the page
    font: str  # a key of FONTS
    points: float
    dpi: int
    blur: float = 0.0  # Gaussian radius in pixels
    noise: float = 0.0  # standard deviation of added Gaussian noise, in grey levels
    jpeg: int | None = None  # JPEG quality; None: PNG

    @property
    def label(self) -> str:
        scan = [
            f"blur {self.blur}" if self.blur else "",
            f"noise {self.noise:g}" if self.noise else "",
        ]
        scan.append(f"JPEG q{self.jpeg}" if self.jpeg else "PNG")
        return f"{self.font} {self.points:g} pt, {self.dpi} dpi, " + ", ".join(s for s in scan if s)


# Six pages: three texts, six fonts, 9-14 pt, 200-300 dpi, each with its own scan defects.
STYLES = (
    PageStyle("serif-11", "Apache-2.0", 3, "DejaVu Serif", 11, 300, noise=6),
    PageStyle("sans-10", "GPL-3", 10, "DejaVu Sans", 10, 200, blur=0.7, jpeg=70),
    PageStyle("mono-10", "MPL-2.0", 8, "DejaVu Sans Mono", 10, 250, noise=5, jpeg=85),
    PageStyle("times-12", "GPL-3", 30, "Liberation Serif", 12, 300, blur=0.6, noise=4),
    PageStyle("arial-9", "Apache-2.0", 9, "Liberation Sans", 9, 240, jpeg=60),
    PageStyle("serif-cond-14", "MPL-2.0", 12, "DejaVu Serif Condensed", 14, 200, blur=0.5, noise=8),
)
# How the page lies on the scanner: degrees counter-clockwise (PIL's rotate).
TURNS = {"upright": 0.0, "90": 90.0, "180": 180.0, "270": 270.0, "skew +2.5": 2.5, "skew -4": -4.0}


@dataclass(frozen=True)
class Page:
    style: PageStyle
    turn: str  # a key of TURNS
    text: str  # what is printed, paragraphs joined by a blank line
    data: bytes  # the scan as uploaded (PNG or JPEG)

    @property
    def filename(self) -> str:
        turn = self.turn.replace(" ", "").replace("+", "p").replace("-", "m")
        return f"{self.style.name}-{turn}.{'jpg' if self.style.jpeg else 'png'}"


@cache
def paragraphs(source: str) -> tuple[str, ...]:
    """The prose paragraphs of a license text (headings and short items left out), reflowed."""
    path = LICENSES / source
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != LICENSE_SHA256[source]:
        raise RuntimeError(f"{path}: sha256 {digest}, pinned {LICENSE_SHA256[source]}")
    found = []
    for block in data.decode().split("\n\n"):
        text = " ".join(block.split())
        letters = sum(c.isalpha() or c.isspace() for c in text)
        if len(text) >= 250 and letters / len(text) > 0.9:
            found.append(text)
    return tuple(found)


def page_text(style: PageStyle) -> str:
    chosen: list[str] = []
    for paragraph in paragraphs(style.source)[style.paragraph :]:
        chosen.append(paragraph)
        if sum(len(p) for p in chosen) >= PAGE_CHARACTERS:
            break
    return "\n\n".join(chosen)


def render(style: PageStyle) -> Image.Image:
    """The page upright and clean: black text on white, greyscale, at ``style.dpi``."""
    path = FONTS[style.font]
    if not Path(path).is_file():
        raise RuntimeError(f"font {path} missing: make install-dev installs it")
    font = ImageFont.truetype(path, round(style.points * style.dpi / 72))
    column = (PAGE_WIDTH - 2 * MARGIN) * style.dpi
    lines: list[str] = []
    for paragraph in page_text(style).split("\n\n"):
        lines += [*_wrap(paragraph, font, column), ""]
    ascent, descent = font.getmetrics()
    step = round((ascent + descent) * 1.2)
    margin = round(MARGIN * style.dpi)
    height = 2 * margin + step * len(lines)
    image = Image.new("L", (round(PAGE_WIDTH * style.dpi), height), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((margin, margin + number * step), line, font=font, fill=0)
    return image


def _wrap(paragraph: str, font: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Words on lines no wider than ``width`` pixels (no hyphenation, as the text has none)."""
    lines: list[str] = []
    for word in paragraph.split():
        if lines and font.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def scan(image: Image.Image, style: PageStyle, degrees: float, seed: int) -> bytes:
    """The page as a scanner returns it: turned, blurred, noisy, encoded."""
    if degrees % 90 == 0:  # exact quarter turns, as a page put in sideways
        turned = image.rotate(degrees, expand=True)
    else:
        turned = image.rotate(degrees, Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    if style.blur:
        turned = turned.filter(ImageFilter.GaussianBlur(style.blur))
    if style.noise:
        rng = np.random.default_rng(seed)
        pixels = np.asarray(turned, np.float32) + rng.normal(0, style.noise, turned.size[::-1])
        turned = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    if style.jpeg:
        turned.save(out, "JPEG", quality=style.jpeg, dpi=(style.dpi, style.dpi))
    else:
        turned.save(out, "PNG", dpi=(style.dpi, style.dpi))
    return out.getvalue()


def pages(
    styles: tuple[PageStyle, ...] = STYLES, turns: tuple[str, ...] = tuple(TURNS)
) -> list[Page]:
    """Every style in every turn, each render the same on every run (seeded noise)."""
    made = []
    for number, style in enumerate(styles):
        upright = render(style)
        text = page_text(style)
        for turn in turns:
            data = scan(upright, style, TURNS[turn], seed=number)
            made.append(Page(style, turn, text, data))
    return made


def describe(styles: tuple[PageStyle, ...] = STYLES) -> str:
    """One line per page style, for the report."""
    return "\n".join(
        f"- `{s.name}`: {s.label}; {s.source}, from its paragraph {s.paragraph}"
        f" ({len(page_text(s))} characters)"
        for s in styles
    )


__all__ = ["STYLES", "TURNS", "Page", "PageStyle", "describe", "pages"]
