"""The searchable PDF reply: each page's image with the recognised words invisible over it.

Written a page at a time into a file (``write_searchable_pdf``): a page's image (a JPEG,
``DCTDecode``) drawn to the page's size, then the page's lines of the ``Document`` in order, one
text line each, every word placed at its box in text render mode 3 (invisible) and stretched
(``Tz``) to the box's width, so a viewer selects and searches it where it is printed and
``pdftotext`` reads the lines in the reply's order (a page read turned has its text turned
with it). Only one page's image is ever in memory; the objects every page
shares (fonts, the page tree, the character map) are written after the last page.

Words Windows-1252 can spell use Helvetica (a standard font, nothing embedded); any other word
uses a Type0 font with ``Identity-H`` codes numbered as characters first appear and a
``ToUnicode`` map back to them, so any script is extracted as it was recognised (its glyphs
are never drawn, so no font program is needed).

The file follows PDF/A-2b: an XMP packet naming the part and level, an sRGB output intent
(LittleCMS's built-in profile, through Pillow), a file identifier, no encryption and nothing
after ``%%EOF``. PDF/A-2 requires every font drawn to be embedded except those used only in
render mode 3, which is all this file's text.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html import escape
from typing import BinaryIO

from PIL import ImageCms

from extractor.replies.formats import page_lines
from extractor.replies.importable import BoundingBox, Document, Line, Page

MAX_POINTS = 14_400  # the largest page side PDF (and PDF/A) allows, in points
DESCENT = 0.2  # of a line box's height below the baseline (Helvetica's descender: 0.207 em)
# Helvetica's advance widths (1/1000 em) of printable ASCII, from its AFM; others: 556.
HELVETICA_WIDTHS = dict(
    zip(
        range(32, 127),
        (
            278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278,
            556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556,
            1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778,
            667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556,
            333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556,
            556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,
        ),
        strict=True,
    )
)  # fmt: skip
CID_WIDTH = 1000  # every code of the Type0 font: its DW


@dataclass(frozen=True)
class PageScan:
    """One page's image, encoded: JPEG bytes, their pixel size and colour components (1 grey,
    3 RGB), and the resolution the page's boxes are in (its size in points follows)."""

    jpeg: bytes
    width: int  # pixels of the JPEG (it may be scaled down from the page's own)
    height: int
    components: int
    dpi: float  # of the Document's page pixels: a box's pixel is 72/dpi points


class _Objects:
    """Numbered objects written to ``out`` as they come, their offsets kept for the xref."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.offsets: dict[int, int] = {}
        self.count = 0
        self.position = 0
        self._write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")  # binary bytes: PDF/A's second line

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.position += len(data)

    def reserve(self) -> int:
        self.count += 1
        return self.count

    def put(self, number: int, body: bytes) -> None:
        self.offsets[number] = self.position
        self._write(b"%d 0 obj\n%s\nendobj\n" % (number, body))

    def stream(self, number: int, entries: bytes, data: bytes) -> None:
        self.put(number, b"<<%s /Length %d>>\nstream\n%s\nendstream" % (entries, len(data), data))

    def finish(self, root: int, identifier: bytes) -> None:
        assert sorted(self.offsets) == list(range(1, self.count + 1)), "an object never written"
        start = self.position
        rows = [b"xref\n0 %d\n0000000000 65535 f \n" % (self.count + 1)]
        rows += [b"%010d 00000 n \n" % self.offsets[n] for n in range(1, self.count + 1)]
        ident = identifier.hex().encode()
        rows.append(
            b"trailer\n<</Size %d /Root %d 0 R /ID [<%s> <%s>]>>\nstartxref\n%d\n%%%%EOF\n"
            % (self.count + 1, root, ident, ident, start)
        )
        self._write(b"".join(rows))


def _number(value: float) -> bytes:
    """A PDF real with at most 3 decimals, no exponent."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return (text if text not in ("", "-0") else "0").encode()


def _literal(data: bytes) -> bytes:
    """A PDF literal string of ``data``; anything but printable ASCII as octal escapes."""
    out = bytearray(b"(")
    for byte in data:
        if byte in b"()\\":
            out += b"\\" + bytes([byte])
        elif 32 <= byte < 127:
            out.append(byte)
        else:
            out += b"\\%03o" % byte
    return bytes(out + b")")


def _winansi(text: str) -> bytes | None:
    """``text`` in Helvetica's encoding (WinAnsi is Windows-1252), or None where it cannot be."""
    if any(ord(ch) < 32 for ch in text):
        return None
    try:
        return text.encode("cp1252")
    except UnicodeEncodeError:
        return None


