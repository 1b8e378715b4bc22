"""The metrics reference: every family ``Metrics`` registers, from a fresh registry.

The families are grouped by the metric group (``autoscaler/metric_groups/``) whose
``_register_*`` method defines them, in the order ``/metrics`` lists them. Label names
are read from the metric objects, since a family with no samples yet shows none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from autoscaler.telemetry import Metrics
from docgen.markdown import GENERATED, cell, code, table

#: The exported name's suffix by family type (the family's own name has none).
_SUFFIX = {"counter": "_total", "info": "_info"}


@dataclass(frozen=True)
class Family:
    name: str
    """The name as ``/metrics`` exports it (counters with ``_total``)."""
    type: str
    labels: tuple[str, ...]
    help: str


def families() -> list[Family]:
    """Every family, in registration order."""
    metrics = Metrics(CollectorRegistry())
    labels = {
        w._name: tuple(w._labelnames)
        for w in vars(metrics).values()
        if isinstance(w, MetricWrapperBase)
    }
    return [
        Family(f.name + _SUFFIX.get(f.type, ""), f.type, labels.get(f.name, ()), f.documentation)
        for f in metrics.registry.collect()
    ]


#: Headings that ``str.capitalize`` gets wrong.
_TITLES = {"github": "GitHub", "job_retry": "Jobs lost to infrastructure"}


def _groups() -> list[tuple[str, str, set[str]]]:
    """(title, summary, family names) per metric group class, each registered on its own."""
    out = []
    for cls in Metrics.__mro__:
        registers: list[Callable[[object, CollectorRegistry], None]] = [
            fn for name, fn in vars(cls).items() if name.startswith("_register")
        ]
        if not registers:
            continue
        registry = CollectorRegistry()
        bare = object.__new__(Metrics)
        for register in registers:
            register(bare, registry)
        module = cls.__module__.rsplit(".", 1)[-1]
        title = _TITLES.get(module, module.replace("_", " ").capitalize())
        summary = " ".join((inspect.getdoc(cls) or "").split("\n\n", 1)[0].split())
        names = {f.name + _SUFFIX.get(f.type, "") for f in registry.collect()}
        out.append((title, summary, names))
    return out


def render() -> str:
    found = families()
    groups = _groups()
    grouped = set().union(*(names for _, _, names in groups))
    sections = [(t, s, [f for f in found if f.name in names]) for t, s, names in groups]
    rest = [f for f in found if f.name not in grouped]
    if rest:
        sections.append(("Build", "The running version.", rest))
    sections.sort(key=lambda s: min(found.index(f) for f in s[2]))
    parts = [
        "# Metrics reference",
        "",
        GENERATED.format(source="autoscaler.telemetry.Metrics on a fresh registry"),
        "",
        "Every metric the controller exports on `/metrics`, in the order it lists them.",
        "",
        "- Every name starts with `ci_autoscaler_`. Values are in base units (seconds).",
        "- Counters end in `_total`. A histogram also exports `_bucket`, `_sum` and"
        " `_count` series.",
        "- Labels are bounded by the configuration (runner types, pools, receivers, rules)"
        " or by the code. Never a job id or a repository list.",
        f"- {len(found)} metrics in all.",
    ]
    for title, summary, fams in sections:
        rows = [
            [code(f.name), f.type, ", ".join(code(n) for n in f.labels), cell(f.help)] for f in fams
        ]
        parts += ["", f"## {title}", "", cell(summary), ""]
        parts.append(table(["Metric", "Type", "Labels", "Help"], rows))
    return "\n".join(parts) + "\n"
