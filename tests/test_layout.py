"""The layout rules of issue 20, checked on the source so they stay kept.

- No module uses another module's private (``_name``) names: neither ``from x import _y`` nor
  ``x._y`` on an imported project module. A name two modules share is public (renamed), or the
  helper moves to where both can use it.
- No module over 450 lines (Alembic migrations excepted): a bigger one is split by concern.
- At most 12 modules directly in ``extractor/``: the others live in the subpackage of their
  layer (ARCHITECTURE.md).

Only the source is read (nothing is imported), so this needs no engine, model or database.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "extractor"
MAX_LINES = 450
MAX_TOP_LEVEL_MODULES = 12


@dataclass(frozen=True)
class Module:
    """One source file of the package: its dotted name and parsed tree."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def dotted_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> list[Module]:
    return [
        Module(dotted_name(path), path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def is_private(name: str) -> bool:
    """``_name`` is private; ``__name__``-style dunders are the language's, not a module's."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def absolute_source(module: Module, node: ast.ImportFrom) -> str:
    """The dotted module a ``from ... import`` reads from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(module: Module, known: set[str]) -> dict[str, str]:
    """Local names bound to a project module by an import: ``{local: dotted module}``."""
    bound: dict[str, str] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
                elif not alias.asname and alias.name.split(".")[0] == "extractor":
                    bound["extractor"] = "extractor"
        elif isinstance(node, ast.ImportFrom):
            source = absolute_source(module, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    return bound


def attribute_chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when it does not start at a plain name."""
    chain: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        chain.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    chain.append(current.id)
    return chain[::-1]


def private_uses(module: Module, known: set[str]) -> list[str]:
    """Every use in ``module`` of another project module's private names."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute_source(module, node)
            if source.split(".")[0] != "extractor" or source == module.name:
                continue
            found.extend(
                (node.lineno, f"from {source} import {alias.name}")
                for alias in node.names
                if is_private(alias.name)
            )
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.split(".")[0] == "extractor"
                and any(is_private(part) for part in alias.name.split("."))
            )
    bound = imported_modules(module, known)
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        chain = attribute_chain(node)
        if chain is None or chain[0] not in bound:
            continue
        # Follow the chain through project modules: `extractor.media._x`, `media._x`.
        target = bound[chain[0]]
        for part in chain[1:-1]:
            if f"{target}.{part}" not in known:
                break
            target = f"{target}.{part}"
        else:
            if target != module.name:
                found.append((node.lineno, ".".join(chain)))
    where = module.path.relative_to(PACKAGE.parent)
    return [f"{where}:{line}: {use}" for line, use in sorted(found)]


def test_no_module_uses_another_modules_private_names() -> None:
    modules = project_modules()
    known = {module.name for module in modules}
    found = [use for module in modules for use in private_uses(module, known)]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_no_module_is_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.relative_to(PACKAGE).parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concern): {too_long}"


def test_few_modules_sit_directly_in_the_package() -> None:
    top_level = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top_level)} modules directly in extractor/ (at most {MAX_TOP_LEVEL_MODULES}; "
        f"put the others in the subpackage of their layer): {top_level}"
    )


def test_the_checker_sees_private_uses(tmp_path: Path) -> None:
    """The walker itself: each form of a cross-module private use is caught, own names not."""
    source = (
        "from extractor.media import _sniff, sniff\n"
        "from . import views\n"
        "import extractor.formats\n"
        "import extractor.config as config\n"
        "def _own(): ...\n"
        "views._extract_options()\n"
        "extractor.formats._renderers\n"
        "config.__name__\n"
        "config._private\n"
        "_own()\n"
    )
    module = Module("extractor.app", PACKAGE / "app.py", ast.parse(source))
    known = {"extractor", "extractor.media", "extractor.views", "extractor.formats"}
    known.add("extractor.config")
    uses = [use.split(": ", 1)[1] for use in private_uses(module, known)]
    assert uses == [
        "from extractor.media import _sniff",
        "views._extract_options",
        "extractor.formats._renderers",
        "config._private",
    ]


@pytest.mark.parametrize(
    ("name", "private"), [("_x", True), ("__x", True), ("__init__", False), ("x", False)]
)
def test_private_means_a_leading_underscore(name: str, private: bool) -> None:
    assert is_private(name) is private