class _Codes:
    """The Type0 font's codes: one per character, numbered from 1 as characters first appear;
    past 65,534 distinct characters in one document, the rest share the last code (U+FFFD)."""

    LAST = 0xFFFF

    def __init__(self) -> None:
        self.of: dict[str, int] = {}

    def encode(self, text: str) -> bytes:
        codes = bytearray()
        for ch in text:
            code = self.of.get(ch)
            if code is None:
                code = self.LAST
                if len(self.of) < self.LAST - 1:
                    code = self.of[ch] = len(self.of) + 1
            codes += code.to_bytes(2, "big")
        return bytes(codes)

    def to_unicode(self) -> bytes:
        """The ToUnicode CMap of every code handed out."""
        pairs = [
            b"<%04X> <%s>" % (code, ch.encode("utf-16-be").hex().upper().encode())
            for ch, code in self.of.items()
        ]
        pairs.append(b"<FFFF> <FFFD>")
        chunks = [pairs[i : i + 100] for i in range(0, len(pairs), 100)]
        body = b"".join(
            b"%d beginbfchar\n%s\nendbfchar\n" % (len(chunk), b"\n".join(chunk)) for chunk in chunks
        )
        return (
            b"/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
            b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            b"/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
            b"1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n" + body + b"endcmap\n"
            b"CMapName currentdict /CMap defineresource pop\nend\nend\n"
        )


def _shown(text: str, codes: _Codes) -> tuple[bytes, bytes, float]:
    """How to show ``text``: its font's name, the string operand and its width in em."""
    encoded = _winansi(text)
    if encoded is not None:
        width = sum(HELVETICA_WIDTHS.get(byte, 556) for byte in encoded) / 1000
        return b"/F1", _literal(encoded), width
    cids = codes.encode(text)
    return b"/F2", b"<" + cids.hex().encode() + b">", len(cids) // 2 * CID_WIDTH / 1000


def _upright(box: BoundingBox, page: Page) -> BoundingBox:
    """``box`` (the upload's pixels) in the pixels of the page turned upright: turned
    ``page.rotation`` degrees clockwise, as it was read."""
    left, top, right, bottom = box.left, box.top, box.right, box.bottom
    width, height = page.width, page.height
    turn = page.rotation % 360
    if turn == 90:
        return BoundingBox(height - bottom, left, height - top, right)
    if turn == 180:
        return BoundingBox(width - right, height - bottom, width - left, height - top)
    if turn == 270:
        return BoundingBox(top, width - right, bottom, width - left)
    return box


def _turn_back(page: Page, scale: float) -> bytes:
    """The ``cm`` that lays text set on the upright page (points) onto the page as uploaded."""
    width, height = _number(page.width * scale), _number(page.height * scale)
    return {
        90: b"0 1 -1 0 %s 0 cm " % width,
        180: b"-1 0 0 -1 %s %s cm " % (width, height),
        270: b"0 -1 1 0 0 %s cm " % height,
    }.get(page.rotation % 360, b"")


def _text_layer(lines: Iterable[Line], page: Page, scale: float, codes: _Codes) -> bytes:
    """The invisible text of one page's lines: a text line per ``Line``, each word at its box
    (``scale`` points a pixel), followed by a space that reaches the next word's box. A page
    read turned has its text set upright and turned back with it, so each line runs along
    its printed line."""
    sideways = page.rotation % 180 == 90
    page_height = (page.width if sideways else page.height) * scale
    ops = [b"q " + _turn_back(page, scale) + b"BT 3 Tr"]
    for line in lines:
        boxes = [_upright(word.box, page) for word in line.words if word.box is not None]
        texts = [word.text for word in line.words if word.box is not None]
        if not boxes:
            continue
        top = min(box.top for box in boxes)
        bottom = max(box.bottom for box in boxes)
        size = max((bottom - top) * scale, 1.0)
        y = _number(page_height - bottom * scale + DESCENT * size)  # the baseline
        current = b""
        for k, (box, text) in enumerate(zip(boxes, texts, strict=True)):
            last = k == len(boxes) - 1
            right = box.right if last else max(boxes[k + 1].left, box.right)
            font, operand, em = _shown(text if last else text + " ", codes)
            width = max(right - box.left, 1) * scale
            stretch = min(max(100 * width / max(em * size, 1e-3), 0.1), 100_000.0)
            if font != current:
                ops.append(b"%s %s Tf" % (font, _number(size)))
                current = font
            x = _number(box.left * scale)
            ops.append(b"%s Tz 1 0 0 1 %s %s Tm %s Tj" % (_number(stretch), x, y, operand))
    ops.append(b"ET Q")
    return b"\n".join(ops)


