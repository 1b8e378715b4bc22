"""GitHub's OpenAPI description (``@octokit/openapi``) as JSON Schemas to check answers with.

OpenAPI 3.0 schemas are almost JSON Schema. What differs, and is converted here:

- ``nullable: true`` is spelled as a ``"null"`` type in JSON Schema (and ``None`` joins an
  ``enum``, which would otherwise reject it); a nullable schema without a ``type`` (an
  ``allOf``, say) becomes ``anyOf: [it, {type: null}]``;
- ``$ref`` points into ``#/components/schemas``: :meth:`Description.response_schema` returns
  a self-contained draft 2020-12 schema with every component it reaches under ``$defs`` (a
  recursive component stays finite);
- keywords JSON Schema does not know (``example``, ``x-github``, ``discriminator``...) go.

Formats: ``date-time`` (RFC 3339) and ``uri`` (with a scheme) are checked; others are not.

Used for the fake GitHub's answers and for the client against GitHub's own examples; a new
endpoint needs no code here, only its path and method.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker

SCHEMAS = "#/components/schemas/"
#: OpenAPI keywords JSON Schema has no use for (``nullable`` is converted first).
_DROP = frozenset(
    {"nullable", "example", "examples", "xml", "externalDocs", "discriminator"}
    | {"readOnly", "writeOnly", "deprecated"}
)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")

FORMATS = FormatChecker(formats=())


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _RFC3339.fullmatch(value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return True


@FORMATS.checks("uri")
def _uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return bool(urlsplit(value).scheme) and not any(c.isspace() for c in value)


def to_json_schema(schema: Any, refs: set[str]) -> Any:
    """One OpenAPI 3.0 schema as JSON Schema; the component names it refers to join ``refs``."""
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:  # OpenAPI 3.0 ignores a $ref's siblings
        ref = str(schema["$ref"])
        if not ref.startswith(SCHEMAS):
            raise ValueError(f"not a schema reference: {ref}")
        name = ref.removeprefix(SCHEMAS)
        refs.add(name)
        return {"$ref": "#/$defs/" + name.replace("~", "~0").replace("/", "~1")}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP or key.startswith("x-"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub, refs) for name, sub in value.items()}
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub, refs) for sub in value]
        elif key in ("items", "not", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value, refs)
        else:
            out[key] = value
    if schema.get("nullable") is True:
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif "type" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


class Description:
    """One OpenAPI document: operations, their responses, schemas, headers and examples."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._components: dict[str, Any] = document.get("components", {})
        self._patterns: list[tuple[str, re.Pattern[str]]] | None = None

    @classmethod
    def load(cls, path: Path) -> Description:
        with path.open(encoding="utf-8") as handle:
            return cls(json.load(handle))

    @property
    def version(self) -> str:
        return str(self.document.get("info", {}).get("version", "?"))

    # --- lookups
    def deref(self, value: Any) -> Any:
        """Follow ``$ref`` (``#/components/...``) until a value without one."""
        seen: set[str] = set()
        while isinstance(value, dict) and "$ref" in value:
            ref = str(value["$ref"])
            if ref in seen or not ref.startswith("#/"):
                raise ValueError(f"cannot follow {ref}")
            seen.add(ref)
            value = self.document
            for part in ref[2:].split("/"):
                value = value[part.replace("~1", "/").replace("~0", "~")]
        return value

    def template(self, path: str) -> str | None:
        """The description's path template a request path (query ignored) falls under.

        A literal segment wins over a parameter (``/runners/downloads`` over
        ``/runners/{runner_id}``)."""
        if self._patterns is None:
            self._patterns = [
                (t, re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(t)) + "$"))
                for t in self.document["paths"]
            ]
        bare = urlsplit(path).path
        matches = [t for t, pattern in self._patterns if pattern.match(bare)]
        return min(matches, key=lambda t: t.count("{"), default=None)

    def operation(self, path: str, method: str) -> dict[str, Any]:
        """The operation object; KeyError names what the description lacks."""
        try:
            return dict(self.document["paths"][path][method.lower()])
        except KeyError:
            raise KeyError(f"the description has no {method.upper()} {path}") from None

    def statuses(self, path: str, method: str) -> set[int]:
        """The status codes the description documents for the operation."""
        return {int(code) for code in self.operation(path, method)["responses"] if code.isdigit()}

    def response(self, path: str, method: str, status: int) -> dict[str, Any]:
        """The response object of one status; KeyError when it is not documented."""
        responses = self.operation(path, method)["responses"]
        if str(status) not in responses:
            raise KeyError(f"{method.upper()} {path} documents no {status}")
        return dict(self.deref(responses[str(status)]))

    def parameter(self, path: str, method: str, name: str) -> dict[str, Any]:
        """A parameter of the operation (or of its path item) by name."""
        item = self.document["paths"][path]
        for parameter in [*item.get("parameters", []), *self.operation(path, method)["parameters"]]:
            resolved = self.deref(parameter)
            if resolved.get("name") == name:
                return dict(resolved)
        raise KeyError(f"{method.upper()} {path} has no parameter {name}")

    def headers(self, path: str, method: str, status: int) -> dict[str, dict[str, Any]]:
        """Documented response headers by lower-cased name -> their JSON Schema."""
        found = {}
        for name, header in self.response(path, method, status).get("headers", {}).items():
            found[name.lower()] = to_json_schema(self.deref(header).get("schema", {}), set())
        return found

    def examples(self, path: str, method: str, status: int) -> dict[str, Any]:
        """The response's ``application/json`` examples by name -> value."""
        media = self.response(path, method, status).get("content", {}).get("application/json", {})
        found = {
            name: self.deref(ex).get("value") for name, ex in media.get("examples", {}).items()
        }
        if not found and "example" in media:
            found["example"] = media["example"]
        return found

    # --- schemas
    def body_schema(self, path: str, method: str, status: int) -> Any:
        """The response body's OpenAPI schema as written, or None when it has no JSON."""
        media = self.response(path, method, status).get("content", {}).get("application/json")
        return None if media is None else media.get("schema")

    def response_schema(self, path: str, method: str, status: int) -> dict[str, Any] | None:
        """The response body's JSON Schema (self-contained), or None when it has no JSON."""
        schema = self.body_schema(path, method, status)
        return None if schema is None else self.schema(schema)

    def component(self, name: str) -> dict[str, Any]:
        """A component schema (``#/components/schemas/{name}``) as a self-contained schema."""
        return self.schema({"$ref": SCHEMAS + name})

    def schema(self, openapi_schema: Any) -> dict[str, Any]:
        refs: set[str] = set()
        root = to_json_schema(openapi_schema, refs)
        defs: dict[str, Any] = {}
        pending = sorted(refs)
        while pending:
            name = pending.pop()
            if name in defs:
                continue
            more: set[str] = set()
            defs[name] = to_json_schema(self._components["schemas"][name], more)
            pending.extend(sorted(more - defs.keys()))
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", **root, "$defs": defs}

    def validator(self, path: str, method: str, status: int) -> Draft202012Validator:
        schema = self.response_schema(path, method, status)
        if schema is None:
            raise KeyError(f"{method.upper()} {path} {status} has no JSON body")
        return Draft202012Validator(schema, format_checker=FORMATS)

    def undocumented(self, openapi_schema: Any, instance: Any, where: str = "$") -> Iterator[str]:
        """JSON paths of properties ``instance`` has that the schema does not name.

        JSON Schema allows them (the description sets no ``additionalProperties: false``),
        but a property the fake invents is one the client might come to rely on.
        """
        schema = self.deref(openapi_schema)
        if isinstance(instance, list):
            if isinstance(schema.get("items"), dict):
                for index, item in enumerate(instance):
                    yield from self.undocumented(schema["items"], item, f"{where}[{index}]")
            return
        if not isinstance(instance, dict):
            return
        properties: dict[str, Any] = {}
        open_ended = False
        for member in self._members(schema):
            for name, sub in member.get("properties", {}).items():
                properties.setdefault(name, sub)
            open_ended |= member.get("additionalProperties", False) not in (False, None)
        if not properties:
            return  # a free-form object
        for name, value in instance.items():
            if name in properties:
                yield from self.undocumented(properties[name], value, f"{where}.{name}")
            elif not open_ended:
                yield f"{where}.{name}"

    def _members(self, schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield schema
        for key in ("allOf", "anyOf", "oneOf"):
            for member in schema.get(key, []):
                yield from self._members(self.deref(member))


def errors(validator: Draft202012Validator, instance: Any) -> list[str]:
    """Every violation as ``<json path>: <message>``, in document order."""
    found = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.path])
    return [f"{error.json_path}: {error.message[:300]}" for error in found]
