"""The aims the benchmarks state, and whether this machine can judge them.

Two kinds. A *count* (requests, writes, jobs found, memory) comes out the same on any
machine: it is always judged. A *timed* aim (latency percentiles, wall or CPU time per
unit, replay speed) depends on the machine: it is judged only when the machine was no
busier than one runnable process per core while the benchmark ran (the 1-minute load
average over the CPU count, read when the benchmark starts and when the aim is checked).
A timed aim missed on a busier machine is reported as "not judged here", with the load,
and does not fail ``make bench``; a timed aim met counts as met anywhere.

Each check prints one line and returns whether it keeps the benchmark's verdict: True
when met or not judged. ``python -m bench`` prints every aim at the end and exits 1 only
when a judged aim was missed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

#: Timed aims are judged up to this load average per core.
QUIET_LOAD_PER_CORE = 1.0

MET, MISSED, NOT_JUDGED = "met", "MISSED", "not judged here"


@dataclass(frozen=True)
class Aim:
    bench: str
    name: str
    verdict: str
    load_per_core: float


def load_per_core() -> float:
    """The 1-minute load average over the CPU count."""
    return os.getloadavg()[0] / (os.cpu_count() or 1)


class Aims:
    """The aims checked in one run of the benchmarks (``load``: the machine's load now)."""

    def __init__(self, load: Callable[[], float] = load_per_core) -> None:
        self.load = load
        self.aims: list[Aim] = []
        self._bench = ""
        self._load_at_start = 0.0

    def begin(self, bench: str) -> None:
        """A benchmark starts: its aims are named after it, the machine's load is noted."""
        self._bench, self._load_at_start = bench, self.load()

    def count(self, name: str, met: bool) -> bool:
        """An aim on something counted: judged on any machine."""
        return self._record(name, MET if met else MISSED, self.load())

    def timed(self, name: str, met: bool) -> bool:
        """An aim on a time: judged only on a machine quiet enough (see the module)."""
        load = max(self._load_at_start, self.load())
        if met:
            verdict = MET
        elif load > QUIET_LOAD_PER_CORE:
            verdict = NOT_JUDGED
        else:
            verdict = MISSED
        return self._record(name, verdict, load)

    def _record(self, name: str, verdict: str, load: float) -> bool:
        self.aims.append(Aim(self._bench, name, verdict, load))
        note = f" (load average {load:.1f} per core)" if verdict == NOT_JUDGED else ""
        print(f"  aim {name}: {verdict}{note}", flush=True)
        return verdict != MISSED

    def summary(self) -> tuple[str, bool]:
        """The closing lines, and whether every judged aim was met."""
        met = [a for a in self.aims if a.verdict == MET]
        missed = [a for a in self.aims if a.verdict == MISSED]
        unjudged = [a for a in self.aims if a.verdict == NOT_JUDGED]
        lines = [f"aims: {len(met)} met, {len(missed)} missed, {len(unjudged)} not judged here"]
        lines += [f"  MISSED {a.bench}: {a.name}" for a in missed]
        lines += [
            f"  not judged here {a.bench}: {a.name} (missed at load average"
            f" {a.load_per_core:.1f} per core; judged up to {QUIET_LOAD_PER_CORE:g})"
            for a in unjudged
        ]
        return "\n".join(lines), not missed


#: This process's run (the benchmarks call the functions below).
RUN = Aims()
begin, count, timed, summary = RUN.begin, RUN.count, RUN.timed, RUN.summary
