"""Configuration: the frozen schema, its YAML reader, the alerts section, min_idle schedules.

One public entry point, :func:`load_config` (or :func:`parse_config` for a parsed document).
"""

from autoscaler.config.alerts import (
    PRIORITIES,
    RECEIVER_TYPES,
    AlertRuleConfig,
    AlertsConfig,
    BuiltinAlertsConfig,
    ReceiverConfig,
)
from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.config.load import LoadedConfig, load_config, parse_config, read_config
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
    "QueueObjective",
    "ReceiverConfig",
    "RetryConfig",
    "RunnerTypeConfig",
    "ScalingConfig",
    "StateConfig",
    "WebhookConfig",
    "load_config",
    "parse_config",
    "read_config",
]
