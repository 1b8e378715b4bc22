"""ci-autoscaler: see the CI queue, be told when it backs up, and scale the runner pools."""

__version__ = "0.1.0"
