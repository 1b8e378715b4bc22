"""The configuration's JSON Schema, generated from the models.

Editors check a file against it while it is written (``config.example.yaml``'s first
line points the YAML language server at ``config.schema.json``, which is this output,
kept current by a test), and the configuration reference of the docs is generated from
it: every key with its type, its default and its description (the field's docstring).

The schema says what one key may hold; ``check-config`` also checks what keys say
together (a back-off above its cap, two runner types with the same labels) and reads
what the schema cannot (``${VAR}``, rule files, a key file).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import sys
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from autoscaler.config.schema import Config
from autoscaler.config.values import Section

#: The dialect pydantic writes.
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _AsWritten(GenerateJsonSchema):
    """Defaults written the way a file writes them (``30s``, not ``30.0``). A section's
    default is its keys' defaults, said with each key; an empty text's is the key left
    out: neither is repeated."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        default = super().get_default_value(schema)
        factory = schema.get("default_factory")
        if default is NoDefault and factory is not None:
            default = NoDefault if schema.get("default_factory_takes_data") else factory()  # type: ignore[call-arg]
        if isinstance(default, BaseModel) or default == "":
            return NoDefault
        inner: Any = schema["schema"]
        while "serialization" not in inner and inner.get("type", "").startswith("function-"):
            inner = inner["schema"]
        serialization = inner.get("serialization", {})
        if default is not None and serialization.get("type") == "function-plain":
            return serialization["function"](default)
        return default


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a configuration file."""
    schema = Config.model_json_schema(by_alias=True, schema_generator=_AsWritten)
    for name, section in [("Config", schema), *schema["$defs"].items()]:
        model = _SECTIONS[name]
        docs = _field_docstrings(model)
        properties = section["properties"]
        for key, prop in properties.items():
            field = next(n for n, f in model.model_fields.items() if (f.alias or n) == key)
            if field in docs:
                properties[key] = {"description": docs[field], **prop}
    return {"$schema": DIALECT, **_paragraphs(schema)}


def _sections(model: type[BaseModel] = Section) -> dict[str, type[BaseModel]]:
    """Every model of the configuration, by the name the schema files it under."""
    found = {model.__name__: model}
    for sub in model.__subclasses__():
        found |= _sections(sub)
    return found


def _field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the docstring under it in ``model``'s class body."""
    source = inspect.getsource(sys.modules[model.__module__])
    body = next(
        node.body
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == model.__name__
    )
    return {
        field.target.id: inspect.cleandoc(doc.value.value)
        for field, doc in itertools.pairwise(body)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and isinstance(doc, ast.Expr)
        and isinstance(doc.value, ast.Constant)
        and isinstance(doc.value.value, str)
    }


_SECTIONS = _sections()


def _paragraphs(node: Any) -> Any:
    """Descriptions as paragraphs: a docstring's line breaks inside one are spaces."""
    if isinstance(node, dict):
        return {
            k: _joined(v) if k == "description" and isinstance(v, str) else _paragraphs(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_paragraphs(v) for v in node]
    return node


def _joined(text: str) -> str:
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)
