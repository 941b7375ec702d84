"""The contract files under ``schemas/``, loaded and checked once per process.

``schemas/`` sits at the top of the repository because it is the contract people read; the wheel
carries it as the package ``extractor.contracts`` (mapped in ``pyproject.toml``), so an installed
extractor reads it through ``importlib.resources`` wherever pip put it.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import jsonschema_rs

CONTRACTS_PACKAGE = "extractor.contracts"


def contracts_dir() -> Traversable:
    """Where the contract files are: the checkout's ``schemas/`` when running from a source tree,
    else the installed ``extractor.contracts`` package.

    The checkout comes first so that a source tree on ``PYTHONPATH`` reads its own files, never
    those of whichever tree an editable install happens to point at.
    """
    checkout = Path(__file__).resolve().parent.parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "schemas").is_dir():
        return checkout / "schemas"
    return resources.files(CONTRACTS_PACKAGE)


SCHEMAS_DIR = contracts_dir()


@functools.cache
def importable_schema() -> dict[str, Any]:
    """The Importable JSON Schema (draft 2020-12), checked against its meta-schema.

    Checked with jsonschema-rs, not python-jsonschema: a server process then never imports the
    latter (with ``referencing`` and ``attrs``, ~6 MB of every worker's RSS).
    """
    schema: dict[str, Any] = json.loads(
        (SCHEMAS_DIR / "importable.schema.json").read_text(encoding="utf-8")
    )
    jsonschema_rs.meta.validate(schema)
    return schema


@functools.cache
def importable_validator() -> jsonschema_rs.Validator:
    """A compiled validator for Importable replies.

    The Rust implementation checks a full page's reply (~450 labels) in about 3 ms, where
    python-jsonschema needs close to a second for the same ``unevaluatedProperties`` rules; the
    tests validate with python-jsonschema too, so two implementations agree on every reply.
    """
    return jsonschema_rs.validator_for(importable_schema())


def importable_errors(document: Any, limit: int = 5) -> list[str]:
    """Up to ``limit`` readable reasons why ``document`` is not Importable JSON ([] if it is)."""
    errors = []
    for error in importable_validator().iter_errors(document):
        where = "/".join(str(p) for p in error.instance_path) or "(document)"
        errors.append(f"{where}: {error.message}")
        if len(errors) >= limit:
            break
    return errors
