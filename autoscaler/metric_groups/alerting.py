"""Alerting's metrics: alert states and transitions, notification delivery.

Two methods, not one, because the state store's and leadership metrics were registered
between alert state and alert delivery and the registration order (the order of
/metrics) is kept as it was. Split out of telemetry.py unchanged.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from autoscaler.metric_groups.common import P


class AlertMetrics:
    """Alert states (engine) and notification delivery (delivery, alertmanager)."""

    def _register_alerts(self, r: CollectorRegistry) -> None:
        """Firing alerts, transitions and notification attempts."""
        self.alerts_firing = Gauge(
            P + "alerts_firing",
            "Alerts currently firing, by rule.",
            ["rule", "priority"],
            registry=r,
        )
        self.alert_transitions = Counter(
            P + "alert_transitions_total",
            "Alert state transitions.",
            ["rule", "state"],
            registry=r,
        )
        self.alert_notifications = Counter(
            P + "alert_notifications_total",
            "Notification attempts by receiver and result (sent, failed, retried).",
            ["receiver", "result"],
            registry=r,
        )

    def _register_alert_delivery(self, r: CollectorRegistry) -> None:
        """Alertmanager posts and notifications still to deliver."""
        self.alertmanager_posts = Counter(
            P + "alertmanager_posts_total",
            "Posts of the firing and resolved alerts to an Alertmanager (every URL of an "
            "alertmanager receiver), by result (sent, failed, rejected).",
            ["receiver", "result"],
            registry=r,
        )
        self.alert_notifications_pending = Gauge(
            P + "alert_notifications_pending",
            "Notifications not yet delivered (retried next tick).",
            ["receiver"],
            registry=r,
        )
