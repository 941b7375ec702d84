"""Every reply format, defined once: its name, media type, the documents it fits, its renderer.

Negotiation (``negotiate.py``), the CLI's ``--format``, the ``default_format`` setting's choices
and the OpenAPI document's ``format`` enum all come from ``FORMATS`` (a test fails when the
OpenAPI file disagrees). Adding a format is one entry here, its renderer beside it, and a test.

The page-layout formats (hOCR, ALTO, TSV) are rendered from the same ``Document`` as the JSON,
so they carry the words and boxes of the one Tesseract run, whichever OCR backend made it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from html import escape
from itertools import groupby
from typing import Any

from extractor.errors import NotAcceptable
from extractor.replies.importable import (
    BoundingBox,
    Document,
    DocumentKind,
    Line,
    Page,
    Word,
    to_importable,
    to_srt,
    to_text,
    to_vtt,
)
from extractor.replies.spool import SpooledLines

# A JSON object is validated (EXTRACTOR_VALIDATE_REPLIES) and serialized by the pipeline; text
# is sent as it is.
Body = str | dict[str, Any]
OCR = frozenset({DocumentKind.OCR})
AUDIO = frozenset({DocumentKind.AUDIO})
EVERY_KIND = frozenset(DocumentKind)


@dataclass(frozen=True)
class ReplyFormat:
    """One way to answer: chosen by ``?format=<name>`` or by ``Accept: <media type>``."""

    name: str  # the ?format= value and the CLI's --format choice
    media_type: str  # the reply's Content-Type
    kinds: frozenset[DocumentKind]  # the documents it can render; others: 400 (?format=) or 406
    render: Callable[[Document], Body] = field(repr=False, compare=False)
    summary: str = field(default="", compare=False)  # what the OpenAPI file says it holds
    # Drawn over the upload's page images (replies.pdf), which the Document does not hold:
    # rendered only where the upload is at hand (pipeline.reply), never by ``render``.
    scanned: bool = False

    @property
    def essence(self) -> str:
        """The media type without parameters, as Accept and the OpenAPI file name it."""
        return self.media_type.split(";")[0].strip()

    def fits(self, kind: DocumentKind) -> bool:
        return kind in self.kinds


# -- hOCR, ALTO and TSV: the page layout of an OCR document -------------------------------


@dataclass(frozen=True)
class _Paragraph:
    number: int  # 1-based within its block
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class _Block:
    number: int  # 1-based within its page
    paragraphs: tuple[_Paragraph, ...]


def _union(boxes: Iterator[BoundingBox]) -> BoundingBox:
    first, *rest = boxes
    left, top, right, bottom = first.left, first.top, first.right, first.bottom
    for box in rest:
        left, top = min(left, box.left), min(top, box.top)
        right, bottom = max(right, box.right), max(bottom, box.bottom)
    return BoundingBox(left, top, right, bottom)


def _boxed(line: Line) -> list[tuple[Word, BoundingBox]]:
    """The line's words that have a box, each with it (the layouts leave the others out)."""
    return [(word, word.box) for word in line.words if word.box is not None]


def _line_box(line: Line) -> BoundingBox:
    return _union(box for _word, box in _boxed(line))


def _paragraph_box(paragraph: _Paragraph) -> BoundingBox:
    return _union(_line_box(line) for line in paragraph.lines)


def _percent(word: Word) -> float | None:
    """The word's confidence within 0-100 (an engine may stray past either end), or None."""
    return None if word.confidence is None else min(max(word.confidence, 0.0), 100.0)


def _block_box(block: _Block) -> BoundingBox:
    return _union(_paragraph_box(paragraph) for paragraph in block.paragraphs)


