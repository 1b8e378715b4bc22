"""What every GitHub answer tells the metrics: request counts and latency, the
rate-limit headers, GitHub's clock against ours.

GitHubHttp calls this on every request from every worker thread, so it is built for
that: metric children are looked up once per label set (``labels()`` takes a lock and
builds a key on every call; a request needs four of them) and the ``Date`` header is
parsed once per second, not per answer. Kept apart from the retry loop so the loop
reads as the decisions it makes, not as bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autoscaler.observe.github.answers import number, peer_time
from autoscaler.observe.github.ratelimit import RateGate
from autoscaler.telemetry import Metrics


class AnswerMeter:
    def __init__(self, metrics: Metrics, gate: RateGate, wall_clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.gate = gate
        self.wall_clock = wall_clock
        #: Metric children by label values: ``labels()`` takes a lock and builds a key
        #: on every call; a request needs four of them.
        self._children: dict[tuple[str, ...], Any] = {}
        #: The last ``Date`` header and its time: it changes once a second, not per answer.
        self._date: tuple[str, float | None] = ("", None)

    def child(self, metric: str, *labels: str) -> Any:
        """The metric child for these labels, looked up once (bounded: endpoints x statuses)."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            family = {
                "requests": self.metrics.github_requests,
                "duration": self.metrics.github_request_duration,
                "remaining": self.metrics.github_rate_limit_remaining,
                "limit": self.metrics.github_rate_limit_limit,
                "reset": self.metrics.github_rate_limit_reset,
            }[metric]
            child = self._children[key] = family.labels(*labels)
        return child

    def clock(self, headers: Mapping[str, str]) -> float | None:
        """GitHub's clock minus ours from the answer's ``Date`` (one-second resolution, and
        a little behind by the answer's travel time: fine against a threshold of a minute);
        None when the answer has no usable ``Date``."""
        text = headers.get("date", "")
        last, peer = self._date
        if text != last:
            peer = peer_time(text)
            self._date = (text, peer)  # a tuple store is atomic: a race re-parses, no more
        if peer is None:
            return None
        skew = peer - self.wall_clock()
        self.metrics.clock_skew.labels("github").set(skew)
        return skew

    def rate_limit(self, headers: Mapping[str, str]) -> None:
        """Hand the rate-limit headers to the gate and export them, by resource."""
        self.gate.observe(headers)
        resource = headers.get("x-ratelimit-resource", "core")
        for name in ("remaining", "limit", "reset"):
            value = number(headers.get(f"x-ratelimit-{name}"))
            if value is not None:
                self.child(name, resource).set(value)
