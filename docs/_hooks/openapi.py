"""MkDocs hook: the OpenAPI document, as ``GET /openapi.json`` serves it, rendered into a page.

A page holding the marker ``<!-- openapi -->`` gets one section per operation (its parameters,
request body and responses) generated from ``extractor.web.openapi.load_openapi()``, so the
page cannot drift from the contract; the raw document is written beside the site as
``openapi.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = "<!-- openapi -->"
METHODS = ("get", "post", "put", "patch", "delete")


def _cell(text: object) -> str:
    """Table-safe text: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(schema: dict[str, Any]) -> str:
    """A short description of a parameter's schema: its type, enum or format."""
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        kind = f"array of {_type(schema['items'])}"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with a local ``$ref`` followed."""
    while "$ref" in item and item["$ref"].startswith("#/"):
        target: Any = document
        for part in item["$ref"][2:].split("/"):
            target = target[part]
        item = target
    return item


def render(document: dict[str, Any]) -> str:
    """The document's operations as Markdown sections."""
    out: list[str] = []
    for path, operations in document["paths"].items():
        shared = operations.get("parameters", [])
        for method in METHODS:
            if method not in operations:
                continue
            operation = operations[method]
            out += [f"## `{method.upper()} {path}`", "", operation.get("summary", ""), ""]
            if operation.get("description"):
                out += [operation["description"].strip(), ""]
            parameters = [
                _resolve(document, p) for p in [*shared, *operation.get("parameters", [])]
            ]
            if parameters:
                out += ["| parameter | in | type | meaning |", "|---|---|---|---|"]
                for parameter in parameters:
                    required = " (required)" if parameter.get("required") else ""
                    out.append(
                        f"| `{parameter['name']}`{required} | {parameter['in']} "
                        f"| {_type(parameter.get('schema', {}))} "
                        f"| {_cell(parameter.get('description', ''))} |"
                    )
                out.append("")
            body = _resolve(document, operation.get("requestBody", {}))
            for media, content in body.get("content", {}).items():
                schema = _resolve(document, content.get("schema", {}))
                fields = schema.get("properties", {})
                if fields:
                    out += [f"Request body, `{media}`:", ""]
                    out += ["| field | type | meaning |", "|---|---|---|"]
                    needed = set(schema.get("required", []))
                    for name, field in fields.items():
                        field = _resolve(document, field)
                        required = " (required)" if name in needed else ""
                        out.append(
                            f"| `{name}`{required} | {_type(field)} "
                            f"| {_cell(field.get('description', ''))} |"
                        )
                    out.append("")
            out += ["| status | meaning | content |", "|---|---|---|"]
            for status, reply in operation.get("responses", {}).items():
                reply = _resolve(document, reply)
                types = ", ".join(f"`{media}`" for media in reply.get("content", {}))
                out.append(f"| {status} | {_cell(reply.get('description', ''))} | {types} |")
            out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from extractor.web.openapi import load_openapi

    return markdown.replace(MARKER, render(load_openapi()))


def on_post_build(config: Any) -> None:
    from extractor.web.openapi import load_openapi

    target = Path(config["site_dir"]) / "openapi.json"
    target.write_text(json.dumps(load_openapi(), indent=2))
