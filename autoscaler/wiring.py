"""Builds the real controller from a Config: adapters chosen here, nowhere else."""

from __future__ import annotations

from autoscaler.config import Config
from autoscaler.controller import Controller
from autoscaler.telemetry import Metrics


def build_controller(config: Config, metrics: Metrics) -> Controller:
    """A controller over GitHub (and, when configured, alerting and the AWS pools)."""
    from autoscaler.sources.github import GitHubSource  # noqa: PLC0415 (keeps CLI start light)

    source = GitHubSource(config.github, metrics)
    return Controller(config, source, metrics)