def _layout(document: Document) -> Iterator[tuple[Page, tuple[_Block, ...]]]:
    """Each page with its lines grouped into blocks and paragraphs, numbered as Tesseract does.

    Lines keep the engine's reading order; consecutive lines with the same block and paragraph
    numbers form one paragraph. An engine that gives no numbers makes one block per page.
    """
    for page, on_page in page_lines(document):
        lines = [line for line in on_page if any(w.box is not None for w in line.words)]
        blocks = []
        for b, (_block, in_block) in enumerate(groupby(lines, key=lambda ln: ln.block), start=1):
            paragraphs = tuple(
                _Paragraph(p, tuple(group))
                for p, (_par, group) in enumerate(
                    groupby(in_block, key=lambda ln: ln.paragraph), start=1
                )
            )
            blocks.append(_Block(b, paragraphs))
        yield page, tuple(blocks)


def page_lines(document: Document) -> Iterator[tuple[Page, Sequence[Line]]]:
    """Each page with its lines: a spooled document's read a page at a time (its spool holds
    one entry per page, in order), another's grouped by ``page_index``."""
    if isinstance(document.lines, SpooledLines):
        yield from zip(document.pages, document.lines.pages(), strict=True)
        return
    by_page: dict[int, list[Line]] = {}
    for line in document.lines:
        by_page.setdefault(line.page_index or 0, []).append(line)
    for page in document.pages:
        yield page, by_page.get(page.index, [])


def _bbox(box: BoundingBox) -> str:
    return f"bbox {box.left} {box.top} {box.right} {box.bottom}"


def hocr_pieces(document: Document) -> Iterator[str]:
    """hOCR 1.2 (XHTML): ``ocr_page`` > ``ocr_carea`` > ``ocr_par`` > ``ocr_line`` >
    ``ocrx_word``, each with a ``bbox`` in page pixels, words with ``x_wconf`` (0-100)."""
    yield (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"'
        ' "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml">\n <head>\n'
        f"  <title>{escape(document.name)}</title>\n"
        '  <meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>\n'
        '  <meta name="ocr-system" content="extractor (tesseract)"/>\n'
        '  <meta name="ocr-capabilities"'
        ' content="ocr_page ocr_carea ocr_par ocr_line ocrx_word ocrp_wconf"/>\n'
        " </head>\n <body>\n"
    )
    counts = {"block": 0, "par": 0, "line": 0, "word": 0}

    def ident(kind: str, page: Page) -> str:
        counts[kind] += 1
        return f"{kind}_{page.index + 1}_{counts[kind]}"

    for page, blocks in _layout(document):
        # A page read turned: its lines lie at this angle in the upload (Tesseract's own hOCR
        # says so the same way, on the lines it reads as vertical).
        angle = f"; textangle {page.text_angle:g}" if page.text_angle else ""
        title = escape(f'image "{document.name}"; bbox 0 0 {page.width} {page.height}', True)
        yield (
            f'  <div class="ocr_page" id="page_{page.index + 1}"'
            f' title="{title}; ppageno {page.index}">\n'
        )
        for block in blocks:
            box = _bbox(_block_box(block))
            yield (f'   <div class="ocr_carea" id="{ident("block", page)}" title="{box}">\n')
            for paragraph in block.paragraphs:
                box = _bbox(_paragraph_box(paragraph))
                yield (f'    <p class="ocr_par" id="{ident("par", page)}" title="{box}">\n')
                for line in paragraph.lines:
                    box = _bbox(_line_box(line)) + angle
                    yield (f'     <span class="ocr_line" id="{ident("line", page)}" title="{box}">')
                    words = []
                    for word, word_box in _boxed(line):
                        percent = _percent(word)
                        conf = "" if percent is None else f"; x_wconf {round(percent)}"
                        words.append(
                            f'<span class="ocrx_word" id="{ident("word", page)}"'
                            f' title="{_bbox(word_box)}{conf}">{escape(word.text)}</span>'
                        )
                    yield (" ".join(words) + "</span>\n")
                yield ("    </p>\n")
            yield ("   </div>\n")
        yield ("  </div>\n")
    yield (" </body>\n</html>\n")


def to_hocr(document: Document) -> str:
    """The whole of ``hocr_pieces``."""
    return "".join(hocr_pieces(document))


