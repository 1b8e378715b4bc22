"""The handover ledger: kept in memory, written through to the state store.

:class:`~autoscaler.scale.handover_duties.HandoverDuties` reads and changes one
:class:`~autoscaler.scale.handover.HandoverRecord` per instance each tick; this is where
those records live between ticks and how they survive a restart or a failover: loaded once
(and again after :meth:`HandoverLedger.forget`, when another process may have acted),
changes tracked per instance, and only what changed written (``put`` and ``drop``) at
:meth:`HandoverLedger.flush`.
A store that fails keeps the changes pending for the next flush and is counted
(``ci_autoscaler_state_store_errors_total``). Apart from the duties that use it: what the
ledger holds, not what is done with it.
"""

from __future__ import annotations

import logging

from autoscaler.errors import AutoscalerError
from autoscaler.scale.handover import HandoverRecord, HandoverStore
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


class HandoverLedger:
    """Handover records by instance id; without a store, kept in the process only."""

    def __init__(self, store: HandoverStore | None, metrics: Metrics) -> None:
        self.store = store
        self.metrics = metrics
        self.records: dict[str, HandoverRecord] = {}
        self.loaded = store is None
        self._dirty: set[str] = set()
        self._dropped: set[str] = set()

    def forget(self) -> None:
        """Another process may change the ledger now (this one is not acting): read it
        again from the store before acting next."""
        if self.store is not None:
            self.loaded = False
            self.records = {}
            self._dirty.clear()
            self._dropped.clear()

    def load(self) -> bool:
        """Read the records once (again after :meth:`forget`); False: not readable now."""
        if self.loaded:
            return True
        assert self.store is not None
        try:
            raw = self.store.load_jit_records()
        except AutoscalerError as exc:
            self._store_failed(exc, "load_jit_records")
            log.error("handover ledger not loaded (%s %s): new instances wait", exc.kind, exc.code)
            return False
        for iid, text in raw.items():
            try:
                self.records[iid] = HandoverRecord.from_json(iid, text)
            except (ValueError, KeyError, TypeError):
                log.warning("handover ledger: unreadable record for %s ignored", iid)
        self.loaded = True
        log.info("handover ledger: %d records loaded", len(self.records))
        return True

    def put(self, record: HandoverRecord) -> None:
        """Record (or replace) an instance's record; written at the next :meth:`flush`."""
        self.records[record.instance_id] = record
        self._dirty.add(record.instance_id)
        self._dropped.discard(record.instance_id)

    def drop(self, instance_id: str) -> None:
        """Forget an instance's record; deleted at the next :meth:`flush`."""
        self.records.pop(instance_id, None)
        self._dirty.discard(instance_id)
        self._dropped.add(instance_id)

    def flush(self) -> bool:
        """Persist what changed; on failure it stays dirty and the next flush retries."""
        if self.store is None or not (self._dirty or self._dropped):
            self._dirty.clear()
            self._dropped.clear()
            return True
        put = {iid: self.records[iid].to_json() for iid in self._dirty if iid in self.records}
        try:
            self.store.save_jit_records(put, set(self._dropped))
        except AutoscalerError as exc:
            self._store_failed(exc, "save_jit_records")
            log.error("handover ledger not saved (%s %s); retried next tick", exc.kind, exc.code)
            return False
        self._dirty.clear()
        self._dropped.clear()
        return True

    def _store_failed(self, exc: AutoscalerError, operation: str) -> None:
        """``state_store_errors_total{operation,code}``, as the alert stage counts its own."""
        self.metrics.state_store_errors.labels(
            getattr(exc, "operation", "") or operation, exc.code or exc.kind
        ).inc()
