"""The schema helper on a hand-written description: what OpenAPI 3.0 means, JSON Schema says.

These need no fetched reference: they pin the conversion (nullable, $ref, enums) that the
conformance tests stand on, so a bug here cannot make them pass vacuously.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.openapi import Description, errors

DOC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"version": "1.0"},
    "paths": {
        "/things/{id}": {
            "get": {
                "parameters": [{"$ref": "#/components/parameters/state"}],
                "responses": {
                    "200": {
                        "description": "ok",
                        "headers": {"Link": {"$ref": "#/components/headers/link"}},
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/thing"},
                                "examples": {"default": {"$ref": "#/components/examples/a"}},
                            }
                        },
                    },
                    "304": {"$ref": "#/components/responses/not_modified"},
                },
            }
        },
        "/things/all": {"get": {"responses": {"204": {"description": "none"}}}},
    },
    "components": {
        "parameters": {
            "state": {"name": "state", "in": "query", "schema": {"enum": ["on", "off"]}}
        },
        "headers": {"link": {"schema": {"type": "string"}}},
        "responses": {"not_modified": {"description": "Not modified"}},
        "examples": {"a": {"value": {"id": 1, "owner": None, "state": "on", "x": "kept"}}},
        "schemas": {
            "thing": {
                "type": "object",
                "required": ["id", "owner", "state"],
                "properties": {
                    "id": {"type": "integer", "example": 3, "x-github": {"a": 1}},
                    "owner": {"$ref": "#/components/schemas/nullable-user"},
                    "state": {"type": "string", "nullable": True, "enum": ["on", "off"]},
                    "when": {"type": "string", "format": "date-time"},
                    "parent": {"nullable": True, "allOf": [{"$ref": "#/components/schemas/thing"}]},
                },
            },
            "nullable-user": {
                "type": "object",
                "required": ["login"],
                "properties": {"login": {"type": "string"}},
                "nullable": True,
            },
        },
    },
}


@pytest.fixture
def doc() -> Description:
    return Description(DOC)


CASES = [
    ("valid", {"id": 1, "owner": {"login": "a"}, "state": "on"}, []),
    ("nullable-ref-is-null", {"id": 1, "owner": None, "state": None}, []),
    ("not-nullable-is-null", {"id": None, "owner": None, "state": "on"}, ["$.id"]),
    ("missing-required", {"id": 1, "state": "on"}, ["$"]),
    ("outside-enum", {"id": 1, "owner": None, "state": "dim"}, ["$.state"]),
    ("nested-required", {"id": 1, "owner": {}, "state": "on"}, ["$.owner"]),
    ("bad-date-time", {"id": 1, "owner": None, "state": "on", "when": "today"}, ["$.when"]),
    ("recursive-ok", {"id": 1, "owner": None, "state": "on", "parent": None}, []),
    ("recursive-bad", {"id": 1, "owner": None, "state": "on", "parent": {"id": 2}}, ["$.parent"]),
]


@pytest.mark.parametrize(("body", "where"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_converted_schema_judges_as_openapi_means(
    doc: Description, body: dict[str, Any], where: list[str]
) -> None:
    found = errors(doc.validator("/things/{id}", "GET", 200), body)
    assert [error.split(":")[0] for error in found] == where, found


def test_lookups_follow_refs(doc: Description) -> None:
    assert doc.statuses("/things/{id}", "GET") == {200, 304}
    assert doc.response_schema("/things/{id}", "GET", 304) is None
    assert doc.examples("/things/{id}", "GET", 200)["default"]["x"] == "kept"
    assert doc.headers("/things/{id}", "GET", 200) == {"link": {"type": "string"}}
    assert doc.parameter("/things/{id}", "GET", "state")["schema"]["enum"] == ["on", "off"]
    with pytest.raises(KeyError, match="documents no 404"):
        doc.response("/things/{id}", "GET", 404)


def test_a_literal_path_wins_over_a_parameter(doc: Description) -> None:
    assert doc.template("/things/all?page=2") == "/things/all"
    assert doc.template("/things/42") == "/things/{id}"
    assert doc.template("/elsewhere") is None


def test_undocumented_properties_are_named(doc: Description) -> None:
    schema = doc.body_schema("/things/{id}", "GET", 200)
    body = {"id": 1, "owner": {"login": "a", "extra": 1}, "state": "on", "x": 2}
    assert sorted(doc.undocumented(schema, body)) == ["$.owner.extra", "$.x"]