ALTO_NAMESPACE = "http://www.loc.gov/standards/alto/ns-v4#"
ALTO_SCHEMA = "http://www.loc.gov/standards/alto/v4/alto-4-2.xsd"


def _position(box: BoundingBox) -> str:
    return (
        f'HPOS="{box.left}" VPOS="{box.top}"'
        f' WIDTH="{box.right - box.left}" HEIGHT="{box.bottom - box.top}"'
    )


def alto_pieces(document: Document) -> Iterator[str]:
    """ALTO 4.2 XML in pixels: a ``Page`` per page, a ``TextBlock`` per Tesseract paragraph
    (ALTO has no paragraphs), ``TextLine``s of ``String``s with ``WC`` (0-1) and ``SP``s."""
    yield (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<alto xmlns="{ALTO_NAMESPACE}" xmlns:xlink="http://www.w3.org/1999/xlink"'
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
        f' xsi:schemaLocation="{ALTO_NAMESPACE} {ALTO_SCHEMA}">\n'
        " <Description>\n  <MeasurementUnit>pixel</MeasurementUnit>\n"
        "  <sourceImageInformation>\n"
        f"   <fileName>{escape(document.name)}</fileName>\n"
        "  </sourceImageInformation>\n"
        ' <OCRProcessing ID="ocr_1"><ocrProcessingStep><processingSoftware>'
        "<softwareName>extractor (tesseract)</softwareName>"
        "</processingSoftware></ocrProcessingStep></OCRProcessing>\n"
        " </Description>\n <Layout>\n"
    )
    for page, blocks in _layout(document):
        p = page.index + 1
        whole = BoundingBox(0, 0, page.width, page.height)
        yield (
            f'  <Page ID="page_{p}" PHYSICAL_IMG_NR="{p}"'
            f' WIDTH="{page.width}" HEIGHT="{page.height}">\n'
            f"   <PrintSpace {_position(whole)}>\n"
        )
        line_number = word_number = 0
        # ALTO's ROTATION (degrees counterclockwise) is a block's: the page's text lies at it.
        rotation = f' ROTATION="{page.text_angle:g}"' if page.text_angle else ""
        for block in blocks:
            for paragraph in block.paragraphs:
                box = _paragraph_box(paragraph)
                yield (
                    f'    <TextBlock ID="block_{p}_{block.number}_{paragraph.number}"'
                    f" {_position(box)}{rotation}>\n"
                )
                for line in paragraph.lines:
                    line_number += 1
                    yield (
                        f'     <TextLine ID="line_{p}_{line_number}" {_position(_line_box(line))}>'
                    )
                    previous: BoundingBox | None = None
                    for word, word_box in _boxed(line):
                        if previous is not None:
                            gap = max(word_box.left - previous.right, 0)
                            yield (
                                f'<SP WIDTH="{gap}" HPOS="{previous.right}" VPOS="{previous.top}"/>'
                            )
                        word_number += 1
                        percent = _percent(word)
                        wc = "" if percent is None else f' WC="{percent / 100:.2f}"'
                        yield (
                            f'<String ID="string_{p}_{word_number}" {_position(word_box)}{wc}'
                            f' CONTENT="{escape(word.text, True)}"/>'
                        )
                        previous = word_box
                    yield ("</TextLine>\n")
                yield ("    </TextBlock>\n")
        yield ("   </PrintSpace>\n  </Page>\n")
    yield (" </Layout>\n</alto>\n")


def to_alto(document: Document) -> str:
    """The whole of ``alto_pieces``."""
    return "".join(alto_pieces(document))


TSV_COLUMNS = (
    "level", "page_num", "block_num", "par_num", "line_num", "word_num",
    "left", "top", "width", "height", "conf", "text",
)  # fmt: skip


