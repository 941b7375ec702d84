"""The layers of ARCHITECTURE.md hold in the code: every import of ``extractor/`` (those inside
functions and under ``TYPE_CHECKING`` included) goes to its own layer or one below, and no two
packages import each other, even through others. The table is read from ARCHITECTURE.md, so
the page and the code cannot drift apart; there is no list of exceptions."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "extractor"


@cache
def layers() -> dict[str, int]:
    """Each unit (a subpackage, or a module directly in ``extractor/``) and its layer's row in
    ARCHITECTURE.md's table, 0 for the top."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    table = text.split("| Layer | Where | What it is |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    found: dict[str, int] = {}
    for row, line in enumerate(rows):
        where = line.split("|")[2]
        for name in re.findall(r"`([\w/.]+)`", where):
            found[name.removesuffix("/").removesuffix(".py")] = row
    return found


def unit(module: str) -> str:
    """``extractor.asr.faster`` -> ``asr``; ``extractor.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """The ``extractor`` modules ``path`` imports (a name from a package counted as its module
    when it is one), with the line."""
    module = module_of(path)
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] if base else []
        else:
            continue
        for name in names:
            if name == "extractor" or name.startswith("extractor."):
                yield name, node.lineno


@cache
def edges() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> where, for every import between two units."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = unit(module_of(path))
        for name, line in imports(path):
            target = unit(name)
            if source and target and target != source:
                found.setdefault((source, target), []).append(f"{path.relative_to(ROOT)}:{line}")
    return found


def units() -> set[str]:
    named = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    return named | {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}


def test_the_architecture_names_every_package_and_module_of_the_base() -> None:
    assert units() - set(layers()) == set(), "add them to ARCHITECTURE.md's table of layers"
    assert set(layers()) - units() == set(), "ARCHITECTURE.md names what no longer exists"


def test_no_import_goes_up_a_layer() -> None:
    row = layers()
    upward = [
        f"{source} -> {target} ({', '.join(where)})"
        for (source, target), where in edges().items()
        if row[target] < row[source]
    ]
    assert upward == []


def test_no_two_packages_import_each_other_even_through_others() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in edges():
        graph.setdefault(source, set()).add(target)

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for following in graph.get(todo.pop(), ()):
                if following not in seen:
                    seen.add(following)
                    todo.append(following)
        return seen

    cycles = sorted(
        f"{source} -> {target} -> ... -> {source} ({', '.join(where)})"
        for (source, target), where in edges().items()
        if source in reaches(target)
    )
    assert cycles == []
