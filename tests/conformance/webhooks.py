"""GitHub's webhook references: real example payloads and the JSON schema of every event.

``@octokit/webhooks-examples`` (``api.github.com/index.json``) lists, per event, the actions
GitHub sends and example payloads; ``@octokit/webhooks-schemas`` (``schema.json``, JSON
Schema draft 7) defines each ``<event>$<action>`` payload, with ``additionalProperties:
false`` where GitHub's payload is closed. The webhook handler's tests feed it every
:func:`examples` of ``workflow_job``; the fake's own deliveries are checked with
:meth:`WebhookSchemas.errors`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from tests.conformance.openapi import FORMATS

#: The actions GitHub documents for ``workflow_job`` deliveries.
WORKFLOW_JOB_ACTIONS = frozenset({"queued", "waiting", "in_progress", "completed"})


class WebhookExamples:
    """The example payloads of every event, by event name."""

    def __init__(self, index: list[dict[str, Any]]) -> None:
        self._events = {str(entry["name"]): entry for entry in index}

    @classmethod
    def load(cls, path: Path) -> WebhookExamples:
        with path.open(encoding="utf-8") as handle:
            return cls(json.load(handle))

    def actions(self, event: str) -> set[str]:
        """The actions the index says ``event`` has."""
        return set(self._events[event].get("actions", []))

    def examples(self, event: str) -> list[dict[str, Any]]:
        """Every example payload of ``event`` (each has its ``action``)."""
        return [dict(example) for example in self._events[event]["examples"]]


class WebhookSchemas:
    """Validators for ``<event>$<action>`` payloads."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._definitions: dict[str, Any] = document["definitions"]
        self._validators: dict[str, Draft7Validator] = {}

    @classmethod
    def load(cls, path: Path) -> WebhookSchemas:
        with path.open(encoding="utf-8") as handle:
            return cls(json.load(handle))

    def validator(self, event: str, action: str | None) -> Draft7Validator:
        """The validator of one delivery; KeyError when the schemas have no such event."""
        name = event if action is None else f"{event}${action}"
        if name not in self._definitions:
            raise KeyError(f"the webhook schemas define no {name}")
        if name not in self._validators:
            schema = {
                "allOf": [{"$ref": f"#/definitions/{name}"}],
                "definitions": self._definitions,
            }
            self._validators[name] = Draft7Validator(schema, format_checker=FORMATS)
        return self._validators[name]

    def errors(self, event: str, payload: Any) -> list[str]:
        """Every way ``payload`` (one delivery of ``event``) breaks its schema."""
        action = payload.get("action") if isinstance(payload, dict) else None
        validator = self.validator(event, action if isinstance(action, str) else None)
        found = sorted(validator.iter_errors(payload), key=lambda e: [str(p) for p in e.path])
        return [f"{error.json_path}: {error.message[:300]}" for error in found]
