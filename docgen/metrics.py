"""The metrics reference: every family ``Metrics`` registers, from a fresh registry.

Families are grouped under the ``# --- <section>`` comments of ``Metrics.__init__``, in the
order ``/metrics`` lists them. Label names are read from the metric objects, since a
family with no samples yet shows none.
"""

from __future__ import annotations

import inspect
import re
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


def sections() -> dict[str, str]:
    """Family name -> the constructor's section comment it is defined under."""
    out: dict[str, str] = {}
    title = "Build"
    for line in inspect.getsource(Metrics.__init__).splitlines():
        heading = re.match(r"\s*# --- (.+)", line)
        if heading:
            title = heading.group(1).strip()
            title = title[:1].upper() + title[1:]
        for name in re.findall(r'P \+ "([a-z0-9_]+)"', line):
            out["ci_autoscaler_" + name.removesuffix("_total")] = title
    return out


def render() -> str:
    found = families()
    titles = sections()
    grouped: dict[str, list[Family]] = {}
    for f in found:
        base = f.name.removesuffix(_SUFFIX.get(f.type, ""))
        grouped.setdefault(titles.get(base, "Other"), []).append(f)
    parts = [
        "# Metrics reference",
        "",
        GENERATED.format(source="autoscaler.telemetry.Metrics on a fresh registry"),
        "",
        "Every metric the controller exports on `/metrics`, in the order it lists them.",
        "",
        "- Every name starts with `ci_autoscaler_`. Values are in base units (seconds).",
        "- Counters end in `_total`. A histogram also exports `_bucket`, `_sum` and"
        " `_count` series. Counters and histograms also export their creation time as"
        " `<name>_created`.",
        "- Labels are bounded by the configuration (runner types, pools, receivers, rules)"
        " or by the code. Never a job id or a repository list.",
        f"- {len(found)} metrics in all.",
    ]
    for title, fams in grouped.items():
        rows = [
            [code(f.name), f.type, ", ".join(code(n) for n in f.labels), cell(f.help)] for f in fams
        ]
        parts += ["", f"## {title}", "", table(["Metric", "Type", "Labels", "Help"], rows)]
    return "\n".join(parts) + "\n"
