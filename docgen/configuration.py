"""The configuration reference, rendered from the config's JSON Schema.

One table per section of the file (the top-level scalars first), one row per key: its
full path (``runner_types.<name>.idle_timeout``, ``alerts.rules[].for``), its type, its
default and its description. The schema is the one ``ci-autoscaler config schema``
prints: pydantic's draft 2020-12 output, with ``$defs`` and ``$ref``, ``anyOf`` for a key
that takes either form, ``additionalProperties`` for a mapping by name, ``items`` for a
list, and durations as strings with examples.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from docgen.markdown import GENERATED, cell, code, table

Schema = Mapping[str, Any]
#: A duration as the file writes it: ``30s``, ``1h30m``, ``500ms``.
_DURATION = re.compile(r"^([0-9.]+(d|h|m|s|ms))+$")


class _Walker:
    def __init__(self, root: Schema) -> None:
        self.defs: Mapping[str, Schema] = root.get("$defs", {})

    def resolve(self, node: Schema) -> Schema:
        while "$ref" in node:
            node = self.defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def alternatives(self, node: Schema) -> list[Schema]:
        """The forms a key takes (``null`` left out: that is the key left unset)."""
        forms = node.get("anyOf") or node.get("oneOf") or [node]
        out = [self.resolve(f) for f in forms]
        return [f for f in out if f.get("type") != "null"] or out

    def type_name(self, node: Schema) -> str:
        names = [self._one_type(form) for form in self.alternatives(node)]
        return " or ".join(dict.fromkeys(names))

    def _one_type(self, node: Schema) -> str:
        if "enum" in node:
            return " or ".join(code(str(v)) for v in node["enum"])
        if "const" in node:
            return code(str(node["const"]))
        kind = node.get("type")
        if kind == "string":
            examples = node.get("examples", [])
            if examples and all(_DURATION.match(str(e)) for e in examples):
                return "duration"
            return "string"
        if kind == "array":
            return f"list of {self._plural(self.resolve(node.get('items', {})))}"
        if kind == "object" and "properties" not in node:
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                return f"mapping of {self._plural(self.resolve(extra))}"
            return "mapping"
        if "properties" in node:
            return "mapping"
        return str(kind or "any")

    def _plural(self, node: Schema) -> str:
        name = self._one_type(node)
        return {"string": "strings", "integer": "integers", "number": "numbers"}.get(
            name, "mappings" if name == "mapping" else name
        )

    def rows(self, node: Schema, path: str, required: bool) -> Iterator[list[str]]:
        """One row for the key at ``path``, then rows for the keys inside it."""
        default = ""
        if "default" in node and node["default"] not in (None, [], {}):
            default = code(json.dumps(node["default"]).strip('"'))
        elif required:
            default = "required"
        description = node.get("description") or ""
        forms = self.alternatives(node)
        if not description and len(forms) == 1:
            description = forms[0].get("description", "")
        yield [code(path), cell(self.type_name(node)), default, cell(description)]
        for form in forms:
            yield from self.children(form, path)

    def children(self, node: Schema, path: str) -> Iterator[list[str]]:
        if "properties" in node:
            required = set(node.get("required", ()))
            for key, sub in node["properties"].items():
                yield from self.rows(sub, f"{path}.{key}", key in required)
        elif node.get("type") == "array":
            items = self.resolve(node.get("items", {}))
            yield from self.children(items, f"{path}[]")
        elif isinstance(node.get("additionalProperties"), dict):
            value = self.resolve(node["additionalProperties"])
            yield from self.children(value, f"{path}.<name>")


def render(schema: Schema) -> str:
    walker = _Walker(schema)
    required = set(schema.get("required", ()))
    top: list[list[str]] = []
    sections: list[tuple[str, list[list[str]]]] = []
    for key, node in schema["properties"].items():
        rows = list(walker.rows(node, key, key in required))
        if len(rows) > 1:  # a section: its own table
            sections.append((key, rows))
        else:
            top += rows
    parts = [
        "# Configuration reference",
        "",
        GENERATED.format(source="the config's JSON Schema, `ci-autoscaler config schema`"),
        "",
        "Every key of the configuration file, by section: its type, its default and what it"
        " does. Durations take a unit: `30s`, `5m`, `1h30m` (see"
        " [Configuration](../configuration.md#durations)). `${VAR}` reads the environment."
        " `<name>` stands for a name you choose; `[]` for each item of a list.",
        "",
        "## Top level {#top-level}",
        "",
        table(["Key", "Type", "Default", "Description"], top),
    ]
    for key, rows in sections:
        parts += ["", f"## `{key}` {{#{key}}}", ""]
        parts.append(table(["Key", "Type", "Default", "Description"], rows))
    return "\n".join(parts) + "\n"
