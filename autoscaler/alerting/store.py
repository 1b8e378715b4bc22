"""Moved: the SQLite state store is :mod:`autoscaler.state.sqlite`, behind the port in
:mod:`autoscaler.state.port`. These two names remain for code written before the move
(branches in flight); new code imports from ``autoscaler.state``."""

from autoscaler.state.port import OutboxItem
from autoscaler.state.sqlite import SqliteStore as StateStore

__all__ = ["OutboxItem", "StateStore"]
