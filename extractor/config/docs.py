"""The settings tables of the documentation, generated from the declarations.

Each table sits between two markers in ``docs/settings.md``, ``<!-- settings-table: NAME -->``
and ``<!-- /settings-table -->``; :func:`fill_tables` rewrites what lies between them
(``make settings-table``) and ``tests/test_settings.py`` fails while the page differs from it,
so a setting is documented in one place: its declaration.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .engines import EngineSettings
from .extraction import Settings
from .fields import Setting, SettingsBase
from .intake import IntakeSettings
from .jobs import JobSettings
from .labeling import LabelingSettings
from .labeling_limits import LabelingLimits

# The tables by marker name: the settings declared in the body of one class, and
# whether they are also flags (``extractor serve`` and ``extractor extract`` offer them; the
# labeling commands read the environment only). Every setting is in exactly one table.
TABLES: dict[str, tuple[type[SettingsBase], bool]] = {
    "intake": (IntakeSettings, True),
    "extractor": (Settings, True),
    "extractor-jobs": (JobSettings, True),
    "extractor-engines": (EngineSettings, True),
    "labeling": (LabelingSettings, False),
    "labeling-limits": (LabelingLimits, False),
}
_BLOCK = re.compile(
    r"(<!-- settings-table: (?P<name>[\w-]+) -->\n).*?(<!-- /settings-table -->)", re.DOTALL
)


def shown_default(declared: Setting) -> str:
    """The default as a user would write it in the variable, in Markdown."""
    value = declared.default
    if declared.rule.shown is not None:
        return f"`{declared.rule.shown}`"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "*(empty)*"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = f"`{value}`"
    if declared.rule.unit == "bytes" and isinstance(value, int) and value >= 1024:
        for size, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if value % size == 0:
                return f"{text} ({value // size} {name})"
    return text


def meaning(declared: Setting) -> str:
    """The description, with the allowed values when there is a fixed list of them."""
    text = declared.rule.help
    if declared.rule.choices:
        text += " One of " + ", ".join(f"`{choice}`" for choice in declared.rule.choices) + "."
    return text


def declared_here(settings: type[SettingsBase]) -> list[Setting]:
    """The settings declared in the body of ``settings`` itself (not in a base class)."""
    own = vars(settings).get("__annotations__", {})
    return [declared for declared in settings.declared() if declared.name in own]


# Settings both services inherit: their table names the labeling service's variable too.
SHARED: dict[type[SettingsBase], type[SettingsBase]] = {IntakeSettings: LabelingSettings}


def settings_table(settings: type[SettingsBase], flags: bool) -> str:
    """The Markdown table of the settings declared in ``settings``' body, in their order."""
    also = SHARED.get(settings)
    head = [
        "Environment variable",
        *(["CLI flag"] if flags else []),
        *(["Labeling service"] if also else []),
        "Default",
        "Unit",
        "Meaning",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for declared in declared_here(settings):
        cells = [
            f"`{declared.variable}`",
            *([f"`{declared.flag}`"] if flags else []),
            *([f"`{also.variable(declared.name)}`"] if also else []),
            shown_default(declared),
            declared.rule.unit,
            meaning(declared),
        ]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def named_table(name: str) -> str:
    """The table ``name`` (a key of :data:`TABLES`)."""
    settings, flags = TABLES[name]
    return settings_table(settings, flags)


def fill_tables(text: str, table: Callable[[str], str] = named_table) -> str:
    """``text`` with every marked settings table replaced by the generated one."""
    return _BLOCK.sub(lambda m: f"{m.group(1)}\n{table(m.group('name'))}\n{m.group(3)}", text)


def write_tables(path: Path) -> bool:
    """Regenerate the marked tables of the Markdown file at ``path``; True when it changed."""
    before = path.read_text()
    after = fill_tables(before)
    if after != before:
        path.write_text(after)
    return after != before
