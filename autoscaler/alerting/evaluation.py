"""One alert instance as evaluated at one instant (pure): :class:`Evaluation`.

An :class:`Evaluation` carries everything later stages need (metadata for rendering, the
numbers for the Reason line, ``for`` and ``repeat_interval`` for the lifecycle) so that a
stored alert can still be rendered and resolved after its rule left the configuration.
It lives apart from the rules that make it because the lifecycle, the renderers, the
receivers and both state stores read it and none of them evaluates a rule; the configured
rules (:mod:`autoscaler.alerting.rules`) and the built-in ones
(:mod:`autoscaler.alerting.builtin_rules`) both attach their causes with
:func:`typed_causes`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.domain import Cause
from autoscaler.scale.causes import cause_line

FLEET = "fleet"

#: Runner type -> its causes this tick (:func:`autoscaler.scale.diagnosis.diagnose`).
Causes = Mapping[str, Sequence[Cause]]
#: An alert's causes: (runner type, cause), most important first.
TypedCauses = tuple[tuple[str, Cause], ...]


def alert_name(rule: str) -> str:
    """The rule's ``alertname``: its words run together, each capitalised, everything but
    letters and digits dropped (``Jobs queueing too long`` -> ``JobsQueueingTooLong``).
    Alertmanager routes on it and the Prometheus rules under ``alerts/prometheus`` use the
    same names, so one alert has one name whichever path it takes."""
    name = "".join(w[:1].upper() + w[1:] for w in re.findall(r"[A-Za-z0-9]+", rule))
    return name if name[:1].isalpha() else f"Alert{name}"


def fingerprint(rule: str, scope: str) -> str:
    """Stable id of one alert: sha256 of rule name and scope, 16 hex digits."""
    return hashlib.sha256(f"{rule}\x00{scope}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Evaluation:
    """One alert instance (rule x scope) as evaluated at one instant."""

    rule: str
    scope: str
    team: str
    priority: str
    description: str
    receivers: tuple[str, ...]
    values: Mapping[str, int]
    """Reason line numbers, in display order; always ends with ``threshold_breached``."""
    runbook_url: str = ""
    dashboard_url: str = ""
    for_: float = 0.0
    repeat_interval: float = 4 * 3600.0
    labels: Mapping[str, str] = field(default_factory=dict)
    causes: TypedCauses | None = None
    """Why the jobs wait, per runner type; None where the rule has no ``Cause:`` line
    (alerts about the controller itself, and alerts stored before causes existed)."""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule, self.scope)

    @property
    def alertname(self) -> str:
        return alert_name(self.rule)

    @property
    def cause(self) -> str | None:
        """The ``Cause:`` line's text (None: the alert has no such line)."""
        return None if self.causes is None else cause_line([c for _, c in self.causes])

    def causes_as_dicts(self) -> list[dict[str, str]]:
        """``[{runner_type, code, detail}]``, as every receiver's payload carries them."""
        return [{"runner_type": rt, **c.as_dict()} for rt, c in self.causes or ()]

    @property
    def breached(self) -> bool:
        return self.values.get("threshold_breached", 0) == 1

    @property
    def reason(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "scope": self.scope,
            "team": self.team,
            "priority": self.priority,
            "description": self.description,
            "receivers": list(self.receivers),
            "values": dict(self.values),
            "runbook_url": self.runbook_url,
            "dashboard_url": self.dashboard_url,
            "for": self.for_,
            "repeat_interval": self.repeat_interval,
            "labels": dict(self.labels),
            **({} if self.causes is None else {"causes": self.causes_as_dicts()}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Evaluation:
        return cls(
            rule=str(d["rule"]),
            scope=str(d["scope"]),
            team=str(d["team"]),
            priority=str(d["priority"]),
            description=str(d["description"]),
            receivers=tuple(d["receivers"]),
            values={str(k): int(v) for k, v in d["values"].items()},
            runbook_url=str(d.get("runbook_url", "")),
            dashboard_url=str(d.get("dashboard_url", "")),
            for_=float(d.get("for", 0.0)),
            repeat_interval=float(d.get("repeat_interval", 4 * 3600.0)),
            labels={str(k): str(v) for k, v in d.get("labels", {}).items()},
            causes=None
            if d.get("causes") is None
            else tuple(
                (str(c["runner_type"]), Cause(str(c["code"]), str(c["detail"])))
                for c in d["causes"]
            ),
        )

    def with_values(self, values: Mapping[str, int]) -> Evaluation:
        return replace(self, values=dict(values))


def typed_causes(types: Sequence[str], causes: Causes) -> TypedCauses:
    """The causes of ``types`` in that order, each (runner type, cause) once."""
    out: list[tuple[str, Cause]] = []
    seen: set[tuple[str, str]] = set()
    for name in types:
        for c in causes.get(name, ()):
            if (c.code, c.detail) not in seen:
                seen.add((c.code, c.detail))
                out.append((name, c))
    return tuple(out)
