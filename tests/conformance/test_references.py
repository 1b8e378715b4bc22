"""The pinned references: one place to bump, and a missing one never passes silently."""

from __future__ import annotations

import pytest

from tests.conformance.references import (
    CACHE,
    OPENAPI,
    WEBHOOK_EXAMPLES,
    WEBHOOK_SCHEMAS,
    pins,
)
from tests.conftest import missing


def test_each_reference_is_pinned_to_one_version_and_file() -> None:
    found = pins()
    assert set(found) == {OPENAPI, WEBHOOK_EXAMPLES, WEBHOOK_SCHEMAS}
    for pin in found.values():
        assert pin.version.count(".") == 2 and pin.version.replace(".", "").isdigit()
        assert pin.path.parent.parent == CACHE
        assert pin.path.parent.name.endswith("-" + pin.version)


def test_a_missing_reference_skips_locally_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not fetched"):
        missing("not fetched")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="not fetched"):
        missing("not fetched")
