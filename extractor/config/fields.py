"""How a setting is declared, read, checked and documented: the one mechanism of both services.

A service's settings are a frozen dataclass deriving from :class:`SettingsBase`, every field
declared with :func:`setting` (default, unit, description; bounds or choices where they apply).
From that one declaration come its environment variable (``env_prefix`` + the field's name in
capitals), the parsing of the variable's text, the checks, the README table
(:mod:`extractor.config.docs`) and, where a command wants them, its CLI flags
(:func:`add_setting_flags`). Only the standard library is imported: every layer may read settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar, get_args, get_type_hints

_METADATA_KEY = "setting"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names its environment variable."""


@dataclass(frozen=True)
class Rule:
    """What a field's declaration says beyond its type and default (kept in its metadata)."""

    unit: str  # "seconds", "bytes", ...; "" for text, switches and plain names
    help: str  # one sentence or a few: the README's "Meaning" column and the flag's help
    choices: tuple[str, ...] | None = None
    at_least: float | None = None  # inclusive lower bound
    above: float | None = None  # exclusive lower bound
    at_most: float | None = None  # inclusive upper bound
    shown: str | None = None  # the README's default when the value itself would mislead


def setting(
    default: Any,
    unit: str,
    help: str,
    *,
    choices: tuple[str, ...] | None = None,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    shown: str | None = None,
    secret: bool = False,
) -> Any:
    """Declare one setting: a dataclass field whose metadata carries its :class:`Rule`.

    ``secret`` keeps the value out of the settings' ``repr`` (and so out of logs).
    """
    rule = Rule(unit, help, choices, at_least, above, at_most, shown)
    return field(default=default, repr=not secret, metadata={_METADATA_KEY: rule})


@dataclass(frozen=True)
class Setting:
    """One declared setting as the loader, the checks, the CLI and the README table see it."""

    name: str
    variable: str  # its environment variable
    kind: str  # "bool", "int", "float", "str" or "Path" (``int | None`` is "int", optional)
    optional: bool  # None is a value: unset
    default: Any
    rule: Rule

    @property
    def flag(self) -> str:
        """The CLI flag of a command that offers the settings as flags."""
        return "--" + self.name.replace("_", "-")

    def parse(self, raw: str) -> Any:
        """The value of the text ``raw`` (an environment variable's or a flag's), checked."""
        text = raw.strip()
        try:
            value = _convert(self.kind, text)
        except ValueError:
            raise SettingsError(f"{self.variable}={raw!r} is not a valid {self.kind}") from None
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        """Raise :class:`SettingsError`, naming the variable, if ``value`` breaks the rule."""
        rule = self.rule
        if value is None:
            if self.optional:
                return
            raise SettingsError(f"{self.variable} must be set")
        if rule.choices is not None and value not in rule.choices:
            raise SettingsError(
                f"{self.variable}={value!r}: expected one of {', '.join(rule.choices)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingsError(f"{self.variable}={value!r} must be a finite number")
        if rule.at_least is not None and value < rule.at_least:
            raise SettingsError(f"{self.variable}={value!r} must be at least {rule.at_least:g}")
        if rule.above is not None and value <= rule.above:
            raise SettingsError(f"{self.variable}={value!r} must be above {rule.above:g}")
        if rule.at_most is not None and value > rule.at_most:
            raise SettingsError(f"{self.variable}={value!r} must be at most {rule.at_most:g}")


def _convert(kind: str, text: str) -> Any:
    if kind == "bool":
        lowered = text.lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise ValueError(text)
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "Path":
        return Path(text)
    return text


# Declarations are read once per class (get_type_hints is not free, and nothing changes them).
_DECLARED: dict[type, tuple[Setting, ...]] = {}


class SettingsBase:
    """What every service's settings dataclass inherits: loading, checks and its declarations.

    Subclasses are ``@dataclass(frozen=True)`` with ``env_prefix`` set and every field a
    :func:`setting`; a field declared otherwise is a TypeError when the settings are first read.
    """

    env_prefix: ClassVar[str]

    def __post_init__(self) -> None:
        for declared in self.declared():
            declared.check(getattr(self, declared.name))

    @classmethod
    def declared(cls) -> tuple[Setting, ...]:
        """Every setting of the class: those of its own body first, then its bases' (a
        service's settings may be declared over a few classes, one per concern)."""
        if cls not in _DECLARED:
            # (mypy cannot know that every subclass is a dataclass)
            specs = {spec.name: spec for spec in dataclasses.fields(cls)}  # type: ignore[arg-type]
            names = dict.fromkeys(
                name
                for klass in cls.__mro__
                for name in vars(klass).get("__annotations__", {})
                if name in specs
            )
            _DECLARED[cls] = tuple(_declare(cls, specs[name]) for name in names)
        return _DECLARED[cls]

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of the setting ``name`` (as errors name a limit to users)."""
        return cls.env_prefix + name.upper()

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Self:
        """Defaults, then the variables of ``environ`` (default: the process's), then
        ``overrides`` (values already typed, e.g. from flags). An empty variable is unset."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for declared in cls.declared():
            raw = environ.get(declared.variable)
            if raw is not None and raw.strip():
                values[declared.name] = declared.parse(raw)
        unknown = set(overrides or {}) - {declared.name for declared in cls.declared()}
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        values.update(overrides or {})
        return cls(**values)


def _declare(cls: type[SettingsBase], spec: dataclasses.Field[Any]) -> Setting:
    rule = spec.metadata.get(_METADATA_KEY)
    if not isinstance(rule, Rule):
        raise TypeError(f"{cls.__name__}.{spec.name} is not declared with setting()")
    hint = get_type_hints(cls)[spec.name]
    args = [a for a in get_args(hint) if a is not type(None)]
    return Setting(
        name=spec.name,
        variable=cls.variable(spec.name),
        kind=(args[0] if args else hint).__name__,
        optional=type(None) in get_args(hint),
        default=spec.default,
        rule=rule,
    )


# -- command-line flags -------------------------------------------------------------------------

S = TypeVar("S", bound=SettingsBase)


def add_setting_flags(
    parser: argparse.ArgumentParser, settings: type[SettingsBase], skip: Sequence[str] = ()
) -> None:
    """One flag per setting, named after its variable; an unset flag leaves the variable alone."""
    group = parser.add_argument_group(f"settings (each also {settings.env_prefix}<NAME>)")
    for declared in settings.declared():
        if declared.name in skip:
            continue
        rule = declared.rule
        unit = f" {rule.unit}" if rule.unit else ""
        shown = "" if declared.default is None else f" [default: {declared.default}{unit}]"
        # argparse %-formats help texts: a description's "20%" would crash --help.
        text = (rule.help + shown).replace("%", "%%")
        if declared.kind == "bool":
            group.add_argument(declared.flag, dest=declared.name, default=None,
                               action=argparse.BooleanOptionalAction,
                               help=text)  # fmt: skip
        else:
            group.add_argument(declared.flag, dest=declared.name, default=None,
                               metavar=declared.kind.upper(), choices=rule.choices,
                               help=text)  # fmt: skip


def settings_from_flags(
    settings: type[S], args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> S:
    """The settings of ``environ`` with the flags of :func:`add_setting_flags` given over them."""
    overrides: dict[str, Any] = {}
    for declared in settings.declared():
        value = getattr(args, declared.name, None)
        if isinstance(value, bool):
            overrides[declared.name] = value
        elif value is not None and value.strip():
            overrides[declared.name] = declared.parse(value)
    return settings.load(environ, overrides)
