"""GitHub's published references, loaded once per test session (skip locally, fail in CI
when they were not fetched: ``make references``)."""

from __future__ import annotations

import pytest

from tests.conformance.openapi import Description
from tests.conformance.references import (
    OPENAPI,
    WEBHOOK_EXAMPLES,
    WEBHOOK_SCHEMAS,
    require_reference,
)
from tests.conformance.webhooks import WebhookExamples, WebhookSchemas


@pytest.fixture(scope="session")
def description() -> Description:
    """GitHub's OpenAPI description of api.github.com."""
    return Description.load(require_reference(OPENAPI))


@pytest.fixture(scope="session")
def webhook_examples() -> WebhookExamples:
    return WebhookExamples.load(require_reference(WEBHOOK_EXAMPLES))


@pytest.fixture(scope="session")
def webhook_schemas() -> WebhookSchemas:
    return WebhookSchemas.load(require_reference(WEBHOOK_SCHEMAS))
