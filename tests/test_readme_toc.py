"""The README's table of contents lists every section, in order, with working anchors.

Regenerate it after adding or renaming a section: ``python tests/test_readme_toc.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"
START, END = "<!-- toc -->", "<!-- /toc -->"


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of each `##`/`###` heading outside fenced code blocks."""
    found: list[tuple[int, str]] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"(#{2,3}) (.+)", line)
        if match and not fenced:
            found.append((len(match.group(1)), match.group(2).strip()))
    return found


def anchor(title: str, seen: dict[str, int]) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def table_of_contents(text: str) -> str:
    """The Markdown list between the markers, one line per section, subsections indented."""
    seen: dict[str, int] = {}
    lines = [
        f"{'  ' * (level - 2)}- [{title.replace('`', '')}](#{anchor(title, seen)})"
        for level, title in headings(text)
    ]
    return "\n".join(lines)


def with_toc(text: str) -> str:
    """The README with its table of contents rebuilt between the markers."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table_of_contents(text)}\n{END}{tail}"


def test_readme_has_a_current_table_of_contents() -> None:
    text = README.read_text()
    assert START in text and END in text, "the README needs <!-- toc --> and <!-- /toc --> markers"
    assert with_toc(text) == text, "run `python tests/test_readme_toc.py` to rebuild the contents"


def test_anchors_follow_github_rules() -> None:
    seen: dict[str, int] = {}
    assert anchor("OpenAI-compatible transcription: `POST /v1/audio/transcriptions`", seen) == (
        "openai-compatible-transcription-post-v1audiotranscriptions"
    )
    assert anchor("Speaker labels (`speakers=auto`)", seen) == "speaker-labels-speakersauto"
    assert anchor("Errors", seen) == "errors"
    assert anchor("Errors", seen) == "errors-1"


if __name__ == "__main__":
    README.write_text(with_toc(README.read_text()))
    sys.exit(0)