def tsv_pieces(document: Document) -> Iterator[str]:
    """Tesseract's TSV layout (``tesseract FILE - tsv``): one row per page (level 1), block
    (2), paragraph (3), line (4) and word (5), numbered from 1 within their parent; ``conf``
    is -1 except on words. Tabs and newlines inside a word become spaces."""
    yield "\t".join(TSV_COLUMNS)

    def row(level: int, numbers: tuple[int, ...], box: BoundingBox, conf: str, text: str) -> str:
        padded = (*numbers, 0, 0, 0, 0, 0)[:5]
        width, height = box.right - box.left, box.bottom - box.top
        cells = (level, *padded, box.left, box.top, width, height, conf, text)
        return "\n" + "\t".join(str(c) for c in cells)

    for page, blocks in _layout(document):
        p = page.index + 1
        yield row(1, (p,), BoundingBox(0, 0, page.width, page.height), "-1", "")
        for block in blocks:
            b = block.number
            yield row(2, (p, b), _block_box(block), "-1", "")
            for paragraph in block.paragraphs:
                par = paragraph.number
                yield row(3, (p, b, par), _paragraph_box(paragraph), "-1", "")
                for n, line in enumerate(paragraph.lines, start=1):
                    yield row(4, (p, b, par, n), _line_box(line), "-1", "")
                    for k, (word, word_box) in enumerate(_boxed(line), start=1):
                        conf = "-1" if word.confidence is None else f"{word.confidence:.6f}"
                        text = " ".join(word.text.split())
                        yield row(5, (p, b, par, n, k), word_box, conf, text)
    yield "\n"


def to_tsv(document: Document) -> str:
    """The whole of ``tsv_pieces``."""
    return "".join(tsv_pieces(document))


def _needs_the_pages(document: Document) -> Body:
    raise NotAcceptable(
        f"format=pdf draws each page's image, which {document.name!r} no longer has here:"
        " ask for it with the upload (POST /extract, or a job submitted with format=pdf)"
    )


# -- the registry -------------------------------------------------------------------------

# Order matters: a wildcard Accept (``text/*``) that several formats match equally goes to the
# first of them, so the long-standing ones come first.
FORMATS: dict[str, ReplyFormat] = {
    f.name: f
    for f in (
        ReplyFormat("json", "application/json", EVERY_KIND, to_importable,
                    "The Importable JSON object."),
        ReplyFormat("text", "text/plain; charset=utf-8", EVERY_KIND, to_text,
                    "One line per text line; audio lines may start with `Speaker N:`."),
        ReplyFormat("vtt", "text/vtt; charset=utf-8", AUDIO, to_vtt,
                    "WebVTT subtitles, one cue per transcript segment (audio only)."),
        ReplyFormat("srt", "application/x-subrip; charset=utf-8", AUDIO, to_srt,
                    "SubRip subtitles, one cue per transcript segment (audio only)."),
        ReplyFormat("hocr", "text/vnd.hocr+html; charset=utf-8", OCR, to_hocr,
                    "hOCR (XHTML): pages, blocks, paragraphs, lines and words with their"
                    " boxes (images and PDFs only)."),
        ReplyFormat("alto", "application/alto+xml; charset=utf-8", OCR, to_alto,
                    "ALTO 4 XML in pixels: blocks, lines and words with their boxes (images"
                    " and PDFs only)."),
        ReplyFormat("tsv", "text/tab-separated-values; charset=utf-8", OCR, to_tsv,
                    "Tesseract's TSV: a row per page, block, paragraph, line and word with"
                    " its box and confidence (images and PDFs only)."),
        ReplyFormat("pdf", "application/pdf", OCR, _needs_the_pages,
                    "A searchable PDF: each page's image with the recognised words invisible"
                    " at their boxes, PDF/A-2b (images and PDFs only).", scanned=True),
    )
}  # fmt: skip
JSON = FORMATS["json"]
# A default must fit every document: a subtitle format cannot answer for an image.
DEFAULT_CHOICES = tuple(name for name, f in FORMATS.items() if f.kinds == EVERY_KIND)


def formats_for(kind: DocumentKind) -> list[ReplyFormat]:
    """The formats a document of ``kind`` can be answered in, in registry order."""
    return [f for f in FORMATS.values() if f.fits(kind)]
