"""What every metric group shares: the name prefix and the latency buckets.

One place, so a prefix or a bucket layout cannot drift between groups.
"""

from __future__ import annotations

#: Every metric's name starts with this (Prometheus convention: one namespace per exporter).
P = "ci_autoscaler_"
#: Latencies of calls and ticks: milliseconds to half a minute.
FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
