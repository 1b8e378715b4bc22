"""What keeps the controller from being ready, reported by the stages that know.

The controller's readiness is a pure function of what it holds: the age of its last good
poll, and this. Stages and their workers report a problem under a component name (the
alert stage and its delivery workers: ``state``, when the state store cannot be written;
the lease keeper: ``lease``, when the state table cannot be reached)
and clear it once the component works again; ``/readyz`` fails while any problem stands
and says which. Nothing here does I/O: the controller stays pure, the adapters report in.

Thread-safe: the delivery workers report from their own threads.
"""

from __future__ import annotations

import threading

#: The state store (alert states, the notification outbox) cannot be written.
STATE = "state"
#: The leader lease cannot be read or renewed (``state.backend: dynamodb``): the state
#: table is missing, forbidden or unreachable, so this controller cannot lead.
LEASE = "lease"


class Health:
    """Problems by component; empty means nothing reported keeps the controller unready."""

    def __init__(self) -> None:
        self._problems: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, component: str, problem: str | None) -> None:
        """Record ``component``'s problem (a one-line message), or clear it with None."""
        with self._lock:
            if problem is None:
                self._problems.pop(component, None)
            else:
                self._problems[component] = problem

    def problems(self) -> dict[str, str]:
        """The standing problems by component (a copy)."""
        with self._lock:
            return dict(self._problems)
