"""The controller's metrics, one module per stage that sets them.

autoscaler.telemetry.Metrics is the one object every caller holds (``metrics.<name>``);
it inherits these groups and registers them in a fixed order, so /metrics lists the
families as it always did. The groups exist so that a stage's metrics are read next to
each other, not scattered through one 500-line constructor. Adapters only: these import
prometheus_client; the pure core never imports them.
"""
