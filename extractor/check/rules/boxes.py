"""Rules on the bounding boxes of an OCR reply: corner order, pages, and whether each box lies
where the kit drew its word."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..findings import Finding, failed, first_failure, passed, skipped
from ..probes import OcrSample, Probe
from .reading import cells_by_place, label_token, normalise, on_json

BOX_IOU = 0.30  # a returned box overlaps its drawn word when IoU exceeds this ...
BOX_CONTAINED = 0.90  # ... or when this share of the smaller box lies inside the larger
BOX_SHARE = 0.80  # share of drawn words that need a box on their page that overlaps them

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
