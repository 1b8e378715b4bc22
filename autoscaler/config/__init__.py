"""Configuration: the schema (pydantic models), the YAML reader, the user-facing messages.

One entry point, :func:`load_config` (:func:`read_config` with warnings,
:func:`parse_config` for a parsed document); :func:`json_schema` is what ``ci-autoscaler
config schema`` prints. The names below load on first use: importing the package, or its
pure modules (``durations``, ``yamlfile``), does not import pydantic, so a command that
reads no configuration (``--help``) never pays for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoscaler.config.alerts import (
        PRIORITIES,
        RECEIVER_TYPES,
        AlertRuleConfig,
        AlertsConfig,
        BuiltinAlertsConfig,
        ReceiverConfig,
        StageRegressionConfig,
    )
    from autoscaler.config.export import json_schema
    from autoscaler.config.job_retry import JobRetryConfig
    from autoscaler.config.load import LoadedConfig, load_config, parse_config, read_config
    from autoscaler.config.pools import PoolConfig, WarmPoolConfig
    from autoscaler.config.schema import (
        DEFAULT_HOSTED_LABELS,
        DEFAULT_STATE_PATH,
        DYNAMODB,
        SQLITE,
        AwsConfig,
        BudgetConfig,
        Config,
        GitHubAppConfig,
        GitHubConfig,
        QueueObjective,
        RetryConfig,
        RunnerTypeConfig,
        ScalingConfig,
        StateConfig,
        WebhookConfig,
    )

__all__ = [
    "DEFAULT_HOSTED_LABELS",
    "DEFAULT_STATE_PATH",
    "DYNAMODB",
    "PRIORITIES",
    "RECEIVER_TYPES",
    "SQLITE",
    "AlertRuleConfig",
    "AlertsConfig",
    "AwsConfig",
    "BudgetConfig",
    "BuiltinAlertsConfig",
    "Config",
    "GitHubAppConfig",
    "GitHubConfig",
    "JobRetryConfig",
    "LoadedConfig",
    "PoolConfig",
    "QueueObjective",
    "ReceiverConfig",
    "RetryConfig",
    "RunnerTypeConfig",
    "ScalingConfig",
    "StageRegressionConfig",
    "StateConfig",
    "WarmPoolConfig",
    "WebhookConfig",
    "json_schema",
    "load_config",
    "parse_config",
    "read_config",
]

#: The module each name lives in (the rest: ``schema``).
_HOME = {
    "PRIORITIES": "alerts",
    "RECEIVER_TYPES": "alerts",
    "AlertRuleConfig": "alerts",
    "AlertsConfig": "alerts",
    "BuiltinAlertsConfig": "alerts",
    "ReceiverConfig": "alerts",
    "StageRegressionConfig": "alerts",
    "json_schema": "export",
    "JobRetryConfig": "job_retry",
    "LoadedConfig": "load",
    "PoolConfig": "pools",
    "WarmPoolConfig": "pools",
    "load_config": "load",
    "parse_config": "load",
    "read_config": "load",
}


def __getattr__(name: str) -> Any:
    """Import a name's module when the name is first asked for."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME.get(name, 'schema')}"), name)
    globals()[name] = value
    return value