def _xmp(title: str) -> bytes:
    return (
        '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
        '<x:xmpmeta xmlns:x="adobe:ns:meta/">\n'
        ' <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n'
        '  <rdf:Description rdf:about="" xmlns:pdfaid="http://www.aiim.org/pdfa/ns/id/">\n'
        "   <pdfaid:part>2</pdfaid:part>\n   <pdfaid:conformance>B</pdfaid:conformance>\n"
        "  </rdf:Description>\n"
        '  <rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/">\n'
        '   <dc:title><rdf:Alt><rdf:li xml:lang="x-default">'
        f"{escape(title)}</rdf:li></rdf:Alt></dc:title>\n"
        "  </rdf:Description>\n"
        '  <rdf:Description rdf:about="" xmlns:pdf="http://ns.adobe.com/pdf/1.3/">\n'
        "   <pdf:Producer>extractor</pdf:Producer>\n  </rdf:Description>\n"
        " </rdf:RDF>\n</x:xmpmeta>\n"
        '<?xpacket end="w"?>'
    ).encode()


def _srgb_profile() -> bytes:
    return bytes(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())


def write_searchable_pdf(document: Document, scans: Iterator[PageScan], out: BinaryIO) -> None:
    """``document`` as a searchable PDF into ``out``: page ``i`` drawn from the ``i``-th of
    ``scans`` (one in memory at a time), the words over it invisible."""
    objects = _Objects(out)
    catalog, tree, helvetica, type0, cid_font, descriptor, to_unicode, metadata, profile = (
        objects.reserve() for _ in range(9)
    )
    codes = _Codes()
    digest = hashlib.md5(document.name.encode(), usedforsecurity=False)
    kids: list[int] = []
    fonts = b"<</F1 %d 0 R /F2 %d 0 R>>" % (helvetica, type0)
    for (page, lines), scan in zip(page_lines(document), scans, strict=True):
        scale = 72 / scan.dpi
        width, height = page.width * scale, page.height * scale
        if max(width, height) > MAX_POINTS:
            scale *= MAX_POINTS / max(width, height)
            width, height = page.width * scale, page.height * scale
        image, content, page_object = objects.reserve(), objects.reserve(), objects.reserve()
        space = b"/DeviceGray" if scan.components == 1 else b"/DeviceRGB"
        objects.stream(
            image,
            b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace %s"
            b" /BitsPerComponent 8 /Filter /DCTDecode" % (scan.width, scan.height, space),
            scan.jpeg,
        )
        digest.update(scan.jpeg[:4096])
        drawn = b"q %s 0 0 %s 0 0 cm /Im0 Do Q\n" % (_number(width), _number(height))
        text = _text_layer(lines, page, scale, codes)
        digest.update(text)
        objects.stream(content, b" /Filter /FlateDecode", zlib.compress(drawn + text))
        objects.put(
            page_object,
            b"<</Type /Page /Parent %d 0 R /MediaBox [0 0 %s %s] /Contents %d 0 R"
            b" /Resources <</XObject <</Im0 %d 0 R>> /Font %s>>>>"
            % (tree, _number(width), _number(height), content, image, fonts),
        )
        kids.append(page_object)
    objects.put(
        tree,
        b"<</Type /Pages /Count %d /Kids [%s]>>"
        % (len(kids), b" ".join(b"%d 0 R" % kid for kid in kids)),
    )
    objects.put(
        helvetica,
        b"<</Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding>>",
    )
    objects.put(
        type0,
        b"<</Type /Font /Subtype /Type0 /BaseFont /GlyphLessFont /Encoding /Identity-H"
        b" /DescendantFonts [%d 0 R] /ToUnicode %d 0 R>>" % (cid_font, to_unicode),
    )
    objects.put(
        cid_font,
        b"<</Type /Font /Subtype /CIDFontType2 /BaseFont /GlyphLessFont"
        b" /CIDSystemInfo <</Registry (Adobe) /Ordering (Identity) /Supplement 0>>"
        b" /FontDescriptor %d 0 R /DW %d /CIDToGIDMap /Identity>>" % (descriptor, CID_WIDTH),
    )
    objects.put(
        descriptor,
        b"<</Type /FontDescriptor /FontName /GlyphLessFont /Flags 4 /FontBBox [0 0 1000 1000]"
        b" /ItalicAngle 0 /Ascent 1000 /Descent 0 /CapHeight 1000 /StemV 80>>",
    )
    objects.stream(to_unicode, b" /Filter /FlateDecode", zlib.compress(codes.to_unicode()))
    objects.stream(metadata, b"/Type /Metadata /Subtype /XML", _xmp(document.name))
    objects.stream(profile, b"/N 3 /Filter /FlateDecode", zlib.compress(_srgb_profile()))
    objects.put(
        catalog,
        b"<</Type /Catalog /Pages %d 0 R /Metadata %d 0 R /OutputIntents [<</Type /OutputIntent"
        b" /S /GTS_PDFA1 /OutputConditionIdentifier (sRGB IEC61966-2.1)"
        b" /Info (sRGB IEC61966-2.1) /DestOutputProfile %d 0 R>>]>>" % (tree, metadata, profile),
    )
    objects.finish(catalog, digest.digest())
