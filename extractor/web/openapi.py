"""The OpenAPI document of the extractor, self-contained, as ``GET /openapi.json`` serves it.

``schemas/extractor.openapi.yaml`` refers to ``importable.schema.json`` by a relative ``$ref``
so the Importable schema has one source. Clients (and code generators) often cannot follow a
file reference from a URL, so the served document has every such reference replaced by the
file's content, its internal ``#/$defs/...`` references rewritten to where it now sits.

The extraction options have one source too, their declaration in ``pipeline/request.py``:
where the YAML says ``x-extraction-options: {in: query}`` (an operation) or ``{in: form}`` (a
form's schema), the served document lists every option as a query parameter or form field.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib.resources.abc import Traversable
from typing import Any

from extractor.pipeline.request import OPTIONS, Option
from extractor.replies.schemas import SCHEMAS_DIR

OPENAPI_FILE = SCHEMAS_DIR / "extractor.openapi.yaml"
OPTIONS_MARKER = "x-extraction-options"


def load_openapi() -> dict[str, Any]:
    """The served document: the YAML with file references inlined (a fresh copy per call)."""
    return copy.deepcopy(_document())


@functools.cache
def _document() -> dict[str, Any]:
    # PyYAML (20 modules, ~1 MB of a worker) only when the document is first asked for.
    import yaml

    document = _with_options(yaml.safe_load(OPENAPI_FILE.read_text(encoding="utf-8")))
    inlined = _inline_files(document, "#", SCHEMAS_DIR)
    assert isinstance(inlined, dict)
    return inlined


def _with_options(node: Any) -> Any:
    """Replace every ``x-extraction-options`` marker under ``node`` by the options it asks for
    (``except``: the names of those the operation takes in fields of its own)."""
    if isinstance(node, list):
        return [_with_options(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _with_options(value) for key, value in node.items()}
    marker = node.pop(OPTIONS_MARKER, None)
    if marker is None:
        return node
    wanted = [o for o in OPTIONS if o.name not in marker.get("except", ())]
    if marker["in"] == "query":
        node["parameters"] = [*node.get("parameters", ()), *map(query_parameter, wanted)]
    else:
        node["properties"] = {**node.get("properties", {}), **{
            o.name: {**o.kind.schema, "description": o.doc} for o in wanted
        }}  # fmt: skip
    return node


def query_parameter(option: Option) -> dict[str, Any]:
    """``option`` as an OpenAPI query parameter; an empty value counts as not given."""
    return {"name": option.name, "in": "query", "required": False,
            "description": option.doc, "schema": dict(option.kind.schema)}  # fmt: skip


def _inline_files(node: Any, pointer: str, base: Traversable) -> Any:
    """Replace each ``{"$ref": "<file>"}`` under ``node`` (at JSON pointer ``pointer``) by the
    file's JSON Schema."""
    if isinstance(node, list):
        return [_inline_files(item, f"{pointer}/{i}", base) for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#") and "://" not in ref:
        if len(node) > 1:
            raise ValueError(f"{pointer}: a file $ref must stand alone to be inlined")
        schema = json.loads((base / ref).read_text(encoding="utf-8"))
        # Without its $id the embedded schema's "#/..." would no longer mean "this file", and
        # its $schema is the document's dialect (JSON Schema 2020-12) already.
        schema.pop("$id", None)
        schema.pop("$schema", None)
        return _rebase_refs(schema, pointer)
    return {
        key: _inline_files(value, f"{pointer}/{_escape(key)}", base) for key, value in node.items()
    }


def _rebase_refs(node: Any, pointer: str) -> Any:
    """Point a schema's document-local references (``#/...``) at where the schema now sits."""
    if isinstance(node, list):
        return [_rebase_refs(item, pointer) for item in node]
    if not isinstance(node, dict):
        return node
    rebased = {key: _rebase_refs(value, pointer) for key, value in node.items()}
    ref = rebased.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        rebased["$ref"] = pointer + ref[1:]
    return rebased


def _escape(key: str) -> str:
    """A key as a JSON pointer token (RFC 6901)."""
    return str(key).replace("~", "~0").replace("/", "~1")
