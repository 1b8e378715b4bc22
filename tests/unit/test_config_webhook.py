"""The optional ``webhook`` section: absent means polling alone; its secret never shows."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import parse_config
from autoscaler.errors import ConfigError
from tests.factories import config_doc


def test_without_a_webhook_section_nothing_changes() -> None:
    assert parse_config(config_doc(), env={}).webhook is None


def test_the_documented_section() -> None:
    config = parse_config(
        config_doc(
            webhook={
                "listen": "0.0.0.0:9465",
                "secret": "${GITHUB_WEBHOOK_SECRET}",
                "reconcile_interval": "5m",
            }
        ),
        env={"GITHUB_WEBHOOK_SECRET": "s3cr3t-hook-value"},
    )
    hook = config.webhook
    assert hook is not None
    assert (hook.listen_host, hook.listen_port, hook.reconcile_interval) == ("0.0.0.0", 9465, 300)
    assert hook.secret.reveal() == "s3cr3t-hook-value"
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(hook)
    assert (hook.debounce, hook.queue_size, hook.max_body_bytes) == (0.2, 1000, 1_048_576)


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no-secret", {"listen": "127.0.0.1:9465"}, "webhook.secret: is required"),
    ("empty-secret", {"secret": ""}, "webhook.secret: must be a non-empty string"),
    ("bad-listen", {"secret": "x", "listen": "nowhere"}, "webhook.listen: must be HOST:PORT"),
    ("zero-reconcile", {"secret": "x", "reconcile_interval": "0s"}, "greater than zero"),
    ("unknown-key", {"secret": "x", "reconcile": "5m"}, "webhook.reconcile: unknown key"),
    (
        "same-port-as-metrics",
        {"secret": "x", "listen": "0.0.0.0:9464"},
        "webhook.listen: must differ from listen",
    ),
    ("not-a-mapping", "on", "webhook: must be a mapping"),  # type: ignore[list-item]
    ("hook-id-zero", {"secret": "x", "hook_id": 0}, "webhook.hook_id: must be >= 1"),
    ("hook-id-negative", {"secret": "x", "hook_id": -4}, "webhook.hook_id: must be >= 1"),
    ("hook-id-text", {"secret": "x", "hook_id": "my-hook"}, "hook_id: must be an integer"),
    ("hook-id-bool", {"secret": "x", "hook_id": True}, "hook_id: must be an integer"),
]


@pytest.mark.parametrize(("section", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_sections_are_reported(section: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_doc(webhook=section), env={})
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_an_unset_secret_variable_is_named_not_shown() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_doc(webhook={"secret": "${HOOK_SECRET}"}), env={})
    assert any("HOOK_SECRET is not set" in p for p in info.value.problems)


def test_the_example_configs_webhook_block_parses_when_uncommented() -> None:
    """config.example.yaml ships the section commented out (nothing changes without it);
    uncommented as the README says, it is valid and means what its comments say."""
    import re  # noqa: PLC0415

    from tests.unit.test_config import REPO  # noqa: PLC0415

    text = (REPO / "config.example.yaml").read_text(encoding="utf-8")
    block = re.search(r"^# webhook:\n(?:#   .*\n)+", text, re.MULTILINE)
    assert block is not None
    uncommented = text.replace(block.group(0), re.sub(r"^# ?", "", block.group(0), flags=re.M))
    import yaml  # noqa: PLC0415

    config = parse_config(
        yaml.safe_load(uncommented), env={"GITHUB_TOKEN": "x", "GITHUB_WEBHOOK_SECRET": "y"}
    )
    assert config.webhook is not None
    assert (config.webhook.listen_port, config.webhook.reconcile_interval) == (9465, 300.0)
    assert config.webhook.debounce == 0.2
    assert config.webhook.hook_id == 123456789


def test_hook_id_is_optional_and_read_as_an_integer() -> None:
    """Without ``hook_id`` no delivery log is read (the lean reconcile alone)."""
    assert parse_config(config_doc(webhook={"secret": "x"}), env={}).webhook.hook_id is None  # type: ignore[union-attr]
    config = parse_config(config_doc(webhook={"secret": "x", "hook_id": "4242"}), env={})
    assert config.webhook is not None and config.webhook.hook_id == 4242
